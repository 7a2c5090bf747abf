// Engine tests on synthetic models: load errors, determinism across thread counts, and
// batch invariance (a token's logits do not depend on what else is in its batch).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "base/sanitizer.h"
#include "engine/context.h"
#include "engine/model.h"
#include "gguf/gguf.h"
#include "synth/synth_test_util.h"

namespace mt {
namespace {

using testing_synth::SynthModels;

namespace fs = std::filesystem;

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { models_ = std::make_unique<SynthModels>("engine-test", 7); }
  static void TearDownTestSuite() { models_.reset(); }

  static std::string Synth(const std::string& preset, const std::string& type) {
    return models_->Get(preset, type);
  }

  static std::vector<float> Logits(const Model& m, std::span<const int32_t> tokens, int threads,
                                   uint32_t n_batch, KvTypes kv = KvElemType::kF16) {
    ContextOptions o;
    o.n_ctx = 64;
    o.n_threads = threads;
    o.n_batch = n_batch;
    o.kv_types = kv;
    Result<std::unique_ptr<Context>> ctx = Context::Create(m, o);
    EXPECT_TRUE(ctx.ok());
    std::vector<float> logits;
    Status s = (*ctx)->Eval(tokens, LogitsFor::kAll, &logits);
    EXPECT_TRUE(s.ok()) << s.message();
    return logits;
  }

