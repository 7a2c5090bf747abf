#include "experts/tier_stats.h"

namespace mt {

void TierCounters::Add(const TierCounters& o) {
  requests += o.requests;
  hits += o.hits;
  misses += o.misses;
  bytes_payload += o.bytes_payload;
  bytes_physical += o.bytes_physical;
  reads += o.reads;
  evictions += o.evictions;
  demand_stall_ns += o.demand_stall_ns;
  read_errors += o.read_errors;
  prefetch_reads += o.prefetch_reads;
  prefetch_bytes += o.prefetch_bytes;
  prefetch_hits += o.prefetch_hits;
  prefetch_joined += o.prefetch_joined;
  prefetch_wasted_bytes += o.prefetch_wasted_bytes;
  placed += o.placed;
  disk_idle_ns += o.disk_idle_ns;
}

}  // namespace mt
