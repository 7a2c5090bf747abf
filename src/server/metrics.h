// Server metrics, rendered in the Prometheus text exposition format (version 0.0.4) for
// GET /metrics. Thread-safe: HTTP threads and the scheduler thread record into it while
// another thread renders it.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "experts/tier_stats.h"

namespace mt::server {

// A cumulative histogram with fixed bucket bounds (seconds).
class Histogram {
 public:
  static constexpr std::array<double, 14> kBounds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                     1,     2.5,  5,     10,   30,  60,   120};
  void Observe(double v);
  // The Prometheus lines: name_bucket{le="..."} (cumulative, ending with +Inf), name_sum,
  // name_count.
  std::string Render(const std::string& name) const;

  uint64_t count() const { return count_; }

 private:
  std::array<uint64_t, kBounds.size()>
      buckets_{};  // (bounds) observations <= bound, not cumulative
  uint64_t count_ = 0;
  double sum_ = 0;
};

// What the scheduler reports about its state (gauges) and the expert tier.
// What runs on a device (--device, --gpu-expert-cache); an empty name when nothing does.
struct DeviceGauges {
  std::string name;
  int attention_layers = 0;  // layers whose attention runs there
  bool output_head = false;
  int swiglu_layers = 0;           // layers whose shared experts or dense FFN run there
  uint32_t experts = 0;            // routed experts held
  uint64_t expert_bytes = 0;       // their device memory
  uint64_t expert_runs = 0;        // expert runs there since start (the CPU's: tier.total.requests)
  uint64_t expert_promotions = 0;  // experts moved there since start (LFU, when idle)
};

struct SchedulerGauges {
  uint64_t queue_depth = 0;  // requests waiting for a slot
  uint64_t slots_busy = 0;
  uint64_t slots_total = 0;
  uint64_t steps = 0;          // batched forward steps run
  uint64_t step_tokens = 0;    // tokens evaluated in those steps
  uint64_t cached_tokens = 0;  // prompt tokens found in a slot's KV cache, not evaluated
  // The steps' forward passes by kind: [0] decode only (every token a generated one), [1]
  // mixed (prompt tokens too). Generated tokens over seconds of [0] is the pace of decoding
  // alone, which the wall time (prefill included) hides.
  std::array<double, 2> step_seconds{};
  std::array<uint64_t, 2> step_generated{};
  uint64_t sampled_tokens = 0;  // tokens sampled (a request's completion_tokens, as they come)
  TierStats tier;               // the expert store's counters
  DeviceGauges device;
};

class Metrics {
 public:
  // An HTTP request finished with `status` on `endpoint` (e.g. "/v1/chat/completions").
  void CountRequest(const std::string& endpoint, int status);
  // A generation ended (whatever the reason) after evaluating these tokens.
  void CountTokens(uint64_t prompt_tokens, uint64_t completion_tokens);
  // A generation completed: seconds from the arrival of its request to its first step, its
  // first generated token (< 0: none) and its end.
  void ObserveLatency(double queue_s, double first_token_s, double total_s);
  void CountCancelled();
  void CountFailed();

  std::string Render(const SchedulerGauges& gauges) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;  // (endpoint, status) -> count
  uint64_t prompt_tokens_ = 0;
  uint64_t completion_tokens_ = 0;
  uint64_t cancelled_ = 0;
  uint64_t failed_ = 0;
  Histogram queue_;
  Histogram first_token_;
  Histogram duration_;
};

}  // namespace mt::server