  static inline std::unique_ptr<SynthModels> models_;
};

const std::vector<int32_t> kTokens = {1, 17, 300, 2, 45, 999, 5, 60, 61, 62, 700, 3};

TEST_F(EngineTest, LogitsAreIdenticalForOneAndTwoThreads) {
  for (const char* preset : {"olmoe-tiny", "mixtral-tiny", "qwen2moe-tiny", "glm4moe-tiny"}) {
    auto m = Model::Load(Synth(preset, "q8_0"), LoadOptions{});
    ASSERT_TRUE(m.ok()) << m.status().message();
    std::vector<float> one = Logits(*m.value(), kTokens, 1, 512);
    std::vector<float> two = Logits(*m.value(), kTokens, 2, 512);
    ASSERT_EQ(one.size(), kTokens.size() * m.value()->hparams().n_vocab);
    EXPECT_TRUE(one == two) << preset;  // bit for bit
  }
}

TEST_F(EngineTest, LogitsDoNotDependOnBatching) {
  for (const char* preset : {"olmoe-tiny", "glm4moe-tiny"}) {
    auto m = Model::Load(Synth(preset, "q4_k_m"), LoadOptions{});
    ASSERT_TRUE(m.ok()) << m.status().message();
    std::vector<float> whole = Logits(*m.value(), kTokens, 2, 512);
    std::vector<float> by3 = Logits(*m.value(), kTokens, 2, 3);
    std::vector<float> by1 = Logits(*m.value(), kTokens, 2, 1);
    EXPECT_TRUE(whole == by3) << preset;
    EXPECT_TRUE(whole == by1) << preset;
  }
}

// A q8_0 KV cache (half f16's memory): logits bit-identical for any thread count and batch
// size, as with f16, and close to the f16 cache's (each K/V element moves by at most half its
// block's step, 1/254 of the block's largest magnitude).
TEST_F(EngineTest, Q8KvCacheIsDeterministicAndCloseToF16) {
  for (const char* preset : {"olmoe-tiny", "mixtral-tiny"}) {
    auto m = Model::Load(Synth(preset, "q8_0"), LoadOptions{});
    ASSERT_TRUE(m.ok()) << m.status().message();
    const uint32_t V = m.value()->hparams().n_vocab;
    const std::vector<float> q8 = Logits(*m.value(), kTokens, 2, 512, KvElemType::kQ8_0);
    EXPECT_TRUE(q8 == Logits(*m.value(), kTokens, 1, 512, KvElemType::kQ8_0)) << preset;
    EXPECT_TRUE(q8 == Logits(*m.value(), kTokens, 2, 1, KvElemType::kQ8_0)) << preset;
    EXPECT_TRUE(q8 == Logits(*m.value(), kTokens, 2, 5, KvElemType::kQ8_0)) << preset;
    const std::vector<float> f16 = Logits(*m.value(), kTokens, 2, 512, KvElemType::kF16);
    EXPECT_FALSE(q8 == f16) << preset << ": the cache type made no difference";
    // K and V of different types (llama.cpp's -ctk q8_0 alone, and -ctv q8_0 alone): as
    // deterministic, and each side's type takes effect (neither equals f16 or all-q8_0).
    for (KvTypes mixed : {KvTypes{KvElemType::kQ8_0, KvElemType::kF16},
                          KvTypes{KvElemType::kF16, KvElemType::kQ8_0}}) {
      SCOPED_TRACE(KvTypesName(mixed));
      const std::vector<float> mx = Logits(*m.value(), kTokens, 2, 512, mixed);
      EXPECT_TRUE(mx == Logits(*m.value(), kTokens, 1, 512, mixed)) << preset;
      EXPECT_TRUE(mx == Logits(*m.value(), kTokens, 2, 5, mixed)) << preset;
      EXPECT_FALSE(mx == f16) << preset;
      EXPECT_FALSE(mx == q8) << preset;
    }
    std::vector<double> kls;
    for (size_t t = 0; t < kTokens.size(); ++t) {
      const float* a = f16.data() + t * V;
      const float* b = q8.data() + t * V;
      const double ma = *std::max_element(a, a + V), mb = *std::max_element(b, b + V);
      double za = 0, zb = 0;
      for (uint32_t i = 0; i < V; ++i) {
        za += std::exp(a[i] - ma);
        zb += std::exp(b[i] - mb);
      }
      double kl = 0;  // KL(f16 || q8)
      for (uint32_t i = 0; i < V; ++i) {
        const double la = a[i] - ma - std::log(za), lb = b[i] - mb - std::log(zb);
        kl += std::exp(la) * (la - lb);
      }
      kls.push_back(kl);
    }
    std::sort(kls.begin(), kls.end());
    const double median = kls[kls.size() / 2];
    std::printf("  %s: q8_0 vs f16 KV cache, KL median %.3g, max %.3g nats\n", preset, median,
                kls.back());
    // Measured (AVX2): median 1.7e-4 / 2.7e-4, max 3.3e-4 / 6.7e-4; a position whose router
    // top-k nearly ties can differ more (1.1e-2 seen), hence the median. A wrong scale or a
    // misplaced row is O(1).
    EXPECT_LT(median, 2e-3) << preset;
  }
}

// What continuous batching relies on: a sequence decoded together with others gets exactly
// the logits it gets alone (with each KV cache type: the slots' rows sit apart by their bytes).
TEST_F(EngineTest, SequencesBatchedTogetherGetTheirOwnLogits) {
  // Both attention kinds: per-head K/V caches (qwen2moe) and MLA's latent rows (deepseek2).
  for (const char* preset : {"qwen2moe-tiny", "deepseek3-tiny"}) {
    for (KvTypes kv : {KvTypes{KvElemType::kF16}, KvTypes{KvElemType::kQ8_0},
                       KvTypes{KvElemType::kQ8_0, KvElemType::kF16}}) {
      SCOPED_TRACE(std::string(preset) + " " + KvTypesName(kv));
      auto m = Model::Load(Synth(preset, "q4_k_m"), LoadOptions{});
      ASSERT_TRUE(m.ok()) << m.status().message();
      const uint32_t V = m.value()->hparams().n_vocab;
      ContextOptions o;
      o.n_ctx = 32;
      o.n_seq_max = 3;
      o.kv_types = kv;
      auto ctx = Context::Create(*m.value(), o);
      ASSERT_TRUE(ctx.ok());
      const std::vector<std::vector<int32_t>> seqs = {{1, 2, 3, 4, 5}, {900, 800, 700}, {42}};
      // Alone: each sequence in slot 0 of an empty cache, one after the other (so a slot that
      // read another slot's cells below would differ).
      std::vector<std::vector<float>> alone;
      for (uint32_t s = 0; s < seqs.size(); ++s) {
        (*ctx)->ClearKv();
        std::vector<BatchToken> b;
        for (uint32_t i = 0; i < seqs[s].size(); ++i) b.push_back({seqs[s][i], 0, i, true});
        std::vector<float> l;
        ASSERT_TRUE((*ctx)->Decode(b, &l).ok());
        alone.push_back(l);
      }
      // Together: all three prefills in one batch, interleaved.
      std::vector<BatchToken> mixed;
      for (uint32_t i = 0; i < 5; ++i) {
        for (uint32_t s = 0; s < seqs.size(); ++s) {
          if (i < seqs[s].size()) mixed.push_back({seqs[s][i], s, i, true});
        }
      }
      std::vector<float> l;
      ASSERT_TRUE((*ctx)->Decode(mixed, &l).ok());
      std::vector<size_t> seen(seqs.size(), 0);
      for (size_t j = 0; j < mixed.size(); ++j) {
        const uint32_t s = mixed[j].seq;
        const float* got = l.data() + j * V;
        const float* want = alone[s].data() + seen[s]++ * V;
        ASSERT_TRUE(std::equal(got, got + V, want)) << "seq " << s << " pos " << mixed[j].pos;
      }
      // Decoding one more token of each together equals decoding each alone.
      std::vector<BatchToken> step = {{7, 0, 5, true}, {8, 1, 3, true}, {9, 2, 1, true}};
      std::vector<float> together;
      ASSERT_TRUE((*ctx)->Decode(step, &together).ok());
      for (size_t j = 0; j < step.size(); ++j) {
        std::vector<float> one;
        ASSERT_TRUE((*ctx)->Decode(std::span(step).subspan(j, 1), &one).ok());
        EXPECT_TRUE(std::equal(one.begin(), one.end(), together.begin() + j * V)) << j;
      }
      std::vector<BatchToken> bad = {{1, 3, 0, true}};
      EXPECT_EQ((*ctx)->Decode(bad, &l).code(), StatusCode::kInvalidArgument);
    }
  }
}

TEST_F(EngineTest, LogitsAreFiniteAndNotDegenerate) {
  auto m = Model::Load(Synth("mixtral-tiny", "q4_k_m"), LoadOptions{});
  ASSERT_TRUE(m.ok());
  const uint32_t V = m.value()->hparams().n_vocab;
  std::vector<float> l = Logits(*m.value(), kTokens, 2, 512, KvElemType::kF32);
  for (size_t t = 0; t < kTokens.size(); ++t) {
    double sum = 0, sq = 0;
    for (uint32_t i = 0; i < V; ++i) {
      float x = l[t * V + i];
      ASSERT_TRUE(std::isfinite(x));
      sum += x;
      sq += double(x) * x;
    }
    double sd = std::sqrt(sq / V - (sum / V) * (sum / V));
    EXPECT_GT(sd, 0.5) << "token " << t;  // synth's head gives logits with std ~3
  }
}

TEST_F(EngineTest, ContextLongerThanTrainingIsRefused) {
  auto m = Model::Load(Synth("olmoe-tiny", "q8_0"), LoadOptions{});
  ASSERT_TRUE(m.ok());
  ContextOptions o;
  o.n_ctx = 100000;
  Result<std::unique_ptr<Context>> ctx = Context::Create(*m.value(), o);
  ASSERT_FALSE(ctx.ok());
  EXPECT_EQ(ctx.status().message(),
            "context size 100000 is longer than the model's training context 4096 (use -c 4096 "
            "or less)");
}

TEST_F(EngineTest, EvalRejectsBadTokensAndAFullContext) {
  auto m = Model::Load(Synth("olmoe-tiny", "q8_0"), LoadOptions{});
  ASSERT_TRUE(m.ok());
  ContextOptions o;
  o.n_ctx = 4;
  auto ctx = Context::Create(*m.value(), o);
  std::vector<float> logits;
  const int32_t bad[] = {1, 50304};
  EXPECT_EQ((*ctx)->Eval(bad, LogitsFor::kLast, &logits).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*ctx)->n_past(), 0u);
  const int32_t three[] = {1, 2, 3};
  EXPECT_TRUE((*ctx)->Eval(three, LogitsFor::kLast, &logits).ok());
  EXPECT_EQ((*ctx)->Eval(three, LogitsFor::kLast, &logits).code(), StatusCode::kResourceExhausted);
  EXPECT_FALSE((*ctx)->Eval({}, LogitsFor::kLast, &logits).ok());
}

