// The eviction policies' cost per expert request at real cache sizes: a hit pins its slot
// and releases it (Remove, Insert); a miss also takes the victim's slot (Victim, Assign).
// Slot counts: qwen3-30b-a3b's cache at the 50 % limit (2723), every expert of DeepSeek-V3
// (58 x 256) and of Kimi K2 (60 x 384) at a quarter and in full.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "experts/eviction_policy.h"

namespace mt {
namespace {

constexpr uint32_t kKeys = 60 * 384;  // Kimi K2's routed experts

// A cache of n slots, full and evictable, then requests with a skewed key popularity:
// hits keep their slot, misses take the victim's.
void Requests(benchmark::State& state, const char* name) {
  const auto n = static_cast<int32_t>(state.range(0));
  std::vector<float> score(kKeys);
  for (uint32_t k = 0; k < kKeys; ++k) score[k] = 1.0f / float(1 + k % 97);
  auto p = MakeEvictionPolicy(name, n, kKeys, score);
  std::vector<int32_t> slot_of(kKeys, -1);  // (kKeys) the store's maps, both ways
  std::vector<uint32_t> key_of(n);          // (n)
  for (int32_t s = 0; s < n; ++s) {
    p->Assign(s, uint32_t(s));
    slot_of[s] = s;
    key_of[s] = uint32_t(s);
    p->Insert(s);
  }
  std::mt19937 rng(7);
  std::geometric_distribution<uint32_t> skew(4.0 / kKeys);
  int64_t misses = 0;
  for (auto _ : state) {
    const uint32_t key = skew(rng) % kKeys;
    p->Access(key);
    int32_t s = slot_of[key];
    if (s < 0) {
      s = p->Victim();
      ++misses;
      slot_of[key_of[s]] = -1;
      p->Remove(s);
      p->Assign(s, key);
      slot_of[key] = s;
      key_of[s] = key;
    } else {
      p->Remove(s);
    }
    p->Insert(s);
  }
  state.counters["miss%"] = 100.0 * double(misses) / double(state.iterations());
}

void Lfu(benchmark::State& state) { Requests(state, "lfu"); }
void Lru(benchmark::State& state) { Requests(state, "lru"); }
void Placement(benchmark::State& state) { Requests(state, "placement"); }

BENCHMARK(Lfu)->Arg(2723)->Arg(58 * 256 / 4)->Arg(60 * 384 / 4)->Arg(60 * 384);
BENCHMARK(Lru)->Arg(2723)->Arg(60 * 384);
BENCHMARK(Placement)->Arg(2723)->Arg(58 * 256 / 4)->Arg(60 * 384 / 4)->Arg(60 * 384);

}  // namespace
}  // namespace mt

BENCHMARK_MAIN();
