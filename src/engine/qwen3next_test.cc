// qwen3next and qwen35moe on the engine: gated DeltaNet layers with a recurrent state per
// sequence beside gated full attention. The invariants of every architecture (bits do not
// depend on threads, batching, sequences sharing a batch or the expert tier), the states a
// sequence can resume from (the live one, the checkpoint before a prompt's last token, 0),
// a failed Decode that leaves them as they were, and one-line errors.
#include <gtest/gtest.h>

#include <functional>

#include "engine/context.h"
#include "engine/model.h"
#include "io/fault_injecting_engine.h"
#include "io/io_engine.h"
#include "synth/synth_test_util.h"

namespace mt {
namespace {

using testing_synth::SynthModels;

class Qwen3NextTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { models_ = std::make_unique<SynthModels>("qwen3next-test", 1); }
  static void TearDownTestSuite() { models_.reset(); }

  static std::unique_ptr<Model> Load(const std::string& preset, const std::string& type) {
    auto m = Model::Load(models_->Get(preset, type), LoadOptions{});
    EXPECT_TRUE(m.ok()) << m.status().message();
    return m.ok() ? std::move(m.value()) : nullptr;
  }

  static ContextOptions Options(int threads, uint32_t n_batch, uint32_t n_seq = 1) {
    ContextOptions o;
    o.n_ctx = 256;
    o.n_threads = threads;
    o.n_batch = n_batch;
    o.n_seq_max = n_seq;
    return o;
  }

  static std::unique_ptr<Context> Make(const Model& m, const ContextOptions& o) {
    auto ctx = Context::Create(m, o);
    EXPECT_TRUE(ctx.ok()) << ctx.status().message();
    return ctx.ok() ? std::move(ctx.value()) : nullptr;
  }

  static std::vector<float> Logits(const Model& m, const ContextOptions& o,
                                   const std::vector<int32_t>& tokens) {
    auto ctx = Make(m, o);
    if (!ctx) return {};
    std::vector<float> logits;
    Status s = ctx->Eval(tokens, LogitsFor::kAll, &logits);
    EXPECT_TRUE(s.ok()) << s.message();
    return logits;
  }

  // n token ids spread over the vocabulary.
  static std::vector<int32_t> Tokens(int n, int32_t salt = 0) {
    std::vector<int32_t> t(n);
    for (int i = 0; i < n; ++i) t[i] = (i * 7919 + salt * 104729 + 13) % 150000;
    return t;
  }

