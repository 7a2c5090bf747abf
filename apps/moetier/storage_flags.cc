#include "storage_flags.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "base/file_io.h"
#include "base/units.h"
#include "engine/device_matrices.h"

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
  sub.add_option("--prefetch", f->prefetch,
                 "stream: read the next layer's predicted experts ahead: off, next-layer")
      ->default_str("next-layer");
  sub.add_option("--prefetch-depth", f->prefetch_depth,
                 "stream: layers ahead that prefetch predicts (1: the next; more pays when reads "
                 "land early; default 2 for an expert-major pack, else 1)")
      ->check(CLI::Range(1, 8));
  sub.add_option("--eviction", f->eviction, "stream: eviction policy: lfu, lru, placement")
      ->default_str("lfu");
  sub.add_option("--placement", f->placement,
                 "stream: pin the hottest experts of a routing profile (moetier profile)");
  sub.add_option("--placement-share", f->placement_share,
                 "stream: the share of the expert cache that placement may pin")
      ->default_str("0.25");
  sub.add_option("--routing-stats", f->routing_stats,
                 "Load routing statistics at start (placing their hottest experts) and save the "
                 "live ones on exit");
  sub.add_option("--device", f->device,
                 "cpu, or vulkan[:N]: attention (GQA with its output gate, MLA, DeltaNet; any "
                 "--kv-type), the output head, shared experts and dense FFNs on that GPU, and the "
                 "routed experts of --gpu-expert-cache (moetier devices lists them); no device "
                 "found: a notice, and the CPU runs everything")
      ->default_str("cpu");
  sub.add_option("--gpu-expert-cache", f->gpu_expert_cache,
                 "Routed experts kept in GPU memory: BYTES or N% of the experts (implies "
                 "--device vulkan)");
}

Status ResolveStorageFlags(const StorageFlags& f, ContextOptions* copt) {
  StorageOptions* o = &copt->storage;
  if (f.prefetch != "off" && f.prefetch != "next-layer") {
    return InvalidArgument("--prefetch: '{}' is not one of off, next-layer", f.prefetch);
  }
  o->prefetch = f.prefetch == "next-layer";
  o->prefetch_depth = f.prefetch_depth;
  if (f.eviction != "lru" && f.eviction != "lfu" && f.eviction != "placement") {
    return InvalidArgument("--eviction: '{}' is not one of lru, lfu, placement", f.eviction);
  }
  o->eviction = f.eviction;
  o->placement_file = f.placement;
  if (!(f.placement_share > 0 && f.placement_share <= 1)) {
    return InvalidArgument("--placement-share: {} is not in (0, 1]", f.placement_share);
  }
  o->placement_share = f.placement_share;
  copt->routing_stats_file = f.routing_stats;
  o->mode = MT_TRY(ParseMoeStorage(f.moe_storage));
  o->io = MT_TRY(ParseIoBackend(f.io));
  o->direct = MT_TRY(ParseDirectMode(f.direct));
  if (!f.mem_budget.empty()) {
    Result<uint64_t> b = ParseBytes(f.mem_budget);
    if (!b.ok()) return b.status().WithContext("--mem-budget");
    o->mem_budget = b.value();
  }
  if (!f.expert_cache.empty()) MT_RETURN_IF_ERROR(ParseExpertCache(f.expert_cache, o));
  o->warm = f.warm;
  MT_RETURN_IF_ERROR(ParseDevice(f.device, &copt->gpu));
  if (!f.gpu_expert_cache.empty()) {
    MT_RETURN_IF_ERROR(ParseGpuExpertCache(f.gpu_expert_cache, &copt->gpu));
    if (copt->gpu.device < 0) copt->gpu.device = 0;
  }
  return Status::Ok();
}

Result<LoadOptions> LoadOptionsOf(const StorageFlags& flags, KvTypes kv_types) {
  ContextOptions o;
  o.kv_types = kv_types;
  MT_RETURN_IF_ERROR(ResolveStorageFlags(flags, &o));
  return LoadOptionsFor(o);
}

Status SaveRoutingStats(const StorageFlags& f, Context& ctx) {
  if (f.routing_stats.empty()) return Status::Ok();
  return ctx.routing_stats().Save(f.routing_stats);
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
          {"disk_idle_s", c.disk_idle_ns * 1e-9},
          {"read_errors", c.read_errors},
          {"prefetch_reads", c.prefetch_reads},
          {"prefetch_bytes", c.prefetch_bytes},
          {"prefetch_hits", c.prefetch_hits},
          {"prefetch_joined", c.prefetch_joined},
          {"prefetch_wasted_bytes", c.prefetch_wasted_bytes},
          {"placed", c.placed}};
}

}  // namespace