// A conversation's next turn: the context keeps the prefix it holds and evaluates the rest,
// and the logits are those of a fresh evaluation, bit for bit; a stale position (held but
// not kept) must not leak in.
TEST_F(EngineTest, EvalAfterPrefixGivesTheBitsOfAFreshEvaluation) {
  auto m = Model::Load(Synth("olmoe-tiny", "q8_0"), LoadOptions{});
  ASSERT_TRUE(m.ok());
  ContextOptions o;
  o.n_ctx = 64;
  auto turns = Context::Create(*m.value(), o);
  auto fresh = Context::Create(*m.value(), o);
  ASSERT_TRUE(turns.ok() && fresh.ok());
  std::vector<int32_t> held;
  for (int32_t i = 0; i < 20; ++i) held.push_back(100 + 37 * i);
  std::vector<float> logits, want;
  ASSERT_EQ((*turns)->EvalAfterPrefix({}, held, &logits).value(), 0u);
  held.push_back(999);  // sampled, not evaluated: held but not in the context
  // The next prompt shares 15 tokens, then differs (a re-rendered earlier answer).
  std::vector<int32_t> next(held.begin(), held.begin() + 15);
  for (int32_t t : {7, 8, 9, 10, 11, 12}) next.push_back(t);
  EXPECT_EQ((*turns)->EvalAfterPrefix(held, next, &logits).value(), 15u);
  EXPECT_EQ((*turns)->n_past(), next.size());
  ASSERT_TRUE((*fresh)->Eval(next, LogitsFor::kLast, &want).ok());
  EXPECT_EQ(logits, want);
  // All of it held: the last token is still evaluated, for its logits.
  EXPECT_EQ((*turns)->EvalAfterPrefix(next, next, &logits).value(), next.size() - 1);
  EXPECT_EQ(logits, want);
  EXPECT_FALSE((*turns)->EvalAfterPrefix(next, {}, &logits).ok());
}

