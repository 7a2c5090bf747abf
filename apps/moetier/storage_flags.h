// The storage flags every model-running command shares (--moe-storage, --mem-budget,
// --expert-cache, --io, --direct, --warm, --stats, --stats-json), and the reports they ask
// for: the memory plan at start-up and the tier statistics at the end.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "base/status.h"
#include "engine/context.h"
#include "engine/model.h"

namespace mt::cli {

struct StorageFlags {
  std::string moe_storage = "auto";
  std::string mem_budget;
  std::string expert_cache;
  std::string io = "auto";
  std::string direct = "auto";
  bool warm = false;
  bool stats = false;
  std::string stats_json;
  std::string prefetch = "next-layer";
  uint32_t prefetch_depth = 0;  // 0: auto (StorageOptions)
  std::string eviction = "lfu";
  std::string placement;
  double placement_share = 0.25;
  std::string routing_stats;
  std::string device = "cpu";
  std::string gpu_expert_cache;
};

void AddStorageFlags(CLI::App& sub, StorageFlags* flags);

// Checks the flag values and fills `out` (and the routing statistics file to load).
// Errors name the flag.
Status ResolveStorageFlags(const StorageFlags& flags, ContextOptions* out);

// How to load the model for these flags: with --device, the dense matrices the device will
// hold get no host copy (LoadOptionsFor).
Result<LoadOptions> LoadOptionsOf(const StorageFlags& flags, KvTypes kv_types);

// Saves the live routing statistics to --routing-stats FILE, if given.
Status SaveRoutingStats(const StorageFlags& flags, Context& ctx);

// "moetier: memory plan: ..." on stderr.
void PrintStoragePlan(const Context& ctx);

// Prints the tier statistics (with --stats) and writes them as JSON (with --stats-json).
Status ReportTierStats(const StorageFlags& flags, Context& ctx, double wall_seconds,
                       uint64_t tokens);

}  // namespace mt::cli
