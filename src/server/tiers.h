// GET /v1/tiers: the expert tiers as JSON, for the chat page's live panel (and any client
// that would rather not parse /metrics). The counters are cumulative since start-up, as on
// /metrics; a client takes rates from two polls and their `uptime_seconds`.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "server/metrics.h"

namespace mt::server {

// Per (layer, expert) state, copied by the scheduler after each step.
struct ExpertActivity {
  uint32_t n_layer = 0;
  uint32_t n_expert = 0;
  uint64_t routed_tokens = 0;    // tokens the router counts cover
  std::vector<uint64_t> routed;  // (n_layer, n_expert) activations (engine/routing_stats.h)
  // (n_layer, n_expert) 1 where the expert's bytes are in the cache now; empty when the
  // store has no cache of its own (ExpertStore::Residency).
  std::vector<uint8_t> resident;
};

// The document (docs/serving.md shows it):
//   {"object": "moetier.tiers", "uptime_seconds", "storage": "resident" | "mmap" | "stream",
//    "cache_slots" (stream; else 0),
//    "device": null, or {"name", "attention_layers", "output_head", "swiglu_layers",
//               "experts", "expert_bytes", "expert_runs", "expert_promotions"} (--device,
//               --gpu-expert-cache),
//    "n_layer", "n_expert",
//    "slots": {"busy", "total"}, "queue_depth",
//    "tokens": {"evaluated", "generated" (sampled: what usage calls completion_tokens),
//               "cached_prompt", "decode_seconds", "decode_generated" (generated tokens
//               evaluated in decode-only steps: over decode_seconds, the pace of decoding),
//               "mixed_seconds", "mixed_generated"},
//    "experts": {"requests", "hits", "misses", "hit_rate", "read_bytes", "payload_bytes",
//                "reads", "evictions", "read_errors", "demand_stall_seconds",
//                "read_busy_seconds", "disk_idle_seconds", "read_gib_per_s",
//                "prefetch_reads", "prefetch_hits", "placed"},
//    "layers": [{"requests", "hits", "misses", "read_bytes", "demand_stall_seconds",
//                "evictions", "resident" (experts in the cache; null without one)}],
//    "routing": {"tokens", "counts": [[per expert] per layer]},
//    "resident": ["0110..." per layer] or null}
nlohmann::json TiersJson(const SchedulerGauges& gauges, const ExpertActivity& activity,
                         double uptime_seconds);

}  // namespace mt::server