  static inline std::unique_ptr<SynthModels> models_;
};

TEST_F(Qwen3NextTest, ThreeDeltaNetLayersThenGatedAttention) {
  for (const char* preset : {"qwen3next-tiny", "qwen35moe-tiny"}) {
    auto m = Load(preset, "q8_0");
    ASSERT_TRUE(m);
    const ModelParts& p = m->parts();
    ASSERT_EQ(p.layers.size(), 4u) << "the NextN block is not part of the trunk";
    for (int il = 0; il < 3; ++il) {
      const AttentionParts& a = p.layers[il].attention;
      EXPECT_EQ(a.kind, AttentionKind::kDeltaNet);
      EXPECT_EQ(a.delta_net.n_v_heads, 4u);
      EXPECT_EQ(a.delta_net.key_heads, std::string(preset) == "qwen3next-tiny"
                                           ? KeyHeadOrder::kGrouped
                                           : KeyHeadOrder::kTiled);
      EXPECT_EQ(m->layer(il).ssm_conv1d.size(), size_t{a.delta_net.conv_channels()} * 4);
    }
    EXPECT_EQ(p.layers[3].attention.kind, AttentionKind::kGqa);
    EXPECT_TRUE(p.layers[3].attention.gqa.output_gate);
    EXPECT_EQ(m->layer(3).wq.rows, 2 * int64_t{m->hparams().n_embd_q()});
    EXPECT_EQ(p.rope.n_rot, 16);
  }
}

TEST_F(Qwen3NextTest, LogitsDoNotDependOnThreadsBatchingOrTier) {
  for (const char* preset : {"qwen3next-tiny", "qwen35moe-tiny"}) {
    SCOPED_TRACE(preset);
    auto m = Load(preset, "q4_k_m");
    ASSERT_TRUE(m);
    const std::vector<int32_t> tokens = Tokens(70);
    const std::vector<float> want = Logits(*m, Options(2, 512), tokens);
    ASSERT_EQ(want.size(), tokens.size() * m->hparams().n_vocab);
    EXPECT_TRUE(Logits(*m, Options(1, 512), tokens) == want);
    EXPECT_TRUE(Logits(*m, Options(2, 16), tokens) == want);
    EXPECT_TRUE(Logits(*m, Options(2, 1), tokens) == want);
    ContextOptions mmap = Options(2, 7);
    mmap.storage.mode = MoeStorage::kMmap;
    EXPECT_TRUE(Logits(*m, mmap, tokens) == want);
    ContextOptions stream = Options(2, 32);
    stream.storage.mode = MoeStorage::kStream;
    ASSERT_TRUE(ParseExpertCache("30%", &stream.storage).ok());
    EXPECT_TRUE(Logits(*m, stream, tokens) == want);
  }
}

// Two sequences in one Decode, their tokens interleaved, give each the logits it gets alone.
TEST_F(Qwen3NextTest, SequencesSharingABatchKeepStatesOfTheirOwn) {
  auto m = Load("qwen3next-tiny", "q8_0");
  ASSERT_TRUE(m);
  const std::vector<int32_t> a = Tokens(20, 1), b = Tokens(20, 2);
  const std::vector<float> want_a = Logits(*m, Options(2, 512), a);
  const std::vector<float> want_b = Logits(*m, Options(2, 512), b);
  auto ctx = Make(*m, Options(2, 8, 2));
  ASSERT_TRUE(ctx);
  std::vector<BatchToken> batch;
  for (uint32_t i = 0; i < 20; ++i) {
    batch.push_back({a[i], 0, i, true});
    batch.push_back({b[i], 1, i, true});
  }
  std::vector<float> logits;
  ASSERT_TRUE(ctx->Decode(batch, &logits).ok());
  const size_t V = m->hparams().n_vocab;
  for (size_t i = 0; i < 20; ++i) {
    EXPECT_TRUE(std::equal(want_a.begin() + i * V, want_a.begin() + (i + 1) * V,
                           logits.begin() + 2 * i * V));
    EXPECT_TRUE(std::equal(want_b.begin() + i * V, want_b.begin() + (i + 1) * V,
                           logits.begin() + (2 * i + 1) * V));
  }
}

// A prompt leaves the live state after it and a checkpoint before its last token: the same
// prompt again goes on from the checkpoint, an extension from the live state, a prefix that
// neither holds from 0; each time the logits are a fresh context's.
TEST_F(Qwen3NextTest, PrefixReuseResumesOnlyFromASavedState) {
  auto m = Load("qwen35moe-tiny", "q8_0");
  ASSERT_TRUE(m);
  const std::vector<int32_t> held = Tokens(60);
  auto with = [&](size_t prefix, int extra) {
    std::vector<int32_t> next(held.begin(), held.begin() + prefix);
    for (int32_t t : Tokens(extra, 3)) next.push_back(t);
    return next;
  };
  struct Case {
    std::vector<int32_t> next;
    size_t kept;
  };
  for (const Case& c : {Case{held, 59}, Case{with(60, 5), 60}, Case{with(40, 5), 0}}) {
    auto ctx = Make(*m, Options(2, 16));
    ASSERT_TRUE(ctx);
    std::vector<float> logits, fresh;
    ASSERT_TRUE(ctx->Eval(held, LogitsFor::kLast, &logits).ok());
    Result<size_t> kept = ctx->EvalAfterPrefix(held, c.next, &logits);
    ASSERT_TRUE(kept.ok()) << kept.status().message();
    EXPECT_EQ(kept.value(), c.kept);
    auto again = Make(*m, Options(2, 16));
    ASSERT_TRUE(again && again->Eval(c.next, LogitsFor::kLast, &fresh).ok());
    EXPECT_TRUE(logits == fresh);
  }
}

// After a prompt and a few generated tokens, a conversation's next prompt that shares only
// part of the answer goes on from the checkpoint, and positions with no saved state are
// refused in one line.
TEST_F(Qwen3NextTest, ANewTurnGoesOnFromTheCheckpoint) {
  auto m = Load("qwen3next-tiny", "q8_0");
  ASSERT_TRUE(m);
  auto ctx = Make(*m, Options(2, 512));
  ASSERT_TRUE(ctx);
  std::vector<int32_t> held = Tokens(30);
  std::vector<float> logits, fresh;
  ASSERT_TRUE(ctx->Eval(held, LogitsFor::kLast, &logits).ok());
  for (int32_t t : Tokens(5, 4)) {  // generation: one token at a time
    ASSERT_TRUE(ctx->Eval(std::vector<int32_t>{t}, LogitsFor::kLast, &logits).ok());
    held.push_back(t);
  }
  EXPECT_EQ(ctx->ReusablePrefix(0, 33), 29u);
  EXPECT_EQ(ctx->ReusablePrefix(0, 35), 35u);
  std::vector<int32_t> next(held.begin(), held.begin() + 33);
  for (int32_t t : Tokens(4, 5)) next.push_back(t);
  Result<size_t> kept = ctx->EvalAfterPrefix(held, next, &logits);
  ASSERT_TRUE(kept.ok()) << kept.status().message();
  EXPECT_EQ(kept.value(), 29u);
  auto again = Make(*m, Options(2, 512));
  ASSERT_TRUE(again && again->Eval(next, LogitsFor::kLast, &fresh).ok());
  EXPECT_TRUE(logits == fresh);

  ctx->TruncateKv(20);
  Status s = ctx->Eval(Tokens(2, 6), LogitsFor::kLast, &logits);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("sequence 0 cannot go on at position 20"), std::string::npos)
      << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos);
  std::vector<BatchToken> gap = {{1, 0, 0, false}, {2, 0, 2, true}};
  s = ctx->Decode(gap, &logits);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("position 2 follows 0"), std::string::npos) << s.message();
}

