#include "server/tiers.h"

#include <string>

namespace mt::server {

using json = nlohmann::json;

json TiersJson(const SchedulerGauges& g, const ExpertActivity& a, double uptime_seconds) {
  const TierCounters& t = g.tier.total;
  const bool has_cache = !a.resident.empty();
  const size_t n_cells = size_t{a.n_layer} * a.n_expert;
  json layers = json::array();
  for (size_t l = 0; l < g.tier.layers.size(); ++l) {
    const TierCounters& c = g.tier.layers[l];
    json resident = nullptr;
    if (has_cache && l < a.n_layer && a.resident.size() == n_cells) {
      uint32_t n = 0;
      for (uint32_t e = 0; e < a.n_expert; ++e) n += a.resident[l * a.n_expert + e];
      resident = n;
    }
    layers.push_back({{"requests", c.requests},
                      {"hits", c.hits},
                      {"misses", c.misses},
                      {"read_bytes", c.bytes_physical},
                      {"demand_stall_seconds", c.demand_stall_ns * 1e-9},
                      {"evictions", c.evictions},
                      {"resident", resident}});
  }
  json counts = json::array();
  json resident_rows = has_cache ? json::array() : json(nullptr);
  for (uint32_t l = 0; l < a.n_layer; ++l) {
    if (a.routed.size() == n_cells) {
      counts.push_back(std::vector<uint64_t>(a.routed.begin() + l * a.n_expert,
                                             a.routed.begin() + (l + 1) * a.n_expert));
    }
    if (has_cache && a.resident.size() == n_cells) {
      std::string row(a.n_expert, '0');
      for (uint32_t e = 0; e < a.n_expert; ++e) {
        if (a.resident[l * a.n_expert + e]) row[e] = '1';
      }
      resident_rows.push_back(std::move(row));
    }
  }
  json device = nullptr;
  if (const DeviceGauges& d = g.device; !d.name.empty()) {
    device = {{"name", d.name},
              {"attention_layers", d.attention_layers},
              {"output_head", d.output_head},
              {"swiglu_layers", d.swiglu_layers},
              {"experts", d.experts},
              {"expert_bytes", d.expert_bytes},
              {"expert_runs", d.expert_runs},
              {"expert_promotions", d.expert_promotions}};
  }
  return {{"object", "moetier.tiers"},
          {"uptime_seconds", uptime_seconds},
          {"storage", g.tier.tier},
          {"cache_slots", g.tier.cache_slots},
          {"device", std::move(device)},
          {"n_layer", a.n_layer},
          {"n_expert", a.n_expert},
          {"slots", {{"busy", g.slots_busy}, {"total", g.slots_total}}},
          {"queue_depth", g.queue_depth},
          {"tokens",
           {{"evaluated", g.step_tokens},
            {"generated", g.sampled_tokens},
            {"cached_prompt", g.cached_tokens},
            {"decode_seconds", g.step_seconds[0]},
            {"decode_generated", g.step_generated[0]},
            {"mixed_seconds", g.step_seconds[1]},
            {"mixed_generated", g.step_generated[1]}}},
          {"experts",
           {{"requests", t.requests},
            {"hits", t.hits},
            {"misses", t.misses},
            {"hit_rate", g.tier.hit_rate()},
            {"read_bytes", t.bytes_physical},
            {"payload_bytes", t.bytes_payload},
            {"reads", t.reads},
            {"evictions", t.evictions},
            {"read_errors", t.read_errors},
            {"demand_stall_seconds", t.demand_stall_ns * 1e-9},
            {"read_busy_seconds", g.tier.read_busy_ns * 1e-9},
            {"disk_idle_seconds", t.disk_idle_ns * 1e-9},
            {"read_gib_per_s", g.tier.read_gib_per_s()},
            {"prefetch_reads", t.prefetch_reads},
            {"prefetch_hits", t.prefetch_hits},
            {"placed", t.placed}}},
          {"layers", std::move(layers)},
          {"routing", {{"tokens", a.routed_tokens}, {"counts", std::move(counts)}}},
          {"resident", std::move(resident_rows)}};
}

}  // namespace mt::server
