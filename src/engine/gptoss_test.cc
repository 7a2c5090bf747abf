// gpt-oss on the engine: sinks, a sliding window whose layers keep only a ring of positions,
// biased routers and experts. The invariants of every architecture over a prompt longer than
// the window (bits do not depend on threads, batching, the ring or the expert tier), what the
// ring costs and keeps, prefix reuse that the ring allows or refuses, and one-line errors.
#include <gtest/gtest.h>

#include <numeric>

#include "engine/context.h"
#include "engine/model.h"
#include "synth/synth_test_util.h"

namespace mt {
namespace {

using testing_synth::SynthModels;

class GptOssTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { models_ = std::make_unique<SynthModels>("gptoss-test", 3); }
  static void TearDownTestSuite() { models_.reset(); }

  static std::unique_ptr<Model> Load(const std::string& type) {
    auto m = Model::Load(models_->Get("gpt-oss-tiny", type), LoadOptions{});
    EXPECT_TRUE(m.ok()) << m.status().message();
    return m.ok() ? std::move(m.value()) : nullptr;
  }

  static std::unique_ptr<Context> Make(const Model& m, int threads, uint32_t n_batch,
                                       StorageOptions storage = {}) {
    ContextOptions o;
    o.n_ctx = 512;
    o.n_threads = threads;
    o.n_batch = n_batch;
    o.storage = std::move(storage);
    auto ctx = Context::Create(m, o);
    EXPECT_TRUE(ctx.ok()) << ctx.status().message();
    return ctx.ok() ? std::move(ctx.value()) : nullptr;
  }

  static std::vector<float> Logits(const Model& m, int threads, uint32_t n_batch,
                                   StorageOptions storage = {}) {
    auto ctx = Make(m, threads, n_batch, std::move(storage));
    if (!ctx) return {};
    std::vector<float> logits;
    Status s = ctx->Eval(Tokens(kLength), LogitsFor::kAll, &logits);
    EXPECT_TRUE(s.ok()) << s.message();
    return logits;
  }

  // n token ids spread over the vocabulary.
  static std::vector<int32_t> Tokens(int n, int32_t salt = 0) {
    std::vector<int32_t> t(n);
    for (int i = 0; i < n; ++i) t[i] = (i * 7919 + salt * 104729 + 13) % 200000;
    return t;
  }