// A read that fails in the middle of a prompt fails the Decode; the states stay as they were,
// so the same context goes on from its live state with the right numbers.
TEST_F(Qwen3NextTest, AFailedDecodeLeavesTheStatesAsTheyWere) {
  auto m = Load("qwen3next-tiny", "q4_k_m");
  ASSERT_TRUE(m);
  const std::vector<int32_t> first = Tokens(12), second = Tokens(12, 7);
  std::vector<int32_t> all = first;
  all.insert(all.end(), second.begin(), second.end());
  const std::vector<float> want = Logits(*m, Options(2, 512), all);
  FaultPlan plan;
  FaultRule rule;
  rule.kind = FaultKind::kError;
  rule.every_nth = 1;
  rule.max_faults = 1;  // one failed read: no other faulted read still in flight after it
  plan.rules.push_back(rule);
  auto armed = std::make_shared<bool>(false);
  plan.rules[0].match = [armed](const ReadOp&) { return *armed; };
  ContextOptions o = Options(2, 4);
  o.storage.mode = MoeStorage::kStream;
  ASSERT_TRUE(ParseExpertCache("10%", &o.storage).ok());
  o.storage.make_io = [plan]() -> Result<std::unique_ptr<IoEngine>> {
    std::unique_ptr<IoEngine> inner = MT_TRY(CreatePreadEngine(2));
    return std::unique_ptr<IoEngine>(
        std::make_unique<FaultInjectingEngine>(std::move(inner), plan));
  };
  auto ctx = Make(*m, o);
  ASSERT_TRUE(ctx);
  std::vector<float> logits;
  ASSERT_TRUE(ctx->Eval(first, LogitsFor::kLast, &logits).ok());
  *armed = true;
  Status s = ctx->Eval(second, LogitsFor::kAll, &logits);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(ctx->n_past(), 12u);
  *armed = false;
  ASSERT_TRUE(ctx->Eval(second, LogitsFor::kAll, &logits).ok()) << "goes on from the live state";
  const size_t V = m->hparams().n_vocab;
  EXPECT_TRUE(std::equal(logits.begin(), logits.end(), want.begin() + 12 * V));
}

TEST_F(Qwen3NextTest, MalformedFilesAreOneLineErrors) {
  auto expect = [](const std::string& path, const std::string& want) {
    auto m = Model::Load(path, LoadOptions{});
    ASSERT_FALSE(m.ok()) << path << " loaded";
    const std::string& message = m.status().message();
    EXPECT_NE(message.find(want), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  };
  auto rewrite = [](const std::string& name, const std::string& preset,
                    std::function<void(GgufMetadata&)> edit, std::vector<std::string> drop = {}) {
    return models_->Rewrite(name, preset, "q8_0", edit, drop);
  };
  expect(rewrite("no-conv.gguf", "qwen3next-tiny",
                 [](GgufMetadata& md) { md.Erase("qwen3next.ssm.conv_kernel"); }),
         "missing key qwen3next.ssm.conv_kernel");
  expect(
      rewrite("inner.gguf", "qwen3next-tiny",
              [](GgufMetadata& md) { md.Set("qwen3next.ssm.inner_size", GgufValue::Uint32(100)); }),
      "bad DeltaNet sizes");
  expect(
      rewrite("groups.gguf", "qwen3next-tiny",
              [](GgufMetadata& md) { md.Set("qwen3next.ssm.group_count", GgufValue::Uint32(3)); }),
      "time_step_rank must be a multiple of group_count");
  expect(rewrite("no-a.gguf", "qwen3next-tiny", [](GgufMetadata&) {}, {"blk.1.ssm_a"}),
         "missing tensor blk.1.ssm_a");
  expect(rewrite("no-beta.gguf", "qwen35moe-tiny", [](GgufMetadata&) {}, {"blk.0.ssm_beta.weight"}),
         "missing tensor blk.0.ssm_beta.weight");
  expect(rewrite("sections.gguf", "qwen35moe-tiny",
                 [](GgufMetadata& md) {
                   md.Set("qwen35moe.rope.dimension_sections", GgufValue::Int32Array({2, 2, 2, 2}));
                 }),
         "takes the 4th section's angle");
  expect(rewrite("no-sections.gguf", "qwen35moe-tiny",
                 [](GgufMetadata& md) { md.Erase("qwen35moe.rope.dimension_sections"); }),
         "missing key qwen35moe.rope.dimension_sections");
}

}  // namespace
}  // namespace mt
