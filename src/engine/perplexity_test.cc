#include "engine/perplexity.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace mt {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const double kLn2 = std::log(2.0);

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/ppl_" + std::to_string(getpid()) + "_" + name;
}

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void WriteBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint16_t> Compress(const std::vector<float>& logits, int32_t token = 0) {
  std::vector<uint16_t> record(KlRecordWords(static_cast<int32_t>(logits.size())));
  CompressLogProbs(logits, token, record);
  return record;
}

float RecordScale(const std::vector<uint16_t>& r) {
  float v;
  std::memcpy(&v, r.data(), 4);
  return v;
}
float RecordMinLogProb(const std::vector<uint16_t>& r) {
  float v;
  std::memcpy(&v, r.data() + 2, 4);
  return v;
}

// ---- nll / PPL ----

TEST(PerplexityTest, UniformLogitsGivePplEqualToVocabSize) {
  for (int v : {2, 8, 1000}) {
    std::vector<float> logits(v, 0.25f);
    PplStats stats;
    for (int t = 0; t < 10; ++t) stats.Add(TokenNll(logits, t % v));
    EXPECT_NEAR(stats.Ppl(), v, 1e-9 * v) << "V = " << v;
  }
}

TEST(PerplexityTest, TokenNllIsMinusLogSoftmax) {
  // logits {0, ln 3}: p = 1/4, 3/4.
  const std::vector<float> logits = {0.0f, std::log(3.0f)};
  EXPECT_NEAR(TokenNll(logits, 0), std::log(4.0), 1e-6);
  EXPECT_NEAR(TokenNll(logits, 1), std::log(4.0 / 3.0), 1e-6);
  // Shift invariance, and no overflow at large logits.
  const std::vector<float> shifted = {1000.0f, 1000.0f + std::log(3.0f)};
  EXPECT_NEAR(TokenNll(shifted, 0), std::log(4.0), 1e-4);
}

TEST(PerplexityTest, UncertaintyFollowsLlamaCppFormula) {
  // nll = 1, 2, 3, 4: mean 2.5, mean of squares 7.5, variance 1.25;
  // +/- = exp(2.5) * sqrt(1.25 / 3) = 12.182494 * 0.645497 = 7.863766.
  PplStats stats;
  for (double nll : {1.0, 2.0, 3.0, 4.0}) stats.Add(nll);
  EXPECT_NEAR(stats.Ppl(), 12.182493960703473, 1e-12);
  ASSERT_TRUE(stats.Uncertainty().has_value());
  EXPECT_NEAR(*stats.Uncertainty(), 7.863766037512831, 1e-12);
  EXPECT_EQ(PplFinalLine(stats), "Final estimate: PPL = 12.1825 +/- 7.86377\n");
}

TEST(PerplexityTest, NoUncertaintyWithoutVariance) {
  PplStats one;
  one.Add(1.5);
  EXPECT_FALSE(one.Uncertainty().has_value());
  EXPECT_EQ(PplFinalLine(one), "");
  PplStats same;
  same.Add(0.5);
  same.Add(0.5);
  EXPECT_FALSE(same.Uncertainty().has_value());  // 0.25 - 0.25 is exactly 0
}

TEST(PerplexityTest, MeanAndUncertaintyNeedsMoreThanTenValues) {
  // 0,1 repeated: mean 0.5, variance 0.25; with n = 12: sqrt(0.25 / 11) = 0.150756.
  MeanUnc m = MeanAndUncertainty(6.0, 6.0, 12);
  EXPECT_DOUBLE_EQ(m.mean, 0.5);
  EXPECT_NEAR(m.unc, 0.15075567228888181, 1e-15);
  MeanUnc few = MeanAndUncertainty(5.0, 5.0, 10);
  EXPECT_DOUBLE_EQ(few.mean, 0.5);
  EXPECT_EQ(few.unc, 0.0);
  EXPECT_EQ(MeanAndUncertainty(1.0, 1.0, 0).mean, 0.0);
  // Covariance of a = b = (0,1,...): (6/12 - 0.25) / 11.
  EXPECT_NEAR(Covariance(6.0, 6.0, 6.0, 12), 0.25 / 11, 1e-15);
  EXPECT_EQ(Covariance(5.0, 5.0, 5.0, 9), 0.0);
}

