// /metrics renders the Prometheus text format: HELP/TYPE lines, cumulative histogram
// buckets ending with +Inf, _sum and _count, and the expert tier's counters by tier.
#include "server/metrics.h"

#include <gtest/gtest.h>

#include <sstream>

namespace mt::server {
namespace {

bool Has(const std::string& text, const std::string& line) {
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (l == line) return true;
  }
  return false;
}

TEST(MetricsTest, HistogramBucketsAreCumulative) {
  Histogram h;
  for (double v : {0.001, 0.005, 0.3, 0.3, 7.0, 500.0}) h.Observe(v);
  const std::string text = h.Render("lat");
  // <= 0.005: 0.001 and 0.005 (bounds are inclusive); <= 0.5: + two 0.3; <= 10: + 7.0.
  EXPECT_TRUE(Has(text, "lat_bucket{le=\"0.005\"} 2")) << text;
  EXPECT_TRUE(Has(text, "lat_bucket{le=\"0.25\"} 2")) << text;
  EXPECT_TRUE(Has(text, "lat_bucket{le=\"0.5\"} 4")) << text;
  EXPECT_TRUE(Has(text, "lat_bucket{le=\"5\"} 4")) << text;
  EXPECT_TRUE(Has(text, "lat_bucket{le=\"10\"} 5")) << text;
  EXPECT_TRUE(Has(text, "lat_bucket{le=\"120\"} 5")) << text;
  EXPECT_TRUE(Has(text, "lat_bucket{le=\"+Inf\"} 6")) << text;
  EXPECT_TRUE(Has(text, "lat_count 6")) << text;
  EXPECT_TRUE(Has(text, "lat_sum 507.606")) << text;
  EXPECT_EQ(h.count(), 6u);
}

TEST(MetricsTest, RenderHasEveryFamily) {
  Metrics m;
  m.CountRequest("/v1/completions", 200);
  m.CountRequest("/v1/completions", 200);
  m.CountRequest("/v1/completions", 400);
  m.CountTokens(10, 4);
  m.CountTokens(5, 1);
  m.ObserveLatency(0.001, 0.02, 0.2);
  m.ObserveLatency(0.002, -1, 0.01);  // no token generated: no time-to-first-token
  m.CountCancelled();
  SchedulerGauges g;
  g.queue_depth = 3;
  g.slots_busy = 2;
  g.slots_total = 4;
  g.tier.tier = "stream";
  g.tier.total.hits = 7;
  g.tier.total.misses = 5;
  g.tier.total.bytes_physical = 4096;
  g.tier.total.demand_stall_ns = 1'500'000'000;
  g.tier.total.disk_idle_ns = 250'000'000;
  g.tier.cache_slots = 1212;
  g.step_seconds = {2.5, 0.75};
  g.step_generated = {40, 3};
  const std::string text = m.Render(g);
  EXPECT_TRUE(Has(text, "moetier_step_seconds_total{kind=\"decode\"} 2.5"));
  EXPECT_TRUE(Has(text, "moetier_step_seconds_total{kind=\"mixed\"} 0.75"));
  EXPECT_TRUE(Has(text, "moetier_step_generated_tokens_total{kind=\"decode\"} 40"));
  EXPECT_TRUE(Has(text, "moetier_step_generated_tokens_total{kind=\"mixed\"} 3"));
  EXPECT_TRUE(Has(text, "# TYPE moetier_requests_total counter"));
  EXPECT_TRUE(Has(text, "moetier_requests_total{endpoint=\"/v1/completions\",code=\"200\"} 2"));
  EXPECT_TRUE(Has(text, "moetier_requests_total{endpoint=\"/v1/completions\",code=\"400\"} 1"));
  EXPECT_TRUE(Has(text, "moetier_prompt_tokens_total 15"));
  EXPECT_TRUE(Has(text, "moetier_generated_tokens_total 5"));
  EXPECT_TRUE(Has(text, "moetier_requests_cancelled_total 1"));
  EXPECT_TRUE(Has(text, "moetier_requests_failed_total 0"));
  EXPECT_TRUE(Has(text, "# TYPE moetier_request_duration_seconds histogram"));
  EXPECT_TRUE(Has(text, "moetier_request_duration_seconds_count 2"));
  EXPECT_TRUE(Has(text, "moetier_time_to_first_token_seconds_count 1"));
  EXPECT_TRUE(Has(text, "moetier_queue_wait_seconds_bucket{le=\"0.005\"} 2"));
  EXPECT_TRUE(Has(text, "# TYPE moetier_queue_depth gauge"));
  EXPECT_TRUE(Has(text, "moetier_queue_depth 3"));
  EXPECT_TRUE(Has(text, "moetier_slots_busy 2"));
  EXPECT_TRUE(Has(text, "moetier_slots_total 4"));
  EXPECT_TRUE(Has(text, "moetier_expert_hits_total{tier=\"stream\"} 7"));
  EXPECT_TRUE(Has(text, "moetier_expert_misses_total{tier=\"stream\"} 5"));
  EXPECT_TRUE(Has(text, "moetier_expert_read_bytes_total{tier=\"stream\"} 4096"));
  EXPECT_TRUE(Has(text, "moetier_expert_stall_seconds_total{tier=\"stream\"} 1.5"));
  EXPECT_TRUE(Has(text, "moetier_expert_disk_idle_seconds_total{tier=\"stream\"} 0.25"));
  EXPECT_TRUE(Has(text, "moetier_expert_cache_slots{tier=\"stream\"} 1212"));
  // Every sample line belongs to a family declared by a TYPE line before it.
  std::istringstream in(text);
  std::string declared;
  for (std::string l; std::getline(in, l);) {
    ASSERT_FALSE(l.empty());
    if (l.rfind("# TYPE ", 0) == 0) {
      declared = l.substr(7, l.find(' ', 7) - 7);
    } else if (l[0] != '#') {
      EXPECT_EQ(l.rfind(declared, 0), 0u) << l << " after TYPE " << declared;
    }
  }
  // Only the stream tier has a bounded cache.
  g.tier.tier = "resident";
  g.tier.cache_slots = 0;
  EXPECT_FALSE(Has(m.Render(g), "moetier_expert_cache_slots"));
}

}  // namespace
}  // namespace mt::server