Status ReportTierStats(const StorageFlags& f, Context& ctx, double wall_seconds, uint64_t tokens) {
  const TierStats& s = ctx.expert_store().stats();
  if (f.stats) {
    const TierCounters& t = s.total;
    std::fprintf(stderr,
                 "moetier: experts (%s): %llu requests, %llu hits (%.1f%%), %llu misses, "
                 "%llu evictions; read %s payload / %s physical in %llu reads, busy %.2f s "
                 "(idle %.2f s between reads), %.2f GiB/s; demand stall %.2f s of %.2f s\n",
                 s.tier.c_str(), (unsigned long long)t.requests, (unsigned long long)t.hits,
                 100.0 * s.hit_rate(), (unsigned long long)t.misses,
                 (unsigned long long)t.evictions, HumanBytes(t.bytes_payload).c_str(),
                 HumanBytes(t.bytes_physical).c_str(), (unsigned long long)t.reads,
                 s.read_busy_ns * 1e-9, t.disk_idle_ns * 1e-9, s.read_gib_per_s(),
                 t.demand_stall_ns * 1e-9, wall_seconds);
    if (t.prefetch_reads > 0) {
      uint64_t correct = 0, actual = 0;
      for (const Context::PrefetchCounters& p : ctx.prefetch_counters()) {
        correct += p.correct;
        actual += p.actual;
      }
      const uint64_t would_miss = t.misses + t.prefetch_hits;
      std::fprintf(stderr,
                   "moetier: prefetch (depth %d): recall@k %.1f%%, %llu experts read ahead (%s), "
                   "%.1f%% of would-be misses turned into hits, %s wasted\n",
                   ctx.prefetch_depth(), actual ? 100.0 * correct / actual : 0.0,
                   (unsigned long long)t.prefetch_reads, HumanBytes(t.prefetch_bytes).c_str(),
                   would_miss ? 100.0 * t.prefetch_hits / would_miss : 0.0,
                   HumanBytes(t.prefetch_wasted_bytes).c_str());
    }
    if (t.placed > 0) {
      std::fprintf(stderr, "moetier: placement: %llu experts pinned from the routing profile\n",
                   (unsigned long long)t.placed);
    }
    if (s.cache_slots > 0) {
      const uint64_t experts = uint64_t{ctx.model().expert_layout().n_expert_layers()} *
                               ctx.model().expert_layout().n_expert();
      std::fprintf(stderr, "moetier: expert cache: %u slots, %.1f%% of the model's %llu experts\n",
                   s.cache_slots, experts ? 100.0 * s.cache_slots / experts : 0.0,
                   (unsigned long long)experts);
    }
    if (const GpuExpertTier* gpu = ctx.gpu_experts()) {
      const uint64_t runs = gpu->runs() + t.requests;
      std::fprintf(stderr, "moetier: device %s: %u experts (%s), %llu expert runs, %.1f%% of all\n",
                   gpu->device_name().c_str(), gpu->n_experts(),
                   HumanBytes(gpu->weight_bytes()).c_str(), (unsigned long long)gpu->runs(),
                   runs ? 100.0 * gpu->runs() / runs : 0.0);
    }
    if (tokens > 0) {
      std::fprintf(stderr, "moetier: per token: %s read, %.1f expert requests\n",
                   HumanBytes(t.bytes_physical / tokens).c_str(), double(t.requests) / tokens);
    }
    for (size_t il = 0; il < s.layers.size(); ++il) {
      const TierCounters& c = s.layers[il];
      if (c.requests == 0) continue;
      std::fprintf(stderr,
                   "moetier:   layer %2zu: %6llu req %5.1f%% hit %6llu miss %6llu evict %10s "
                   "read stall %.3f s, disk idle after it %.3f s\n",
                   il, (unsigned long long)c.requests,
                   c.requests ? 100.0 * c.hits / c.requests : 100.0, (unsigned long long)c.misses,
                   (unsigned long long)c.evictions, HumanBytes(c.bytes_physical).c_str(),
                   c.demand_stall_ns * 1e-9, c.disk_idle_ns * 1e-9);
    }
  }
  if (!f.stats_json.empty()) {
    nlohmann::json j;
    const StoragePlan& p = ctx.storage_plan();
    j["tier"] = s.tier;
    j["plan"] = {{"mode", MoeStorageName(p.mode)},
                 {"budget", p.budget},
                 {"budget_source", p.budget_source},
                 {"reserve", p.reserve},
                 {"dense", p.dense},
                 {"dense_on_device", p.dense_on_device},
                 {"kv_cache", p.kv_cache},
                 {"scratch", p.scratch},
                 {"experts_total", p.experts_total},
                 {"expert_cache", p.expert_cache}};
    if (const Context::DeviceParts d = ctx.device_parts(); !d.name.empty()) {
      j["device"] = {{"name", d.name},
                     {"attention_layers", d.attention_layers},
                     {"output_head", d.output_head},
                     {"swiglu_layers", d.swiglu_layers},
                     {"experts", 0}};
    }
    if (const GpuExpertTier* gpu = ctx.gpu_experts()) {
      j["device"]["experts"] = gpu->n_experts();
      j["device"]["expert_bytes"] = gpu->weight_bytes();
      j["device"]["scratch_bytes"] = gpu->scratch_bytes();
      j["device"]["expert_runs"] = gpu->runs();
    }
    j["total"] = CountersJson(s.total);
    j["hit_rate"] = s.hit_rate();
    j["read_busy_s"] = s.read_busy_ns * 1e-9;
    j["cache_slots"] = s.cache_slots;
    j["read_gib_per_s"] = s.read_gib_per_s();
    j["wall_s"] = wall_seconds;
    j["tokens"] = tokens;
    j["layers"] = nlohmann::json::array();
    const auto& pf = ctx.prefetch_counters();
    for (size_t il = 0; il < s.layers.size(); ++il) {
      nlohmann::json lj = CountersJson(s.layers[il]);
      if (il < pf.size() && pf[il].actual > 0) {
        lj["prefetch_recall"] = double(pf[il].correct) / double(pf[il].actual);
      }
      j["layers"].push_back(lj);
    }
    MT_RETURN_IF_ERROR(WriteFileAtomically(f.stats_json, j.dump(2) + "\n"));
  }
  return Status::Ok();
}

}  // namespace mt::cli
