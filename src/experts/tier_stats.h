// Counters of an expert tier, per layer and in total. Every tier counts the same things so
// the CLI, the bench and the server report them alike.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace mt {

struct TierCounters {
  uint64_t requests = 0;         // experts asked for (demand)
  uint64_t hits = 0;             // ... that were ready in memory
  uint64_t misses = 0;           // ... that had to be read (or joined a read in flight)
  uint64_t bytes_payload = 0;    // expert bytes read
  uint64_t bytes_physical = 0;   // bytes the device read (aligned, for direct I/O)
  uint64_t reads = 0;            // read operations submitted
  uint64_t evictions = 0;        // experts dropped to make room
  uint64_t demand_stall_ns = 0;  // time the compute thread waited for demanded experts
  uint64_t read_errors = 0;
  uint64_t prefetch_reads = 0;         // experts read on a prefetch hint
  uint64_t prefetch_bytes = 0;         // their payload bytes
  uint64_t prefetch_hits = 0;          // demands that found a prefetched expert ready
  uint64_t prefetch_joined = 0;        // demands that found a prefetch still reading
  uint64_t prefetch_wasted_bytes = 0;  // prefetched experts evicted before any demand
  uint64_t placed = 0;                 // experts pinned by placement
  // Stream tier: time with no read in flight between two reads, counted against the layer
  // that was running when the disk went idle (the gap after the last layer spans the
  // output head, sampling and the next token's first layer, which nothing can prefetch).
  uint64_t disk_idle_ns = 0;

  void Add(const TierCounters& o);
};

struct TierStats {
  std::string tier;  // "resident", "mmap", "stream"
  TierCounters total;
  std::vector<TierCounters> layers;  // (n_layer)
  uint64_t read_busy_ns = 0;         // union of the intervals with any read in flight
  uint32_t cache_slots = 0;          // stream: the experts its cache holds at once

  double hit_rate() const {
    return total.requests ? double(total.hits) / double(total.requests) : 1.0;
  }
  // Achieved read bandwidth over the busy time, GiB/s (physical bytes).
  double read_gib_per_s() const {
    return read_busy_ns ? double(total.bytes_physical) / (1 << 30) / (read_busy_ns * 1e-9) : 0.0;
  }
};

// Tracks the union of in-flight intervals: call Start/Stop as the count of reads in flight
// leaves and returns to zero.
class BusyClock {
 public:
  void Start() {
    if (!running_) {
      running_ = true;
      since_ = std::chrono::steady_clock::now();
    }
  }
  bool running() const { return running_; }
  void Stop(uint64_t* total_ns) {
    if (running_) {
      running_ = false;
      *total_ns += static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                             std::chrono::steady_clock::now() - since_)
                                             .count());
    }
  }

 private:
  bool running_ = false;
  std::chrono::steady_clock::time_point since_;
};

}  // namespace mt