// ---- Compression ----

TEST(PerplexityTest, RecordWordsPadVocabToEven) {
  EXPECT_EQ(KlRecordWords(1), 6u);
  EXPECT_EQ(KlRecordWords(2), 6u);
  EXPECT_EQ(KlRecordWords(3), 8u);
  EXPECT_EQ(KlRecordWords(151936), 151940u);
  EXPECT_EQ(KlRecordWords(151937), 151942u);
}

TEST(PerplexityTest, CompressionMatchesHandDerivedRecord) {
  // logits 0..3 (plus an odd vocab for padding: 5 tokens, 2 at the floor). max 3, min 0:
  // scale = 3 / 65535, q = i * 65535 / 3 = 0, 21845, 43690, 65535; lse = ln(1 + e^-1 + e^-2 +
  // e^-3 + e^-3) and min_log_prob = 0 - 3 - lse.
  const std::vector<float> logits = {3.0f, 0.0f, 1.0f, 2.0f, 0.0f};
  std::vector<uint16_t> r = Compress(logits, 2);
  ASSERT_EQ(r.size(), 10u);
  const double lse = std::log(1 + std::exp(-1.0) + std::exp(-2.0) + 2 * std::exp(-3.0));
  EXPECT_FLOAT_EQ(RecordScale(r), 3.0f / 65535.0f);
  EXPECT_NEAR(RecordMinLogProb(r), -3.0 - lse, 1e-6);
  EXPECT_EQ(r[4], 65535);
  EXPECT_EQ(r[5], 0);
  EXPECT_EQ(r[6], 21845);
  EXPECT_EQ(r[7], 43690);
  EXPECT_EQ(r[8], 0);
  EXPECT_EQ(r[9], 0);  // padding
  // The returned nll is -ln p(2) = 3 + lse - 1.
  std::vector<uint16_t> r2(r.size(), 0xFFFF);  // padding gets zeroed whatever was there
  EXPECT_NEAR(CompressLogProbs(logits, 2, r2), 2.0 + lse, 1e-6);
  EXPECT_EQ(r2, r);
  // Decoding gives log p within half a quantization step.
  for (int i = 0; i < 5; ++i) {
    EXPECT_NEAR(RecordLogProb(r, i), logits[i] - 3.0 - lse, 3.0 / 65535 / 2 + 1e-6) << i;
  }
}

TEST(PerplexityTest, CompressionClampsBelowMaxMinus16) {
  // min is raised to max - 16: logits below it store q = 0 and decode to min_log_prob.
  const std::vector<float> logits = {0.0f, -30.0f, -8.0f};
  std::vector<uint16_t> r = Compress(logits);
  EXPECT_FLOAT_EQ(RecordScale(r), 16.0f / 65535.0f);
  EXPECT_EQ(r[4], 65535);
  EXPECT_EQ(r[5], 0);
  EXPECT_EQ(r[6], 32768);  // 8 / (16 / 65535) = 32767.5, rounded half to even
  const double lse = std::log(1 + std::exp(-30.0) + std::exp(-8.0));
  EXPECT_NEAR(RecordLogProb(r, 1), -16.0 - lse, 1e-5);
}

TEST(PerplexityTest, CompressionOfFlatLogitsHasZeroScale) {
  const std::vector<float> logits(4, 1.5f);
  std::vector<uint16_t> r = Compress(logits);
  EXPECT_EQ(RecordScale(r), 0.0f);
  EXPECT_NEAR(RecordMinLogProb(r), -std::log(4.0), 1e-6);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(r[4 + i], 0);
}