  static constexpr int kLength = 200;  // past the 128-position window
  static inline std::unique_ptr<SynthModels> models_;
};

TEST_F(GptOssTest, LayersSlideOnTheEvenOnesWithSinks) {
  auto m = Load("mxfp4");
  ASSERT_TRUE(m);
  const ModelParts& p = m->parts();
  for (uint32_t il = 0; il < m->hparams().n_layer; ++il) {
    EXPECT_EQ(p.layers[il].attention.sliding_window, il % 2 == 0 ? 128u : 0u) << il;
    EXPECT_TRUE(p.layers[il].attention.sinks);
    EXPECT_EQ(m->layer(static_cast<int>(il)).attn_sinks.size(), m->hparams().n_head);
    EXPECT_EQ(m->layer(static_cast<int>(il)).down_exps_b.size(),
              size_t{m->hparams().n_expert} * m->hparams().n_embd);
  }
  EXPECT_EQ(p.router.scoring, ExpertScoring::kSoftmaxOfTopK);
}

// n_batch 512 keeps the sliding layers' whole 512 positions; n_batch 16 and 5 give them
// rings of 144 and 133 cells, which the 200 positions wrap.
TEST_F(GptOssTest, LogitsDoNotDependOnThreadsBatchingRingsOrTier) {
  auto m = Load("mxfp4");
  ASSERT_TRUE(m);
  const std::vector<float> want = Logits(*m, 2, 512);
  ASSERT_EQ(want.size(), size_t{kLength} * m->hparams().n_vocab);
  EXPECT_TRUE(Logits(*m, 1, 512) == want);
  EXPECT_TRUE(Logits(*m, 2, 16) == want);
  EXPECT_TRUE(Logits(*m, 2, 5) == want);
  StorageOptions mmap;
  mmap.mode = MoeStorage::kMmap;
  EXPECT_TRUE(Logits(*m, 2, 512, mmap) == want);
  StorageOptions stream;
  stream.mode = MoeStorage::kStream;
  ASSERT_TRUE(ParseExpertCache("30%", &stream).ok());
  EXPECT_TRUE(Logits(*m, 2, 16, stream) == want);
}

TEST_F(GptOssTest, SlidingLayersKeepARingOfTheWindowPlusABatch) {
  auto m = Load("mxfp4");
  ASSERT_TRUE(m);
  auto full = Make(*m, 2, 512);  // 2 * (128 + 512) >= 512: no ring
  auto ring = Make(*m, 2, 16);   // 2 * (128 + 16) cells in the 2 sliding layers
  ASSERT_TRUE(full && ring);
  const HParams& hp = m->hparams();
  const uint64_t per_position = 2 * uint64_t{hp.n_head_kv} * hp.head_dim_k * 2;  // K+V, f16
  EXPECT_EQ(full->storage_plan().kv_cache, 4 * per_position * 512);
  EXPECT_EQ(ring->storage_plan().kv_cache, (2 * 512 + 2 * 288) * per_position);
}

// Going back to a prefix needs the window before it: the ring of n_batch 16 holds it for up
// to 16 positions past the prefix, so after 150 positions the prefix 145 is kept and 100 is
// not (evaluated afresh); the logits are those of a fresh context either way.
TEST_F(GptOssTest, PrefixReuseKeepsOnlyWhatTheRingStillHolds) {
  auto m = Load("q8_0");
  ASSERT_TRUE(m);
  const std::vector<int32_t> held = Tokens(150);
  for (const size_t prefix : {145, 100}) {
    SCOPED_TRACE(prefix);
    std::vector<int32_t> next(held.begin(), held.begin() + prefix);
    for (int32_t t : Tokens(7, 1)) next.push_back(t);
    auto ctx = Make(*m, 2, 16);
    ASSERT_TRUE(ctx);
    std::vector<float> logits, fresh;
    ASSERT_TRUE(ctx->Eval(held, LogitsFor::kLast, &logits).ok());
    Result<size_t> kept = ctx->EvalAfterPrefix(held, next, &logits);
    ASSERT_TRUE(kept.ok()) << kept.status().message();
    EXPECT_EQ(kept.value(), prefix == 145 ? 145u : 0u);
    auto again = Make(*m, 2, 16);
    ASSERT_TRUE(again && again->Eval(next, LogitsFor::kLast, &fresh).ok());
    EXPECT_TRUE(logits == fresh);
  }
}

TEST_F(GptOssTest, MalformedFilesAreOneLineErrors) {
  auto expect = [](const std::string& path, const std::string& want) {
    auto m = Model::Load(path, LoadOptions{});
    ASSERT_FALSE(m.ok()) << path << " loaded";
    const std::string& message = m.status().message();
    EXPECT_NE(message.find(want), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  };
  auto rewrite = [](const std::string& name, std::function<void(GgufMetadata&)> edit,
                    std::vector<std::string> drop = {}) {
    return models_->Rewrite(name, "gpt-oss-tiny", "q8_0", edit, drop);
  };
  expect(rewrite("no-window.gguf",
                 [](GgufMetadata& md) { md.Erase("gpt-oss.attention.sliding_window"); }),
         "missing key gpt-oss.attention.sliding_window");
  expect(rewrite("zero-window.gguf",
                 [](GgufMetadata& md) {
                   md.Set("gpt-oss.attention.sliding_window", GgufValue::Uint32(0));
                 }),
         "gpt-oss.attention.sliding_window is 0");
  expect(rewrite("swa-base.gguf",
                 [](GgufMetadata& md) {
                   md.Set("gpt-oss.rope.freq_base_swa", GgufValue::Float32(10000));
                 }),
         "gpt-oss.rope.freq_base_swa 10000 differs");
  expect(rewrite("no-sinks.gguf", [](GgufMetadata&) {}, {"blk.1.attn_sinks.weight"}),
         "missing tensor blk.1.attn_sinks.weight");
  expect(rewrite("no-bias.gguf", [](GgufMetadata&) {}, {"blk.2.ffn_down_exps.bias"}),
         "missing tensor blk.2.ffn_down_exps.bias");
  expect(rewrite("no-q-bias.gguf", [](GgufMetadata&) {}, {"blk.0.attn_q.bias"}),
         "missing tensor blk.0.attn_q.bias");
}

}  // namespace
}  // namespace mt
