#include "storage_flags.h"

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "base/units.h"

namespace mt::cli {

void AddStorageFlags(CLI::App& sub, StorageFlags* f) {
  sub.add_option("--moe-storage", f->moe_storage,
                 "Where routed experts live: auto, resident, mmap, stream")
      ->default_str("auto");
  sub.add_option("--mem-budget", f->mem_budget,
                 "Memory budget, e.g. 8G (default: cgroup limit / MemAvailable minus a reserve)");
  sub.add_option("--expert-cache", f->expert_cache,
                 "Expert cache size in stream mode: BYTES (e.g. 4G) or N% of the experts");
  sub.add_option("--io", f->io, "Expert reads: auto, uring, pread")->default_str("auto");
  sub.add_option("--direct", f->direct, "O_DIRECT for expert reads: auto, on, off")
      ->default_str("auto");
  sub.add_flag("--warm", f->warm, "mmap mode: pre-fault experts in the background");
  sub.add_flag("--stats", f->stats, "Print expert tier statistics at the end");
  sub.add_option("--stats-json", f->stats_json, "Write expert tier statistics to a JSON file");
}

Status ResolveStorageFlags(const StorageFlags& f, StorageOptions* o) {
  Result<MoeStorage> mode = ParseMoeStorage(f.moe_storage);
  if (!mode.ok()) return mode.status();
  o->mode = mode.value();
  Result<IoBackend> io = ParseIoBackend(f.io);
  if (!io.ok()) return io.status();
  o->io = io.value();
  Result<DirectMode> direct = ParseDirectMode(f.direct);
  if (!direct.ok()) return direct.status();
  o->direct = direct.value();
  if (!f.mem_budget.empty()) {
    Result<uint64_t> b = ParseBytes(f.mem_budget);
    if (!b.ok()) return b.status().WithContext("--mem-budget");
    o->mem_budget = b.value();
  }
  if (!f.expert_cache.empty()) MT_RETURN_IF_ERROR(ParseExpertCache(f.expert_cache, o));
  o->warm = f.warm;
  return Status::Ok();
}

void PrintStoragePlan(const Context& ctx) {
  std::fprintf(stderr, "moetier: %s\n", ctx.storage_plan().ToString().c_str());
}

namespace {

nlohmann::json CountersJson(const TierCounters& c) {
  return {{"requests", c.requests},
          {"hits", c.hits},
          {"misses", c.misses},
          {"bytes_payload", c.bytes_payload},
          {"bytes_physical", c.bytes_physical},
          {"reads", c.reads},
          {"evictions", c.evictions},
          {"demand_stall_s", c.demand_stall_ns * 1e-9},
          {"read_errors", c.read_errors}};
}

}  // namespace

Status ReportTierStats(const StorageFlags& f, Context& ctx, double wall_seconds, uint64_t tokens) {
  const TierStats& s = ctx.expert_store().stats();
  if (f.stats) {
    const TierCounters& t = s.total;
    std::fprintf(stderr,
                 "moetier: experts (%s): %llu requests, %llu hits (%.1f%%), %llu misses, "
                 "%llu evictions; read %s payload / %s physical in %llu reads, busy %.2f s, "
                 "%.2f GiB/s; demand stall %.2f s of %.2f s\n",
                 s.tier.c_str(), (unsigned long long)t.requests, (unsigned long long)t.hits,
                 100.0 * s.hit_rate(), (unsigned long long)t.misses,
                 (unsigned long long)t.evictions, HumanBytes(t.bytes_payload).c_str(),
                 HumanBytes(t.bytes_physical).c_str(), (unsigned long long)t.reads,
                 s.read_busy_ns * 1e-9, s.read_gib_per_s(), t.demand_stall_ns * 1e-9,
                 wall_seconds);
    if (tokens > 0) {
      std::fprintf(stderr, "moetier: per token: %s read, %.1f expert requests\n",
                   HumanBytes(t.bytes_physical / tokens).c_str(), double(t.requests) / tokens);
    }
    for (size_t il = 0; il < s.layers.size(); ++il) {
      const TierCounters& c = s.layers[il];
      if (c.requests == 0) continue;
      std::fprintf(stderr,
                   "moetier:   layer %2zu: %6llu req %5.1f%% hit %6llu miss %6llu evict %10s "
                   "read stall %.3f s\n",
                   il, (unsigned long long)c.requests,
                   c.requests ? 100.0 * c.hits / c.requests : 100.0, (unsigned long long)c.misses,
                   (unsigned long long)c.evictions, HumanBytes(c.bytes_physical).c_str(),
                   c.demand_stall_ns * 1e-9);
    }
  }
  if (!f.stats_json.empty()) {
    nlohmann::json j;
    const StoragePlan& p = ctx.storage_plan();
    j["tier"] = s.tier;
    j["plan"] = {{"mode", MoeStorageName(p.mode)}, {"budget", p.budget},
                 {"budget_source", p.budget_source}, {"reserve", p.reserve},
                 {"dense", p.dense}, {"kv_cache", p.kv_cache}, {"scratch", p.scratch},
                 {"experts_total", p.experts_total}, {"expert_cache", p.expert_cache}};
    j["total"] = CountersJson(s.total);
    j["hit_rate"] = s.hit_rate();
    j["read_busy_s"] = s.read_busy_ns * 1e-9;
    j["read_gib_per_s"] = s.read_gib_per_s();
    j["wall_s"] = wall_seconds;
    j["tokens"] = tokens;
    j["layers"] = nlohmann::json::array();
    for (const TierCounters& c : s.layers) j["layers"].push_back(CountersJson(c));
    std::string tmp = f.stats_json + ".tmp";
    {
      std::ofstream out(tmp);
      if (!out) return IoError("{}: cannot create", tmp);
      out << j.dump(2) << "\n";
      if (!out) return IoError("{}: write failed", tmp);
    }
    if (std::rename(tmp.c_str(), f.stats_json.c_str()) != 0) {
      return IoError("{}: cannot rename", f.stats_json);
    }
  }
  return Status::Ok();
}

}  // namespace mt::cli