// ---- KL divergence ----

TEST(PerplexityTest, KldOfIdenticalDistributionsIsZero) {
  const std::vector<float> logits = {0.0f, 1.0f};  // compresses exactly: q = 0, 65535
  KldStats stats;
  auto [kld, p_diff] = stats.Add(logits, Compress(logits), 1);
  EXPECT_NEAR(kld, 0.0, 1e-6);
  EXPECT_NEAR(p_diff, 0.0f, 1e-6);
  EXPECT_EQ(stats.n_same_top, 1);
  // A realistic spread: KLD stays at the quantization noise level.
  std::vector<float> wide(1000);
  for (int i = 0; i < 1000; ++i) wide[i] = std::sin(i * 0.37f) * 6.0f;
  auto [kld2, p_diff2] = stats.Add(wide, Compress(wide), 5);
  EXPECT_NEAR(kld2, 0.0, 1e-4);
  EXPECT_NEAR(p_diff2, 0.0f, 1e-5);
  EXPECT_EQ(stats.n_same_top, 2);
}

TEST(PerplexityTest, KldOfCraftedPairMatchesHandValue) {
  // base p = (1/2, 1/2) (flat logits: scale 0, min_log_prob -ln 2), Q = (1/4, 3/4):
  // KL(base || Q) = 1/2 ln(2) + 1/2 ln(2/3) = 1/2 ln(4/3) = 0.143841.
  const std::vector<uint16_t> base = Compress({0.0f, 0.0f});
  const std::vector<float> q = {0.0f, std::log(3.0f)};
  KldStats stats;
  auto [kld, p_diff] = stats.Add(q, base, 1);
  EXPECT_NEAR(kld, 0.5 * std::log(4.0 / 3.0), 1e-6);
  EXPECT_NEAR(p_diff, 0.25f, 1e-6);  // 3/4 - 1/2
  EXPECT_NEAR(stats.sum_nll, std::log(4.0 / 3.0), 1e-6);
  EXPECT_NEAR(stats.sum_nll_base, kLn2, 1e-6);
  EXPECT_EQ(stats.n_same_top, 0);  // Q's top is 1, the base's first maximum is 0
  auto [kld0, p_diff0] = stats.Add(q, base, 0);
  EXPECT_NEAR(kld0, kld, 1e-12);  // does not depend on the token
  EXPECT_NEAR(p_diff0, -0.25f, 1e-6);
  EXPECT_EQ(stats.count, 2);
  EXPECT_NEAR(stats.max_p_diff, 0.25f, 1e-6);
  EXPECT_NEAR(stats.sum_p_diff2, 2 * 0.0625, 1e-6);
}

TEST(PerplexityTest, KldSkipsBaseProbabilitiesAtTheFloor) {
  // base logits {0, -30}: token 1 sits at the floor (log p <= -16) and is left out, so
  // against Q = (1/2, 1/2) the sum is 1 * (0 - ln 1/2) = ln 2.
  const std::vector<uint16_t> base = Compress({0.0f, -30.0f});
  KldStats stats;
  EXPECT_NEAR(stats.Add(std::vector<float>{0.0f, 0.0f}, base, 0).first, kLn2, 1e-5);
  // Against Q = (1, e^-1000) the floor token would add e^(-16 - lse) (-16 + 1000) = 1.1e-4;
  // left out, the sum is 0 (up to float rounding of token 0's term).
  EXPECT_NEAR(stats.Add(std::vector<float>{0.0f, -1000.0f}, base, 0).first, 0.0, 1e-5);
}

