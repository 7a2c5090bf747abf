// deepseek2 on the engine: MLA's compressed cache and absorbed attention, leading dense
// layers, group-limited sigmoid routing. The same invariants as every architecture (bits do
// not depend on threads, batching or the expert tier; sequences batched together: in
// engine_test.cc), plus what is MLA's own: the cache's size, the legacy attn_kv_b layout, and
// one-line errors for malformed files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>

#include "engine/context.h"
#include "engine/model.h"
#include "gguf/gguf.h"
#include "model/hparams.h"
#include "synth/synth.h"
#include "synth/synth_test_util.h"

namespace mt {
namespace {

using testing_synth::SynthModels;
namespace fs = std::filesystem;

class Deepseek2Test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { models_ = std::make_unique<SynthModels>("deepseek2-test", 5); }
  static void TearDownTestSuite() { models_.reset(); }

  static std::unique_ptr<Model> Load(const std::string& preset, const std::string& type) {
    auto m = Model::Load(models_->Get(preset, type), LoadOptions{});
    EXPECT_TRUE(m.ok()) << m.status().message();
    return m.ok() ? std::move(m.value()) : nullptr;
  }

  static std::vector<float> Logits(const Model& m, int threads, uint32_t n_batch,
                                   StorageOptions storage = {}, KvTypes kv = KvElemType::kF16) {
    ContextOptions o;
    o.n_ctx = 64;
    o.n_threads = threads;
    o.n_batch = n_batch;
    o.kv_types = kv;
    o.storage = std::move(storage);
    auto ctx = Context::Create(m, o);
    EXPECT_TRUE(ctx.ok()) << ctx.status().message();
    if (!ctx.ok()) return {};
    std::vector<float> logits;
    Status s = (*ctx)->Eval(kTokens, LogitsFor::kAll, &logits);
    EXPECT_TRUE(s.ok()) << s.message();
    return logits;
  }

  static StorageOptions Stream(const std::string& cache) {
    StorageOptions s;
    s.mode = MoeStorage::kStream;
    EXPECT_TRUE(ParseExpertCache(cache, &s).ok());
    return s;
  }

  // The file of `preset` at q8_0 rewritten (SynthModels::Rewrite).
  static std::string Rewrite(const std::string& name, const std::string& preset,
                             const std::function<void(GgufMetadata&)>& edit,
                             const std::vector<std::string>& drop = {}) {
    return models_->Rewrite(name, preset, "q8_0", edit, drop);
  }

  static std::string LoadError(const std::string& path) {
    auto m = Model::Load(path, LoadOptions{});
    EXPECT_FALSE(m.ok()) << path << " loaded";
    return m.ok() ? "" : m.status().message();
  }

