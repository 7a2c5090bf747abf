#include "sampler/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <utility>
#include <vector>

namespace mt {
namespace {

// Only the stage under test is on; everything else off, temperature 1.
SamplerParams Plain(uint64_t seed = 1) {
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repeat_penalty = 1.0f;
  p.seed = seed;
  return p;
}

SamplerParams Greedy() {
  SamplerParams p = Plain();
  p.temperature = 0.0f;
  return p;
}

// The set of tokens drawn in `n` draws.
std::set<int32_t> Drawn(const SamplerParams& params, const std::vector<float>& logits, int n) {
  Sampler s(params);
  std::set<int32_t> seen;
  for (int i = 0; i < n; ++i) seen.insert(s.Sample(logits, {}));
  return seen;
}

// Allows the ids in a set; counts the questions.
class SetFilter : public TokenFilter {
 public:
  explicit SetFilter(std::set<int32_t> allowed, bool all = false)
      : allowed_(std::move(allowed)), all_(all) {}
  bool Allows(int32_t id) const override {
    ++asked;
    return all_ || allowed_.count(id) > 0;
  }
  mutable int asked = 0;

 private:
  std::set<int32_t> allowed_;
  bool all_;
};

// Logits with no ties: a fixed pseudo-random permutation of 0..n-1 scaled.
std::vector<float> ManyLogits(int n) {
  std::vector<float> l(n);
  for (int i = 0; i < n; ++i) l[i] = static_cast<float>((i * 7919) % n) * 0.01f;
  return l;
}

TEST(SamplerTest, FilterThatAllowsAllChangesNothing) {
  const std::vector<float> logits = ManyLogits(1000);
  const std::vector<int32_t> history = {3, 5, 5, 999};
  for (int variant = 0; variant < 4; ++variant) {
    SamplerParams p;  // run's defaults: top-k 40, top-p, min-p
    p.seed = 7;
    if (variant == 1) p.top_k = 0;  // the filter then keeps id order
    if (variant == 2) p.temperature = 0.0f;
    if (variant == 3) p.top_k = 2000;  // more than the vocabulary
    p.repeat_penalty = 1.3f;
    Sampler plain(p), filtered(p);
    SetFilter all({}, /*all=*/true);
    for (int i = 0; i < 200; ++i) {
      ASSERT_EQ(filtered.Sample(logits, history, &all), plain.Sample(logits, history))
          << "variant " << variant << " draw " << i;
    }
  }
}

TEST(SamplerTest, FilterDropsTokensBeforeTopK) {
  // Greedy takes the best allowed token, asking in descending-logit order.
  const std::vector<float> logits = {5.0f, 4.0f, 3.0f, 2.0f, 1.0f};
  SetFilter only_low({2, 4});
  Sampler greedy(Greedy());
  EXPECT_EQ(greedy.Sample(logits, {}, &only_low), 2);
  EXPECT_EQ(only_low.asked, 3);  // 0, 1 refused; 2 allowed: nothing further asked
  // top-k 1 after the filter: the best allowed one, every draw.
  SamplerParams p = Plain();
  p.top_k = 1;
  Sampler k1(p);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(k1.Sample(logits, {}, &only_low), 2);
  // Without top-k every allowed token can be drawn, and only those.
  EXPECT_EQ(Drawn(Plain(), std::vector<float>(5, 0.0f), 200).size(), 5u);
  Sampler all(Plain());
  std::set<int32_t> seen;
  for (int i = 0; i < 200; ++i) seen.insert(all.Sample(std::vector<float>(5, 0.0f), {}, &only_low));
  EXPECT_EQ(seen, (std::set<int32_t>{2, 4}));
}

TEST(SamplerTest, FilterAllowingNothingGivesMinusOne) {
  const std::vector<float> logits = ManyLogits(300);
  SetFilter none({});
  for (int variant = 0; variant < 3; ++variant) {
    SamplerParams p;
    if (variant == 1) p.temperature = 0.0f;
    if (variant == 2) p.top_k = 0;
    Sampler s(p);
    EXPECT_EQ(s.Sample(logits, {}, &none), -1) << variant;
  }
}

TEST(SamplerTest, FilterFindsAllowedTokensFarDown) {
  // The one allowed token is the 900th best of 1000: found past the first sorted chunks.
  const std::vector<float> logits = ManyLogits(1000);
  int32_t id_900 = -1;
  for (int i = 0; i < 1000; ++i) {
    if ((i * 7919) % 1000 == 99) id_900 = i;  // logit rank 900 from the top
  }
  ASSERT_GE(id_900, 0);
  SetFilter one({id_900});
  Sampler greedy(Greedy());
  EXPECT_EQ(greedy.Sample(logits, {}, &one), id_900);
  SamplerParams p;
  Sampler topk(p);
  EXPECT_EQ(topk.Sample(logits, {}, &one), id_900);
}

TEST(SamplerTest, GreedyPicksArgmaxLowestIdOnTies) {
  Sampler s(Greedy());
  EXPECT_EQ(s.Sample(std::vector<float>{0.1f, 3.0f, -2.0f, 2.9f}, {}), 1);
  EXPECT_EQ(s.Sample(std::vector<float>{1.0f, 5.0f, 5.0f, 4.0f}, {}), 1);
  EXPECT_EQ(s.Sample(std::vector<float>{-7.0f}, {}), 0);
}

TEST(SamplerTest, PenaltyDividesPositiveLogits) {
  SamplerParams p = Greedy();
  p.repeat_penalty = 1.5f;
  Sampler s(p);
  const std::vector<float> logits = {2.0f, 1.9f, -1.0f};
  // 2.0 / 1.5 = 1.333 < 1.9: the repeated token loses.
  EXPECT_EQ(s.Sample(logits, std::vector<int32_t>{0}), 1);
  EXPECT_EQ(s.Sample(logits, std::vector<int32_t>{2}), 0);  // a negative one gets lower still
  EXPECT_EQ(s.Sample(logits, {}), 0);
}

TEST(SamplerTest, PenaltyMultipliesNegativeLogits) {
  SamplerParams p = Greedy();
  p.repeat_penalty = 1.5f;
  Sampler s(p);
  const std::vector<float> logits = {-1.0f, -1.2f};
  // -1.0 * 1.5 = -1.5 < -1.2 (dividing would have raised it to -0.667 and kept it first).
  EXPECT_EQ(s.Sample(logits, std::vector<int32_t>{0}), 1);
}

TEST(SamplerTest, PenaltyAppliesOncePerDistinctToken) {
  SamplerParams p = Greedy();
  p.repeat_penalty = 1.5f;
  Sampler s(p);
  // Once: 2.0 / 1.5 = 1.333 > 1.2. Three times it would be 0.593 < 1.2.
  EXPECT_EQ(s.Sample(std::vector<float>{2.0f, 1.2f}, std::vector<int32_t>{0, 0, 0}), 0);
}

TEST(SamplerTest, FrequencyPenaltyGrowsWithTheCount) {
  SamplerParams p = Greedy();
  p.frequency_penalty = 0.5f;
  Sampler s(p);
  const std::vector<float> logits = {2.0f, 1.2f};
  // Once: 2.0 - 0.5 = 1.5 > 1.2; twice: 2.0 - 1.0 = 1.0 < 1.2.
  EXPECT_EQ(s.Sample(logits, std::vector<int32_t>{0}), 0);
  EXPECT_EQ(s.Sample(logits, std::vector<int32_t>{0, 0}), 1);
}

TEST(SamplerTest, PresencePenaltyAppliesOncePerDistinctToken) {
  SamplerParams p = Greedy();
  p.presence_penalty = 0.5f;
  Sampler s(p);
  const std::vector<float> logits = {2.0f, 1.2f, 1.4f};
  // 2.0 - 0.5 = 1.5 however often it was seen; a negative penalty raises a seen token.
  EXPECT_EQ(s.Sample(logits, std::vector<int32_t>{0, 0, 0, 0}), 0);
  p.presence_penalty = -1.0f;
  Sampler raise(p);
  EXPECT_EQ(raise.Sample(logits, std::vector<int32_t>{1}), 1);  // 1.2 + 1.0 = 2.2 > 2.0
}

TEST(SamplerTest, PenaltiesComposeInLlamaCppOrder) {
  SamplerParams p = Greedy();
  p.repeat_penalty = 2.0f;
  p.frequency_penalty = 0.25f;
  p.presence_penalty = 0.5f;
  Sampler s(p);
  // Token 0 seen twice: 3.0 / 2 - 2 * 0.25 - 0.5 = 0.5 (subtracting first: 1.0);
  // token 1 (unseen) at 0.6 sits between the two orders and must win.
  EXPECT_EQ(s.Sample(std::vector<float>{3.0f, 0.6f}, std::vector<int32_t>{0, 0}), 1);
  // The window is the same last n as the repetition penalty's.
  p.repeat_last_n = 1;
  Sampler last1(p);
  // Seen once in the window: 3.0 / 2 - 0.25 - 0.5 = 0.75 > 0.6.
  EXPECT_EQ(last1.Sample(std::vector<float>{3.0f, 0.6f}, std::vector<int32_t>{0, 0}), 0);
}

TEST(SamplerTest, LogitBiasComesFirst) {
  SamplerParams p = Greedy();
  p.logit_bias = {{1, 1.5f}, {7, 100.0f}};  // 7: outside the vocab, ignored
  Sampler s(p);
  EXPECT_EQ(s.Sample(std::vector<float>{2.0f, 1.0f, 0.0f}, {}), 1);  // 1 + 1.5 > 2
  // Before the penalties (llama.cpp's order): token 1, seen, gets (1 + 1.5) / 2 = 1.25 < 1.5;
  // biased after the penalty it would get 1 / 2 + 1.5 = 2 > 1.5.
  p.repeat_penalty = 2.0f;
  Sampler penalized(p);
  EXPECT_EQ(penalized.Sample(std::vector<float>{1.5f, 1.0f}, std::vector<int32_t>{1}), 0);
  // -inf bans a token, sampled or greedy.
  SamplerParams ban = Plain(5);
  ban.logit_bias = {{0, -INFINITY}};
  EXPECT_EQ(Drawn(ban, {3.0f, 0.0f, 0.0f}, 200), (std::set<int32_t>{1, 2}));
  ban.temperature = 0.0f;
  EXPECT_EQ(Sampler(ban).Sample(std::vector<float>{3.0f, 0.0f, 0.5f}, {}), 2);
}

TEST(SamplerTest, PenaltyLooksOnlyAtLastN) {
  SamplerParams p = Greedy();
  p.repeat_penalty = 1.5f;
  p.repeat_last_n = 3;
  const std::vector<float> logits = {2.0f, 1.9f, 0.0f};
  const std::vector<int32_t> history = {0, 2, 2, 2};  // token 0 is 4 back
  EXPECT_EQ(Sampler(p).Sample(logits, history), 0);
  p.repeat_last_n = 4;
  EXPECT_EQ(Sampler(p).Sample(logits, history), 1);
  p.repeat_last_n = -1;  // all of the history
  EXPECT_EQ(Sampler(p).Sample(logits, history), 1);
  p.repeat_last_n = 0;  // off
  EXPECT_EQ(Sampler(p).Sample(logits, history), 0);
}

TEST(SamplerTest, PenaltyIgnoresHistoryOutsideVocab) {
  SamplerParams p = Greedy();
  p.repeat_penalty = 1.5f;
  EXPECT_EQ(Sampler(p).Sample(std::vector<float>{2.0f, 1.9f}, std::vector<int32_t>{-1, 7}), 0);
}

TEST(SamplerTest, TopKKeepsTheKHighest) {
  SamplerParams p = Plain();
  p.top_k = 2;
  EXPECT_EQ(Drawn(p, {1.0f, 3.0f, 0.0f, 2.5f, -1.0f}, 2000), (std::set<int32_t>{1, 3}));
  p.top_k = 1;
  EXPECT_EQ(Drawn(p, {1.0f, 3.0f, 0.0f, 2.5f, -1.0f}, 200), (std::set<int32_t>{1}));
}

TEST(SamplerTest, TopPKeepsSmallestPrefixReachingP) {
  // Probabilities 0.5, 0.25, 0.125, 0.125 (token order shuffled): cumulative 0.5, 0.75,
  // 0.875, 1. Thresholds sit away from the sums so float rounding cannot move them.
  const std::vector<float> logits = {std::log(1.0f), std::log(4.0f), std::log(1.0f),
                                     std::log(2.0f)};
  SamplerParams p = Plain();
  p.top_p = 0.45f;
  EXPECT_EQ(Drawn(p, logits, 500), (std::set<int32_t>{1}));
  p.top_p = 0.55f;
  EXPECT_EQ(Drawn(p, logits, 2000), (std::set<int32_t>{1, 3}));
  p.top_p = 0.8f;
  // The two 0.125 tokens tie; the lower id comes first.
  EXPECT_EQ(Drawn(p, logits, 2000), (std::set<int32_t>{0, 1, 3}));
  p.top_p = 0.95f;
  EXPECT_EQ(Drawn(p, logits, 2000), (std::set<int32_t>{0, 1, 2, 3}));
  p.top_p = 0.0f;  // at least one token stays
  EXPECT_EQ(Drawn(p, logits, 200), (std::set<int32_t>{1}));
}

TEST(SamplerTest, TopPBeyondTheFirstSortedBlock) {
  // 600 equal tokens: the answer needs more than the 256 tokens sorted first.
  std::vector<float> logits(600, 0.0f);
  SamplerParams p = Plain();
  p.top_p = 0.5f;  // cumulative i/600 reaches 0.5 at 300 tokens (ids 0..299 on ties)
  std::set<int32_t> seen = Drawn(p, logits, 3000);
  EXPECT_GE(*seen.begin(), 0);
  EXPECT_LE(*seen.rbegin(), 300);  // 300 = one past, allowed only by float rounding
  EXPECT_GT(*seen.rbegin(), 280);  // draws reach well past the first 256
}

TEST(SamplerTest, MinPKeepsTokensAboveFractionOfMax) {
  // min_p = 0.3: keep logit >= 0 + ln 0.3 = -1.204, i.e. tokens 0 (0), 1 (-1), 4 (-0.5);
  // tokens 2 (-2) and 3 (-3) have p/p_max = 0.135 and 0.050.
  const std::vector<float> logits = {0.0f, -1.0f, -2.0f, -3.0f, -0.5f};
  SamplerParams p = Plain();
  p.min_p = 0.3f;
  EXPECT_EQ(Drawn(p, logits, 2000), (std::set<int32_t>{0, 1, 4}));
  p.min_p = 0.1f;  // threshold -2.303: token 2 joins
  EXPECT_EQ(Drawn(p, logits, 2000), (std::set<int32_t>{0, 1, 2, 4}));
}

TEST(SamplerTest, StagesComposeInOrder) {
  // top-k 3 keeps {0, 1, 4}; min-p 0.5 then keeps logit >= -0.693: {0, 4}.
  const std::vector<float> logits = {0.0f, -1.0f, -2.0f, -3.0f, -0.5f};
  SamplerParams p = Plain();
  p.top_k = 3;
  p.min_p = 0.5f;
  EXPECT_EQ(Drawn(p, logits, 2000), (std::set<int32_t>{0, 4}));
}

TEST(SamplerTest, SameSeedSameSequenceDifferentSeedDiffers) {
  std::vector<float> logits(50, 0.0f);
  auto run = [&](uint64_t seed) {
    Sampler s(Plain(seed));
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.Sample(logits, {}));
    return out;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

TEST(SamplerTest, SeededDrawsMatchTheSpecifiedGenerator) {
  // SplitMix64 from state 42; u = (x >> 11) * 2^-53; over 10 equal logits the draw is the
  // first i with i + 1 >= 10u. Derived with an independent Python implementation, whose
  // generator gives 0xe220a8397b1dcdaf first from state 0 (the published reference value).
  std::vector<float> logits(10, 0.0f);
  Sampler s(Plain(42));
  std::vector<int32_t> out;
  for (int i = 0; i < 12; ++i) out.push_back(s.Sample(logits, {}));
  EXPECT_EQ(out, (std::vector<int32_t>{7, 1, 2, 3, 0, 8, 2, 8, 3, 6, 2, 4}));
}

TEST(SamplerTest, LowTemperatureApproachesGreedy) {
  // At T = 0.01 the runner-up (gap 0.5) has p = e^-50 relative: never drawn.
  const std::vector<float> logits = {1.0f, 2.0f, 1.5f, -3.0f};
  SamplerParams p = Plain();
  p.temperature = 0.01f;
  EXPECT_EQ(Drawn(p, logits, 5000), (std::set<int32_t>{1}));
  // At T = 1 the others show up.
  p.temperature = 1.0f;
  EXPECT_EQ(Drawn(p, logits, 5000).size(), 4u);
}

TEST(SamplerTest, HighTemperatureFlattens) {
  // logits {0, ln 4}: p(0) = 0.2 at T = 1, 1/3 at T = 2 (ratio 4^(1/2) = 2).
  const std::vector<float> logits = {0.0f, std::log(4.0f)};
  SamplerParams p = Plain(3);
  p.temperature = 2.0f;
  Sampler s(p);
  const int n = 60000;
  int zeros = 0;
  for (int i = 0; i < n; ++i) zeros += s.Sample(logits, {}) == 0;
  // Binomial(60000, 1/3): sd = sqrt(n p (1 - p)) = 115.5; allow 5 sd.
  EXPECT_NEAR(zeros, n / 3.0, 5 * 115.5);
}

TEST(SamplerTest, EmpiricalFrequenciesMatchSoftmax) {
  // p = 0.5, 0.3, 0.2 from logits ln p. Binomial(100000, p) sd: 158.1, 144.9, 126.5; 5 sd
  // bounds fail by chance with probability below 1e-6 each.
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  Sampler s(Plain(12345));
  const int n = 100000;
  int counts[3] = {0, 0, 0};
  for (int i = 0; i < n; ++i) ++counts[s.Sample(logits, {})];
  EXPECT_NEAR(counts[0], 50000, 5 * 158.1);
  EXPECT_NEAR(counts[1], 30000, 5 * 144.9);
  EXPECT_NEAR(counts[2], 20000, 5 * 126.5);
}

}  // namespace
}  // namespace mt