TEST(PerplexityTest, KlTableRowFormat) {
  const std::vector<uint16_t> base = Compress({0.0f, 0.0f});
  const std::vector<float> q = {0.0f, std::log(3.0f)};
  KldStats stats;
  stats.Add(q, base, 1);
  stats.Add(q, base, 0);
  // PPL(Q) = exp((ln 4/3 + ln 4) / 2) = sqrt(16/3) = 2.3094; ln ratio = 1/2 ln(4/3) =
  // 0.14384 (= the KLD here); RMS dp = 25%; same top 0%. Uncertainties are 0 with n <= 10.
  EXPECT_EQ(KlTableRow(1, stats),
            "   1       2.3094 ±    0.0000       0.14384 ±    0.00000       0.14384 ±    "
            "0.00000    25.000 ±  0.000 %     0.000 ±  0.000 %\n");
  EXPECT_THAT(KlTableHeader(), HasSubstr("KL Divergence"));
}

double SummaryValue(const std::string& summary, const std::string& label) {
  size_t at = summary.find("\n" + label);
  if (at == std::string::npos) return NAN;
  size_t colon = summary.find(':', at);
  return std::strtod(summary.c_str() + colon + 1, nullptr);
}

TEST(PerplexityTest, KlSummaryStatistics) {
  KldStats stats;
  // Too few tokens: nothing, as llama.cpp.
  EXPECT_EQ(KlSummary(stats, {1.0f}, {0.0f}), "");

  const std::vector<uint16_t> base = Compress({0.0f, 0.0f});
  const std::vector<float> q = {0.0f, std::log(3.0f)};
  for (int i = 0; i < 101; ++i) stats.Add(q, base, i % 2);
  std::vector<float> kld_values, p_diff_values;
  for (int i = 100; i >= 0; --i) kld_values.push_back(static_cast<float>(i));  // unsorted
  for (int i = 0; i <= 100; ++i) p_diff_values.push_back((i - 50) / 100.0f);
  const std::string s = "\n" + KlSummary(stats, kld_values, p_diff_values);
  // Tokens alternate 0, 1, ..., 0: nll ln 4 (token 0, 51 times) and ln 4/3 (50 times).
  const double log_ppl = (51 * std::log(4.0) + 50 * std::log(4.0 / 3.0)) / 101;
  EXPECT_NEAR(SummaryValue(s, "Mean PPL(Q)  "), std::exp(log_ppl), 1e-6);
  EXPECT_NEAR(SummaryValue(s, "Mean PPL(base)"), 2.0, 1e-6);
  EXPECT_NEAR(SummaryValue(s, "Mean ln(PPL(Q)/PPL(base))"), log_ppl - kLn2, 1e-6);
  EXPECT_NEAR(SummaryValue(s, "Mean    KLD"), 0.143841, 1e-6);
  // Percentiles interpolate: the p-th of 0..100 is 100 p.
  EXPECT_NEAR(SummaryValue(s, "Maximum KLD"), 100.0, 1e-6);
  EXPECT_NEAR(SummaryValue(s, "99.0%   KLD"), 99.0, 1e-4);
  EXPECT_NEAR(SummaryValue(s, "90.0%   KLD"), 90.0, 1e-4);
  EXPECT_NEAR(SummaryValue(s, "Median  KLD"), 50.0, 1e-6);
  EXPECT_NEAR(SummaryValue(s, " 5.0%   KLD"), 5.0, 1e-4);
  EXPECT_NEAR(SummaryValue(s, "Minimum KLD"), 0.0, 1e-6);
  EXPECT_NEAR(SummaryValue(s, "Maximum Δp"), 50.0, 1e-3);
  EXPECT_NEAR(SummaryValue(s, "75.0%   Δp"), 25.0, 1e-3);
  EXPECT_NEAR(SummaryValue(s, "Minimum Δp"), -50.0, 1e-3);
  EXPECT_NEAR(SummaryValue(s, "RMS Δp    "), 25.0, 1e-3);
  EXPECT_NEAR(SummaryValue(s, "Same top p"), 0.0, 1e-6);
  EXPECT_THAT(s, HasSubstr("====== KL divergence statistics ======\n"));
  EXPECT_THAT(s, HasSubstr("\nMean    KLD:   0.143841 ±   0.000000\n"));
}

