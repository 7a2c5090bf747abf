// `moetier bench`: prefill (pp) and decode (tg) speeds in llama-bench's spirit, with a
// roofline measured in the same run: the bytes of weights one decoded token reads, the
// bandwidth that achieves, and the machine's memory read bandwidth measured right then.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "engine/context.h"

namespace mt {

struct BenchSample {
  std::string test;                 // "pp128", "tg32", "tg32-b8", "tg32 @ d512"
  int n_prompt = 0;                 // tokens per prefill
  int n_depth = 0;                  // positions already in the cache when the test runs
  int n_gen = 0;                    // tokens generated per sequence
  int n_seq = 1;                    // sequences decoded together
  std::vector<double> tps;          // tokens/s of each repetition
  double mean = 0, sd = 0;          // of tps
  uint64_t storage_read_bytes = 0;  // read from storage by the process during the test
};

// Prefill of `n_prompt` seeded random tokens, logits of the last only, after `n_depth`
// positions of other random tokens (filled once, not timed; llama-bench's -d).
Result<BenchSample> BenchPrefill(Context& ctx, int n_prompt, int n_depth, int reps, uint64_t seed);

// Decode of `n_gen` tokens per sequence, one token per sequence per step, `n_seq`
// sequences together, each after `n_depth` positions of random tokens (filled once, not
// timed; 0: from an empty cache, as llama-bench's tg).
// `after_warmup`, if set, runs between the warm-up repetition and the measured ones (the CLI
// restarts its I/O counters there, so bytes per token match the measured speed).
Result<BenchSample> BenchDecode(Context& ctx, int n_gen, int n_seq, int n_depth, int reps,
                                uint64_t seed, const std::function<void()>& after_warmup = {});

// Weight bytes and multiply-adds one token needs: every dense matrix but the embedding
// (one row of it), the head, and top-k experts of every layer; and the KV cache bytes it
// reads per position it attends to (an f16 cache, bench's).
struct TokenCost {
  uint64_t bytes = 0;                  // decode: weight bytes read per token
  uint64_t kv_bytes_per_position = 0;  // decode: K and V of every layer, of the cache's type
  uint64_t state_bytes = 0;            // decode: recurrent states read per token (DeltaNet)
  uint64_t macs_per_token = 0;         // prefill: multiply-adds per token, without the head
  uint64_t macs_head = 0;              // the head, once per sequence
};
TokenCost TokenCostOf(const Model& model, KvTypes kv_types);

}  // namespace mt
