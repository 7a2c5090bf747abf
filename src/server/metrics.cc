#include "server/metrics.h"

#include <fmt/format.h>

namespace mt::server {

void Histogram::Observe(double v) {
  for (size_t i = 0; i < kBounds.size(); ++i) {
    if (v <= kBounds[i]) {
      ++buckets_[i];
      break;
    }
  }
  ++count_;
  sum_ += v;
}

std::string Histogram::Render(const std::string& name) const {
  std::string out;
  uint64_t cumulative = 0;
  for (size_t i = 0; i < kBounds.size(); ++i) {
    cumulative += buckets_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, kBounds[i], cumulative);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n", name, count_);
  out += fmt::format("{}_sum {}\n{}_count {}\n", name, sum_, name, count_);
  return out;
}

void Metrics::CountRequest(const std::string& endpoint, int status) {
  std::lock_guard lock(mu_);
  ++requests_[{endpoint, status}];
}

void Metrics::CountTokens(uint64_t prompt_tokens, uint64_t completion_tokens) {
  std::lock_guard lock(mu_);
  prompt_tokens_ += prompt_tokens;
  completion_tokens_ += completion_tokens;
}

void Metrics::ObserveLatency(double queue_s, double first_token_s, double total_s) {
  std::lock_guard lock(mu_);
  queue_.Observe(queue_s);
  if (first_token_s >= 0) first_token_.Observe(first_token_s);
  duration_.Observe(total_s);
}

void Metrics::CountCancelled() {
  std::lock_guard lock(mu_);
  ++cancelled_;
}

void Metrics::CountFailed() {
  std::lock_guard lock(mu_);
  ++failed_;
}

namespace {

void Header(std::string* out, const char* name, const char* type, const char* help) {
  *out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void Simple(std::string* out, const char* name, const char* type, const char* help, double v) {
  Header(out, name, type, help);
  *out += fmt::format("{} {}\n", name, v);
}

// Label values come from our own route table and tier names, but escape them anyway.
std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace

std::string Metrics::Render(const SchedulerGauges& g) const {
  std::lock_guard lock(mu_);
  std::string out;
  Header(&out, "moetier_requests_total", "counter", "HTTP requests by endpoint and status code.");
  for (const auto& [key, n] : requests_) {
    out += fmt::format("moetier_requests_total{{endpoint=\"{}\",code=\"{}\"}} {}\n",
                       Escape(key.first), key.second, n);
  }
  Simple(&out, "moetier_prompt_tokens_total", "counter", "Prompt tokens evaluated.",
         double(prompt_tokens_));
  Simple(&out, "moetier_generated_tokens_total", "counter", "Tokens generated.",
         double(completion_tokens_));
  Simple(&out, "moetier_requests_cancelled_total", "counter",
         "Generations cancelled because the client went away or the server shut down.",
         double(cancelled_));
  Simple(&out, "moetier_requests_failed_total", "counter",
         "Generations that failed in the engine (e.g. an expert read error).", double(failed_));
  Header(&out, "moetier_queue_wait_seconds", "histogram",
         "Time from a request's arrival to its first forward step.");
  out += queue_.Render("moetier_queue_wait_seconds");
  Header(&out, "moetier_time_to_first_token_seconds", "histogram",
         "Time from a request's arrival to its first generated token.");
  out += first_token_.Render("moetier_time_to_first_token_seconds");
  Header(&out, "moetier_request_duration_seconds", "histogram",
         "Time from a request's arrival to the end of its generation.");
  out += duration_.Render("moetier_request_duration_seconds");

  Simple(&out, "moetier_queue_depth", "gauge", "Requests waiting for a slot.",
         double(g.queue_depth));
  Simple(&out, "moetier_slots_busy", "gauge", "Slots generating.", double(g.slots_busy));
  Simple(&out, "moetier_slots_total", "gauge", "Slots (--parallel).", double(g.slots_total));
  Simple(&out, "moetier_decode_steps_total", "counter", "Batched forward steps.", double(g.steps));
  Simple(&out, "moetier_decode_step_tokens_total", "counter",
         "Tokens evaluated by the batched forward steps.", double(g.step_tokens));
  const char* kinds[2] = {"decode", "mixed"};
  Header(&out, "moetier_step_seconds_total", "counter",
         "Seconds in batched forward steps: decode (generated tokens only) or mixed (prompt "
         "tokens too).");
  for (int k = 0; k < 2; ++k) {
    out +=
        fmt::format("moetier_step_seconds_total{{kind=\"{}\"}} {}\n", kinds[k], g.step_seconds[k]);
  }
  Header(&out, "moetier_step_generated_tokens_total", "counter",
         "Generated tokens evaluated by those steps, by the same kinds.");
  for (int k = 0; k < 2; ++k) {
    out += fmt::format("moetier_step_generated_tokens_total{{kind=\"{}\"}} {}\n", kinds[k],
                       g.step_generated[k]);
  }
  Simple(&out, "moetier_prompt_tokens_cached_total", "counter",
         "Prompt tokens found in a slot's KV cache (from an earlier request), not evaluated.",
         double(g.cached_tokens));

  const std::string tier = Escape(g.tier.tier);
  const TierCounters& t = g.tier.total;
  auto tier_counter = [&](const char* name, const char* help, double v) {
    Header(&out, name, "counter", help);
    out += fmt::format("{}{{tier=\"{}\"}} {}\n", name, tier, v);
  };
  tier_counter("moetier_expert_requests_total", "Routed experts asked for.", double(t.requests));
  tier_counter("moetier_expert_hits_total", "Experts that were ready in memory.", double(t.hits));
  tier_counter("moetier_expert_misses_total", "Experts that had to be read.", double(t.misses));
  tier_counter("moetier_expert_read_bytes_total", "Bytes the device read for experts.",
               double(t.bytes_physical));
  tier_counter("moetier_expert_payload_bytes_total", "Expert bytes read (payload).",
               double(t.bytes_payload));
  tier_counter("moetier_expert_reads_total", "Expert read operations.", double(t.reads));
  tier_counter("moetier_expert_evictions_total", "Experts evicted from the cache.",
               double(t.evictions));
  tier_counter("moetier_expert_read_errors_total", "Expert reads that failed.",
               double(t.read_errors));
  tier_counter("moetier_expert_stall_seconds_total",
               "Time the compute thread waited for demanded experts.", t.demand_stall_ns * 1e-9);
  tier_counter("moetier_expert_read_busy_seconds_total", "Time with any expert read in flight.",
               g.tier.read_busy_ns * 1e-9);
  tier_counter("moetier_expert_disk_idle_seconds_total",
               "Time with no expert read in flight, between two reads.", t.disk_idle_ns * 1e-9);
  if (g.tier.cache_slots > 0) {
    Header(&out, "moetier_expert_cache_slots", "gauge", "Experts the cache holds at once.");
    out += fmt::format("moetier_expert_cache_slots{{tier=\"{}\"}} {}\n", tier, g.tier.cache_slots);
  }
  return out;
}

}  // namespace mt::server
