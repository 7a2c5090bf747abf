// Where the routed experts live (--moe-storage), and the memory plan that decides it.
//
// The budget is --mem-budget, or what the machine really has (the cgroup limit and
// MemAvailable) minus a reserve. Dense weights, the KV cache and scratch are placed first;
// the expert cache gets the rest (or --expert-cache). auto picks resident when every
// expert fits, else stream; mmap is chosen explicitly.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "experts/expert_store.h"
#include "io/io_engine.h"

namespace mt {

class Model;
class ThreadPool;

enum class MoeStorage { kAuto, kResident, kMmap, kStream };

struct StorageOptions {
  MoeStorage mode = MoeStorage::kAuto;
  std::optional<uint64_t> mem_budget;      // bytes; default from the machine
  std::optional<uint64_t> expert_cache;    // bytes; default: what the budget leaves
  std::optional<double> expert_cache_pct;  // N% of all the experts (instead of bytes)
  IoBackend io = IoBackend::kAuto;
  DirectMode direct = DirectMode::kAuto;
  bool warm = false;        // mmap: pre-fault experts in the background
  int io_queue_depth = 16;  // reads in flight
  // stream: predict the next layer's experts with its router on the current hidden state
  // and read the predicted misses ahead (advisory).
  bool prefetch = true;
  // How many layers ahead it predicts: 1, the next layer; d > 1 also hints layers il+2..il+d
  // from the same hidden state (less accurate; pays where reads land sooner than compute
  // needs them, as from a pack: docs/journal/tiering.md). 0: 2 for an expert-major pack, else 1.
  uint32_t prefetch_depth = 0;
  std::string eviction = "lfu";  // stream: lfu, lru, placement (docs/journal/tiering.md)
  // stream: routing statistics (moetier profile / --routing-stats) whose hottest experts
  // are pinned in the cache, up to placement_share of its slots.
  std::string placement_file;
  double placement_share = 0.25;
  // Experts a device holds (engine/gpu_experts.h; set by Context::Create): n_layer x n_expert
  // flags, empty for none, and their bytes. The resident tier copies only the others.
  std::vector<uint8_t> on_device;
  uint64_t on_device_bytes = 0;
  // What such a device holds in the host's RAM (a CPU device or an integrated GPU): counted
  // with the dense weights in the budget.
  uint64_t device_in_ram = 0;
  // Builds the stream tier's I/O engine instead of CreateIoEngine(io, io_queue_depth): a
  // fault-injecting one in tests, a read-recording one for `bench --read-trace`.
  std::function<Result<std::unique_ptr<IoEngine>>()> make_io;
};

// Parses "auto|resident|mmap|stream", "auto|uring|pread", "auto|on|off" and
// "BYTES|N%" (--expert-cache). Errors name the flag value.
Result<MoeStorage> ParseMoeStorage(const std::string& s);
Result<IoBackend> ParseIoBackend(const std::string& s);
Result<DirectMode> ParseDirectMode(const std::string& s);
Status ParseExpertCache(const std::string& s, StorageOptions* options);
// "BYTES" (e.g. 4G) or "N%" (0 < N <= 100); errors name `flag`.
struct BytesOrPercent {
  std::optional<uint64_t> bytes;
  std::optional<double> percent;
};
Result<BytesOrPercent> ParseBytesOrPercent(std::string_view flag, const std::string& s);

struct StoragePlan {
  MoeStorage mode = MoeStorage::kAuto;  // the mode chosen (never kAuto)
  uint64_t budget = 0;                  // bytes the process may use
  std::string budget_source;            // "--mem-budget", "cgroup limit (file)", "MemAvailable"
  uint64_t reserve = 0;                 // kept free for the allocator, stacks, libraries
  uint64_t dense = 0;                   // resident dense weights
  uint64_t dense_on_device = 0;         // dense matrices only the device holds (no host copy)
  uint64_t kv_cache = 0;
  // What the KV cache holds when it is not per-head K and V (MLA: the latent rows), else "".
  std::string kv_layout;
  uint64_t scratch = 0;
  uint64_t experts_total = 0;      // all routed experts
  uint64_t experts_on_device = 0;  // of those, the bytes a device holds (not in the store)
  uint64_t device_in_ram = 0;      // a device's memory that is the host's (StorageOptions)
  uint64_t expert_cache =
      0;  // RAM for experts: all of them (resident), the cache (stream), 0 (mmap)
  uint32_t expert_cache_slots = 0;  // stream: the experts that cache holds at once
  // The device tier (--device, --gpu-expert-cache): what it holds, or why there is none;
  // empty when none was asked for.
  std::string gpu;

  // One line per item, for start-up and --stats.
  std::string ToString() const;
};

// Decides the plan. Errors: dense + KV + scratch over the budget (with the numbers and what
// to change); an explicit resident mode that does not fit.
Result<StoragePlan> PlanStorage(const Model& model, uint64_t kv_bytes, uint64_t scratch_bytes,
                                const StorageOptions& options);

class RoutingStats;

// Creates the store the plan asks for. `profile` (may be null) gives the placement-aware
// eviction policy its scores; `pool` (may be null) loads resident experts in parallel.
Result<std::unique_ptr<ExpertStore>> CreateExpertStore(const Model& model, const StoragePlan& plan,
                                                       const StorageOptions& options,
                                                       const RoutingStats* profile,
                                                       ThreadPool* pool = nullptr);

// Bytes of one expert of each layer (for ranking by activations per byte).
std::vector<uint64_t> ExpertBytesPerLayer(const Model& model);

const char* MoeStorageName(MoeStorage m);

}  // namespace mt
