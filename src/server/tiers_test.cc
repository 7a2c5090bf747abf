// GET /v1/tiers: the document's shape from known counters, and from a scheduler that ran
// a job on a synthetic olmoe-tiny: routing counts add up to top-k per token and layer, and
// the stream tier's residency agrees with its per-layer counts and cache size.
#include "server/tiers.h"

#include <gtest/gtest.h>

#include "engine/context.h"
#include "engine/model.h"
#include "server/scheduler.h"
#include "synth/synth_test_util.h"
#include "tokenizer/tokenizer.h"

namespace mt::server {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

TEST(TiersJsonTest, ShapeAndValues) {
  SchedulerGauges g;
  g.slots_busy = 1;
  g.slots_total = 4;
  g.queue_depth = 2;
  g.step_tokens = 100;
  g.cached_tokens = 7;
  g.step_seconds = {2.0, 0.5};
  g.step_generated = {30, 2};
  g.sampled_tokens = 33;
  g.tier.tier = "stream";
  g.tier.cache_slots = 3;
  g.tier.read_busy_ns = 500'000'000;
  g.tier.layers.resize(2);
  g.tier.layers[1].requests = 10;
  g.tier.layers[1].hits = 6;
  g.tier.layers[1].bytes_physical = 4096;
  g.tier.layers[1].demand_stall_ns = 250'000'000;
  g.tier.total = g.tier.layers[1];
  g.tier.total.misses = 4;
  ExpertActivity a;
  a.n_layer = 2;
  a.n_expert = 3;
  a.routed_tokens = 5;
  a.routed = {1, 2, 3, 4, 5, 6};
  a.resident = {1, 0, 1, 0, 0, 1};

  const json j = TiersJson(g, a, 12.5);
  EXPECT_EQ(j["object"], "moetier.tiers");
  EXPECT_EQ(j["uptime_seconds"], 12.5);
  EXPECT_EQ(j["storage"], "stream");
  EXPECT_EQ(j["cache_slots"], 3);
  EXPECT_EQ(j["n_layer"], 2);
  EXPECT_EQ(j["n_expert"], 3);
  EXPECT_EQ(j["slots"], (json{{"busy", 1}, {"total", 4}}));
  EXPECT_EQ(j["queue_depth"], 2);
  EXPECT_EQ(j["tokens"]["evaluated"], 100);
  EXPECT_EQ(j["tokens"]["generated"], 33);
  EXPECT_EQ(j["tokens"]["cached_prompt"], 7);
  EXPECT_EQ(j["tokens"]["decode_seconds"], 2.0);
  EXPECT_EQ(j["tokens"]["decode_generated"], 30);
  EXPECT_EQ(j["tokens"]["mixed_seconds"], 0.5);
  EXPECT_EQ(j["tokens"]["mixed_generated"], 2);
  const json& x = j["experts"];
  EXPECT_EQ(x["requests"], 10);
  EXPECT_EQ(x["hits"], 6);
  EXPECT_EQ(x["misses"], 4);
  EXPECT_DOUBLE_EQ(x["hit_rate"].get<double>(), 0.6);
  EXPECT_EQ(x["read_bytes"], 4096);
  EXPECT_DOUBLE_EQ(x["demand_stall_seconds"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(x["read_busy_seconds"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(x["read_gib_per_s"].get<double>(), 4096.0 / (1 << 30) / 0.5);
  for (const char* key : {"payload_bytes", "reads", "evictions", "read_errors", "disk_idle_seconds",
                          "prefetch_reads", "prefetch_hits", "placed"}) {
    EXPECT_TRUE(x.contains(key)) << key;
  }
  ASSERT_EQ(j["layers"].size(), 2u);
  EXPECT_EQ(j["layers"][0]["requests"], 0);
  EXPECT_EQ(j["layers"][0]["resident"], 2);
  EXPECT_EQ(j["layers"][1]["requests"], 10);
  EXPECT_EQ(j["layers"][1]["hits"], 6);
  EXPECT_EQ(j["layers"][1]["read_bytes"], 4096);
  EXPECT_DOUBLE_EQ(j["layers"][1]["demand_stall_seconds"].get<double>(), 0.25);
  EXPECT_EQ(j["layers"][1]["resident"], 1);
  EXPECT_EQ(j["routing"]["tokens"], 5);
  EXPECT_EQ(j["routing"]["counts"], (json{{1, 2, 3}, {4, 5, 6}}));
  EXPECT_EQ(j["resident"], (json{"101", "001"}));
  EXPECT_TRUE(j["device"].is_null());  // no --device

  g.device = {"gpu0", 2, true, 1, 5, 4096, 7, 3};
  const json d = TiersJson(g, a, 12.5)["device"];
  EXPECT_EQ(d, (json{{"name", "gpu0"},
                     {"attention_layers", 2},
                     {"output_head", true},
                     {"swiglu_layers", 1},
                     {"experts", 5},
                     {"expert_bytes", 4096},
                     {"expert_runs", 7},
                     {"expert_promotions", 3}}));
}

TEST(TiersJsonTest, NoCacheIsNull) {
  SchedulerGauges g;
  g.tier.tier = "resident";
  g.tier.layers.resize(1);
  ExpertActivity a;
  a.n_layer = 1;
  a.n_expert = 2;
  a.routed = {0, 9};
  const json j = TiersJson(g, a, 0);
  EXPECT_EQ(j["storage"], "resident");
  EXPECT_EQ(j["cache_slots"], 0);
  EXPECT_TRUE(j["resident"].is_null());
  EXPECT_TRUE(j["layers"][0]["resident"].is_null());
  EXPECT_EQ(j["routing"]["counts"], (json{{0, 9}}));
}

class TiersLiveTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    models_ = std::make_unique<testing_synth::SynthModels>("tiers-test", 3);
    auto m = Model::Load(models_->Get("olmoe-tiny", "q4_k_m"), LoadOptions{});
    ASSERT_TRUE(m.ok()) << m.status().message();
    model_ = std::move(m.value()).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    models_.reset();
  }

  // The document after one greedy job of `n_gen` tokens, and the tokens the job evaluated.
  static json RunOneJob(MoeStorage mode, int64_t n_gen, uint64_t* evaluated) {
    ContextOptions o;
    o.n_ctx = 128;
    o.n_threads = 2;
    o.storage.mode = mode;
    o.storage.expert_cache_pct = 30;
    o.storage.prefetch = false;
    auto ctx = Context::Create(*model_, o);
    EXPECT_TRUE(ctx.ok()) << ctx.status().message();
    Scheduler scheduler(**ctx, SchedulerOptions{1, 64, 4}, nullptr);
    const json before = TiersJson(scheduler.Gauges(), scheduler.Activity(), 0);
    EXPECT_EQ(before["routing"]["tokens"], 0);
    scheduler.Start();
    GenerationSpec spec;
    const Tokenizer& tok = *model_->tokenizer();
    spec.prompt = tok.Encode("The cache holds", tok.add_bos(), false).value();
    spec.max_tokens = n_gen;
    spec.ignore_eos = true;
    spec.sampling.temperature = 0;
    auto job = std::make_shared<Job>(spec);
    EXPECT_TRUE(scheduler.Submit(job).ok());
    JobUpdate u;
    for (int i = 0; i < 600 && !u.finished; ++i) job->Wait(100ms, &u);
    EXPECT_TRUE(u.finished);
    scheduler.Shutdown(0ms);
    // The last token sampled is never evaluated.
    *evaluated = spec.prompt.size() + static_cast<uint64_t>(n_gen) - 1;
    return TiersJson(scheduler.Gauges(), scheduler.Activity(), 1);
  }

  static inline std::unique_ptr<testing_synth::SynthModels> models_;
  static inline Model* model_ = nullptr;
};

TEST_F(TiersLiveTest, StreamTierRoutingAndResidency) {
  uint64_t evaluated = 0;
  const json j = RunOneJob(MoeStorage::kStream, 6, &evaluated);
  const HParams& hp = model_->hparams();
  EXPECT_EQ(j["storage"], "stream");
  EXPECT_EQ(j["n_layer"], hp.n_layer);
  EXPECT_EQ(j["n_expert"], hp.n_expert);
  EXPECT_EQ(j["tokens"]["generated"], 6);
  EXPECT_EQ(j["tokens"]["evaluated"], evaluated);
  EXPECT_EQ(j["routing"]["tokens"], evaluated);
  ASSERT_EQ(j["routing"]["counts"].size(), hp.n_layer);
  ASSERT_EQ(j["resident"].size(), hp.n_layer);
  uint64_t held = 0;
  for (uint32_t l = 0; l < hp.n_layer; ++l) {
    uint64_t routed = 0;
    for (const json& c : j["routing"]["counts"][l]) routed += c.get<uint64_t>();
    EXPECT_EQ(routed, evaluated * hp.n_expert_used) << "layer " << l;
    const std::string row = j["resident"][l];
    ASSERT_EQ(row.size(), hp.n_expert);
    const auto in_cache = static_cast<uint64_t>(std::count(row.begin(), row.end(), '1'));
    EXPECT_EQ(j["layers"][l]["resident"], in_cache) << "layer " << l;
    EXPECT_GE(in_cache, 1u) << "layer " << l;     // what the last token's layer used stays
    for (uint32_t e = 0; e < hp.n_expert; ++e) {  // without prefetch, only routed experts load
      if (row[e] == '1') EXPECT_GT(j["routing"]["counts"][l][e].get<uint64_t>(), 0u);
    }
    held += in_cache;
  }
  EXPECT_LE(held, j["cache_slots"].get<uint64_t>());
  EXPECT_GT(j["experts"]["misses"].get<uint64_t>(), 0u);
}

TEST_F(TiersLiveTest, ResidentHasNoCacheToShow) {
  uint64_t evaluated = 0;
  const json j = RunOneJob(MoeStorage::kResident, 3, &evaluated);
  EXPECT_EQ(j["storage"], "resident");
  EXPECT_TRUE(j["resident"].is_null());
  EXPECT_EQ(j["routing"]["tokens"], evaluated);
  EXPECT_EQ(j["experts"]["hit_rate"], 1.0);
}

}  // namespace
}  // namespace mt::server