  static inline const std::vector<int32_t> kTokens = {0,  17, 300, 2,     4500, 999,   5,
                                                      60, 61, 62,  70000, 3,    128000};
  static inline std::unique_ptr<SynthModels> models_;
};

TEST_F(Deepseek2Test, PresetsDescribeTheirLayouts) {
  auto v2 = Load("deepseek2-tiny", "q8_0");
  auto v3 = Load("deepseek3-tiny", "q8_0");
  ASSERT_TRUE(v2 && v3);
  const ModelParts& p2 = v2->parts();
  EXPECT_EQ(p2.layers[0].ffn.kind, FfnKind::kDense);
  EXPECT_TRUE(p2.layers[1].has_experts());
  EXPECT_EQ(p2.layers[1].ffn.n_ff, 352u);  // not a multiple of 256
  EXPECT_EQ(p2.layers[1].ffn.n_ff_shared, 2 * 352u);
  EXPECT_EQ(p2.layers[1].attention.kind, AttentionKind::kMla);
  EXPECT_EQ(p2.layers[1].attention.mla.q_lora_rank, 0u);
  EXPECT_EQ(p2.router.scoring, ExpertScoring::kSoftmax);
  EXPECT_FALSE(p2.router.selection_bias);
  EXPECT_EQ(p2.rope.type, RopeType::kNorm);
  EXPECT_EQ(p2.rope.ext_factor, 1.0f);  // YaRN
  const ModelParts& p3 = v3->parts();
  EXPECT_FALSE(p3.layers[1].has_experts());
  EXPECT_TRUE(p3.layers[2].has_experts());
  EXPECT_EQ(p3.layers[2].attention.mla.q_lora_rank, 128u);
  EXPECT_EQ(p3.router.scoring, ExpertScoring::kSigmoid);
  EXPECT_TRUE(p3.router.selection_bias);
  EXPECT_EQ(p3.router.n_group, 4u);
  EXPECT_EQ(p3.router.n_group_used, 2u);
  EXPECT_TRUE(p3.router.normalize);
  EXPECT_FLOAT_EQ(p3.router.scale, 2.5f);
  EXPECT_FALSE(v3->expert_layout().has_experts(0));
  EXPECT_EQ(v3->expert_layout().n_expert_layers(), 4u);
  // The q LoRA file uses q_a/q_b, the V2-Lite layout attn_q.
  EXPECT_NE(v3->layer(0).wq_b.data, nullptr);
  EXPECT_EQ(v3->layer(0).wq.data, nullptr);
  EXPECT_NE(v2->layer(0).wq.data, nullptr);
}

TEST_F(Deepseek2Test, LogitsDoNotDependOnThreadsBatchingOrTier) {
  for (const char* preset : {"deepseek2-tiny", "deepseek3-tiny"}) {
    SCOPED_TRACE(preset);
    auto m = Load(preset, "q4_k_m");
    ASSERT_TRUE(m);
    const std::vector<float> want = Logits(*m, 2, 512);
    ASSERT_EQ(want.size(), kTokens.size() * m->hparams().n_vocab);
    EXPECT_TRUE(Logits(*m, 1, 512) == want);
    EXPECT_TRUE(Logits(*m, 2, 5) == want);
    EXPECT_TRUE(Logits(*m, 2, 1) == want);
    StorageOptions mmap;
    mmap.mode = MoeStorage::kMmap;
    EXPECT_TRUE(Logits(*m, 2, 512, mmap) == want);
    // 7 % of deepseek3-tiny's 64 experts is about one layer's top-k: eviction on every token.
    for (const char* cache : {"100%", "30%", "7%"}) {
      EXPECT_TRUE(Logits(*m, 2, 512, Stream(cache)) == want) << cache;
    }
    EXPECT_TRUE(Logits(*m, 1, 3, Stream("7%")) == want);
  }
}

TEST_F(Deepseek2Test, Q8LatentCacheIsDeterministicAndCloseToF16) {
  auto m = Load("deepseek3-tiny", "q8_0");
  ASSERT_TRUE(m);
  const std::vector<float> f16 = Logits(*m, 2, 512);
  const std::vector<float> q8 = Logits(*m, 2, 512, {}, KvElemType::kQ8_0);
  EXPECT_TRUE(q8 == Logits(*m, 1, 3, {}, KvElemType::kQ8_0));
  EXPECT_FALSE(q8 == f16) << "the cache type made no difference";
  // -ctv has no cache of its own in MLA (V is the latent part of K's row).
  EXPECT_TRUE(Logits(*m, 2, 512, {}, KvTypes{KvElemType::kF16, KvElemType::kQ8_0}) == f16);
  double max_diff = 0, scale = 0;
  for (size_t i = 0; i < f16.size(); ++i) {
    max_diff = std::max(max_diff, double(std::fabs(q8[i] - f16[i])));
    scale = std::max(scale, double(std::fabs(f16[i])));
  }
  EXPECT_LT(max_diff, 0.05 * scale);
}

// The cache holds one latent row per position and layer: n_layer * (kv_lora_rank + rope dims)
// f16 values, not per-head K and V (deepseek3-tiny: 4 heads x (96 + 64) = 640 values a layer).
TEST_F(Deepseek2Test, TheKvCacheHoldsTheCompressedLatentOnly) {
  for (const char* preset : {"deepseek2-tiny", "deepseek3-tiny"}) {
    auto m = Load(preset, "q8_0");
    ASSERT_TRUE(m);
    ContextOptions o;
    o.n_ctx = 4096;
    o.n_threads = 1;
    auto ctx = Context::Create(*m, o);
    ASSERT_TRUE(ctx.ok());
    const HParams& hp = m->hparams();
    const uint64_t floor = uint64_t{4096} * hp.n_layer * (hp.n_lora_kv + hp.n_rot) * 2;
    const uint64_t kv = (*ctx)->storage_plan().kv_cache;
    EXPECT_GE(kv, floor) << preset;
    EXPECT_LE(kv, floor * 105 / 100) << preset;
  }
}

// --legacy-mla writes the same weights as attn_kv_b: with float weights the two layouts are
// the same model, computed in another order (the absorbed k_b transposed from kv_b's rows).
TEST_F(Deepseek2Test, LegacyKvBFileComputesTheSameModel) {
  for (const char* preset : {"deepseek2-tiny", "deepseek3-tiny"}) {
    SCOPED_TRACE(preset);
    const std::string legacy = (models_->dir() / (std::string(preset) + "-legacy.gguf")).string();
    SynthOptions so;
    so.output_path = legacy;
    so.preset = preset;
    so.file_type = "f32";
    so.seed = 5;
    so.legacy_mla = true;
    ASSERT_TRUE(Synthesize(so).ok());
    auto cur = Load(preset, "f32");
    auto old = Model::Load(legacy, LoadOptions{});
    ASSERT_TRUE(cur && old.ok()) << old.status().message();
    EXPECT_TRUE(old.value()->parts().layers[0].attention.mla.legacy_kv_b);
    EXPECT_EQ(old.value()->layer(0).wk_b.type, GgmlType::kF32);
    const std::vector<float> a = Logits(*cur, 2, 512), b = Logits(*old.value(), 2, 512);
    ASSERT_EQ(a.size(), b.size());
    double max_diff = 0, scale = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      max_diff = std::max(max_diff, double(std::fabs(a[i] - b[i])));
      scale = std::max(scale, double(std::fabs(a[i])));
    }
    EXPECT_LT(max_diff, 1e-4 * scale);
  }
}