// ---- Chunk planning ----

TEST(PerplexityTest, PlanChunksAsLlamaCpp) {
  Result<ChunkPlan> p = PlanChunks(1000, 128, -1);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->n_chunk, 7);  // 1000 / 128
  EXPECT_EQ(p->first, 64);
  EXPECT_EQ(p->n_scored, 63);  // positions 64..126 predict 65..127
  EXPECT_EQ(PlanChunks(1000, 128, 3)->n_chunk, 3);
  EXPECT_EQ(PlanChunks(1000, 128, 50)->n_chunk, 7);
  EXPECT_EQ(PlanChunks(256, 128, -1)->n_chunk, 2);
  EXPECT_EQ(PlanChunks(1000, 5, -1)->n_scored, 2);  // first 2: positions 2, 3
}

TEST(PerplexityTest, PlanChunksErrors) {
  Result<ChunkPlan> short_text = PlanChunks(255, 128, -1);
  ASSERT_FALSE(short_text.ok());
  EXPECT_EQ(short_text.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(short_text.status().message(), HasSubstr("at least 256 tokens"));
  EXPECT_THAT(short_text.status().message(), HasSubstr("only 255 tokens"));
  EXPECT_FALSE(PlanChunks(1000, 1, -1).ok());
  EXPECT_FALSE(PlanChunks(1000, 128, 0).ok());
}

// ---- The base file ----

struct BaseFile {
  std::string path;
  std::vector<int32_t> tokens;
  std::vector<std::vector<uint16_t>> records;
};

// n_ctx 4, n_vocab 3, 2 chunks: n_scored = 4 - 1 - 2 = 1 record per chunk of 8 words.
BaseFile WriteSmallBase(const std::string& name) {
  BaseFile f;
  f.path = TempPath(name);
  f.tokens = {1, 2, 0, 1, 2, 2, 1, 0};
  f.records = {Compress({0.5f, -1.0f, 2.0f}, 1), Compress({3.0f, 3.0f, -20.0f}, 0)};
  Result<KlBaseWriter> w = KlBaseWriter::Create(f.path, 4, 3, 2, f.tokens);
  EXPECT_TRUE(w.ok()) << w.status().message();
  for (const auto& r : f.records) EXPECT_TRUE(w->Append(r).ok());
  EXPECT_TRUE(w->Finish().ok());
  return f;
}

TEST(PerplexityTest, BaseFileRoundTrip) {
  BaseFile f = WriteSmallBase("roundtrip.kld");
  // 8 magic + 3 * 4 header + 8 * 4 tokens + 2 records * 8 words * 2 bytes = 84.
  std::vector<uint8_t> bytes = ReadBytes(f.path);
  ASSERT_EQ(bytes.size(), 84u);
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 8), "_logits_");
  int32_t header[3];
  std::memcpy(header, bytes.data() + 8, 12);
  EXPECT_EQ(header[0], 4);
  EXPECT_EQ(header[1], 3);
  EXPECT_EQ(header[2], 2);

  Result<KlBaseReader> r = KlBaseReader::Open(f.path);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->n_ctx(), 4);
  EXPECT_EQ(r->n_vocab(), 3);
  EXPECT_EQ(r->n_chunk(), 2);
  EXPECT_EQ(r->tokens(), f.tokens);
  EXPECT_TRUE(r->CheckCompatible(3, 4).ok());
  EXPECT_TRUE(r->CheckCompatible(3, 512).ok());  // a larger context is fine
  std::vector<uint16_t> rec(KlRecordWords(3));
  for (const auto& want : f.records) {
    ASSERT_TRUE(r->ReadRecord(rec).ok());
    EXPECT_EQ(rec, want);
  }
  Status past_end = r->ReadRecord(rec);
  EXPECT_FALSE(past_end.ok());
  EXPECT_THAT(past_end.message(), HasSubstr("offset 84"));
  std::remove(f.path.c_str());
}