// Resident memory of this process (/proc/self/statm), bytes.
uint64_t ResidentBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  unsigned long long size = 0, resident = 0;
  if (f != nullptr) {
    EXPECT_EQ(std::fscanf(f, "%llu %llu", &size, &resident), 2);
    std::fclose(f);
  }
  return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

TEST_F(EngineTest, PopulateKvMakesTheKvCacheResidentAtCreate) {
  // Under TSan a lazy Create of a 134 MB KV grew the RSS by 105 MB (measured): the
  // sanitizer's own memory counts in the RSS, which then says nothing about the KV's pages.
  if (kThreadSanitizer) GTEST_SKIP() << "TSan's own memory counts in the resident bytes";
  auto m = Model::Load(Synth("olmoe-tiny", "q8_0"), LoadOptions{});
  ASSERT_TRUE(m.ok());
  ContextOptions o;
  o.n_ctx = 4096;
  o.n_seq_max = 8;
  o.n_threads = 1;
  for (bool populate : {false, true}) {
    o.populate_kv = populate;
    const uint64_t before = ResidentBytes();
    auto ctx = Context::Create(*m.value(), o);
    ASSERT_TRUE(ctx.ok());
    const uint64_t kv = (*ctx)->storage_plan().kv_cache, grew = ResidentBytes() - before;
    ASSERT_GE(kv, uint64_t{64} << 20);  // large against the rest of what Create allocates
    if (populate) {
      EXPECT_GE(grew, kv) << "populate_kv";
    } else {
      EXPECT_LT(grew, kv / 2) << "lazy KV";
    }
    // Same logits either way.
    std::vector<float> logits;
    EXPECT_TRUE((*ctx)->Eval(kTokens, LogitsFor::kLast, &logits).ok());
  }
}

// Writes a GGUF with the given metadata and no tensors.
std::string WriteMetadataOnly(const fs::path& dir, const std::string& name,
                              const GgufMetadata& md) {
  std::string path = (dir / name).string();
  GgufWriter w(path);
  w.metadata() = md;
  EXPECT_TRUE(w.Begin().ok());
  EXPECT_TRUE(w.Finish().ok());
  return path;
}

TEST_F(EngineTest, LoadErrorsNameWhatIsWrong) {
  GgufMetadata md;
  md.Set("general.architecture", GgufValue::String("gpt2"));
  std::string gpt2 = WriteMetadataOnly(models_->dir(), "gpt2.gguf", md);
  auto r = Model::Load(gpt2, LoadOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            gpt2 +
                ": unsupported architecture 'gpt2' (supported: qwen3moe, "
                "olmoe, llama, qwen2moe, deepseek2, glm4moe, gpt-oss, qwen3next, qwen35moe)");

  // A real model's metadata without its tensors: the first missing tensor is named.
  auto good = GgufModel::Open(Synth("olmoe-tiny", "q8_0"));
  ASSERT_TRUE(good.ok());
  std::string no_tensors = WriteMetadataOnly(models_->dir(), "no-tensors.gguf", good->metadata());
  r = Model::Load(no_tensors, LoadOptions{});
  EXPECT_EQ(r.status().message(), no_tensors + ": missing tensor token_embd.weight");

  // The same without tokenizer keys: refused before tensors are looked at.
  GgufMetadata no_vocab;
  for (const auto& e : good->metadata().entries()) {
    if (!e.key.starts_with("tokenizer.")) no_vocab.Set(e.key, e.value);
  }
  std::string no_tok = WriteMetadataOnly(models_->dir(), "no-tokenizer.gguf", no_vocab);
  r = Model::Load(no_tok, LoadOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("token_embd"), std::string::npos);
}

}  // namespace
}  // namespace mt