TEST_F(Deepseek2Test, MalformedFilesAreOneLineErrors) {
  const std::string preset = "deepseek3-tiny";
  auto expect = [](const std::string& message, const std::string& want) {
    EXPECT_NE(message.find(want), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  };
  expect(LoadError(Rewrite("no-rank.gguf", preset,
                           [](GgufMetadata& md) { md.Erase("deepseek2.attention.kv_lora_rank"); })),
         "missing key deepseek2.attention.kv_lora_rank");
  expect(LoadError(Rewrite("bad-rank.gguf", preset,
                           [](GgufMetadata& md) {
                             md.Set("deepseek2.attention.kv_lora_rank", GgufValue::Uint32(96));
                           })),
         "must be kv_lora_rank + rope dims");
  expect(LoadError(
             Rewrite("half-mla.gguf", preset,
                     [](GgufMetadata& md) { md.Erase("deepseek2.attention.value_length_mla"); })),
         "both be present or both absent");
  expect(LoadError(Rewrite("gating.gguf", preset,
                           [](GgufMetadata& md) {
                             md.Set("deepseek2.expert_gating_func", GgufValue::Uint32(4));
                           })),
         "deepseek2.expert_gating_func 4 is not supported");
  expect(LoadError(Rewrite("groups.gguf", preset,
                           [](GgufMetadata& md) {
                             md.Set("deepseek2.expert_group_used_count", GgufValue::Uint32(9));
                           })),
         "groups");
  expect(LoadError(Rewrite("longrope.gguf", preset,
                           [](GgufMetadata& md) {
                             md.Set("deepseek2.rope.scaling.type", GgufValue::String("longrope"));
                           })),
         "deepseek2.rope.scaling.type 'longrope' is not supported");
  expect(LoadError(
             Rewrite("no-kv-a.gguf", preset, [](GgufMetadata&) {}, {"blk.3.attn_kv_a_mqa.weight"})),
         "missing tensor blk.3.attn_kv_a_mqa.weight");
  expect(
      LoadError(Rewrite("no-bias.gguf", preset, [](GgufMetadata&) {}, {"blk.4.exp_probs_b.bias"})),
      "missing tensor blk.4.exp_probs_b.bias");
  expect(LoadError(Rewrite("no-dense.gguf", preset, [](GgufMetadata&) {}, {"blk.1.ffn_up.weight"})),
         "missing tensor blk.1.ffn_up.weight");
  // A dense layer count that disagrees with the tensors: layer 2 has experts, not ffn_gate.
  expect(LoadError(Rewrite("lead.gguf", preset,
                           [](GgufMetadata& md) {
                             md.Set("deepseek2.leading_dense_block_count", GgufValue::Uint32(3));
                           })),
         "missing tensor blk.2.ffn_gate.weight");
}

}  // namespace
}  // namespace mt