void ExpectOneLineError(const Status& s, const std::string& path, const std::string& what) {
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(path));
  EXPECT_THAT(s.message(), HasSubstr(what));
  EXPECT_THAT(s.message(), Not(HasSubstr("\n")));
}

TEST(PerplexityTest, TruncatedOrLongBaseFileIsAnError) {
  BaseFile f = WriteSmallBase("truncated.kld");
  std::vector<uint8_t> bytes = ReadBytes(f.path);
  WriteBytes(f.path, std::vector<uint8_t>(bytes.begin(), bytes.end() - 1));
  Result<KlBaseReader> r = KlBaseReader::Open(f.path);
  ExpectOneLineError(r.status(), f.path, "truncated: 83 bytes");
  EXPECT_THAT(r.status().message(), HasSubstr("need 84 bytes"));
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);

  WriteBytes(f.path, std::vector<uint8_t>(bytes.begin(), bytes.begin() + 10));
  ExpectOneLineError(KlBaseReader::Open(f.path).status(), f.path, "truncated: 10 bytes");

  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  WriteBytes(f.path, longer);
  ExpectOneLineError(KlBaseReader::Open(f.path).status(), f.path, "longer than its header says");
  std::remove(f.path.c_str());
}

TEST(PerplexityTest, CorruptBaseFileFieldsAreErrors) {
  BaseFile f = WriteSmallBase("corrupt.kld");
  const std::vector<uint8_t> good = ReadBytes(f.path);

  std::vector<uint8_t> bad = good;
  bad[0] = 'X';
  WriteBytes(f.path, bad);
  ExpectOneLineError(KlBaseReader::Open(f.path).status(), f.path, "_logits_");

  bad = good;
  bad[20 + 4 * 5] = 3;  // token 5 := 3, outside n_vocab 3; at byte offset 40
  WriteBytes(f.path, bad);
  Status s = KlBaseReader::Open(f.path).status();
  ExpectOneLineError(s, f.path, "offset 40: token id 3 is outside the vocabulary");

  bad = good;
  bad[8] = 1;  // n_ctx 1
  WriteBytes(f.path, bad);
  ExpectOneLineError(KlBaseReader::Open(f.path).status(), f.path, "n_ctx 1 is below 2");

  bad = good;
  bad[16] = 3;  // n_chunk 3: the size no longer fits
  WriteBytes(f.path, bad);
  ExpectOneLineError(KlBaseReader::Open(f.path).status(), f.path, "truncated");
  std::remove(f.path.c_str());
}

TEST(PerplexityTest, MismatchedBaseFileIsAnError) {
  BaseFile f = WriteSmallBase("mismatch.kld");
  Result<KlBaseReader> r = KlBaseReader::Open(f.path);
  ASSERT_TRUE(r.ok());
  Status vocab = r->CheckCompatible(5, 512);
  ExpectOneLineError(vocab, f.path, "inconsistent vocabulary: the file has n_vocab 3, the model 5");
  EXPECT_EQ(vocab.code(), StatusCode::kInvalidArgument);
  ExpectOneLineError(r->CheckCompatible(3, 2), f.path,
                     "computed with n_ctx 4, while the current context is 2");
  std::remove(f.path.c_str());
}

TEST(PerplexityTest, MissingBaseFileIsNotFound) {
  const std::string path = TempPath("does_not_exist.kld");
  Status s = KlBaseReader::Open(path).status();
  ExpectOneLineError(s, path, "no such file");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  Status w =
      KlBaseWriter::Create("/nonexistent-dir/x.kld", 4, 3, 1, std::vector<int32_t>(4, 0)).status();
  ExpectOneLineError(w, "/nonexistent-dir/x.kld", "cannot create");
}

}  // namespace
}  // namespace mt
