// ExpertSelector against a brute-force reading of RouterPolicy's definition.
#include "model/expert_selection.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace mt {
namespace {

struct Picked {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

Picked Select(const RouterPolicy& p, const std::vector<float>& logits,
              const std::vector<float>& bias = {}) {
  ExpertSelector s(p);
  Picked out{std::vector<int32_t>(p.n_expert_used), std::vector<float>(p.n_expert_used)};
  s.Select(logits.data(), bias.empty() ? nullptr : bias.data(), out.ids.data(), out.weights.data());
  return out;
}

// The definition, step by step and in double: every group set and every expert compared.
Picked Reference(const RouterPolicy& p, const std::vector<float>& logits,
                 const std::vector<float>& bias) {
  const int E = static_cast<int>(p.n_expert), K = static_cast<int>(p.n_expert_used);
  std::vector<double> prob(E);
  if (p.scoring == ExpertScoring::kSoftmax) {
    const double mx = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (int e = 0; e < E; ++e) sum += std::exp(logits[e] - mx);
    for (int e = 0; e < E; ++e) prob[e] = std::exp(logits[e] - mx) / sum;
  } else if (p.scoring == ExpertScoring::kSigmoid) {
    for (int e = 0; e < E; ++e) prob[e] = 1 / (1 + std::exp(-double(logits[e])));
  } else {
    for (int e = 0; e < E; ++e) prob[e] = logits[e];
  }
  std::vector<double> sel(prob);
  if (p.selection_bias) {
    for (int e = 0; e < E; ++e) sel[e] += bias[e];
  }
  std::vector<bool> eligible(E, true);
  if (p.n_group > 1) {
    const int G = static_cast<int>(p.n_group), per = E / G;
    std::vector<double> gscore(G);
    for (int g = 0; g < G; ++g) {
      std::vector<double> s(sel.begin() + g * per, sel.begin() + (g + 1) * per);
      std::sort(s.rbegin(), s.rend());
      gscore[g] = s[0] + (per > 1 ? s[1] : 0);
    }
    std::vector<int> gorder(G);
    std::iota(gorder.begin(), gorder.end(), 0);
    std::stable_sort(gorder.begin(), gorder.end(),
                     [&](int a, int b) { return gscore[a] > gscore[b]; });
    for (int r = static_cast<int>(p.n_group_used); r < G; ++r) {
      for (int i = 0; i < per; ++i) eligible[gorder[r] * per + i] = false;
    }
  }
  std::vector<int> order;
  for (int e = 0; e < E; ++e) {
    if (eligible[e]) order.push_back(e);
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return sel[a] > sel[b]; });
  Picked out;
  for (int s = 0; s < K; ++s) out.ids.push_back(order[s]);
  std::vector<double> w;
  for (int e : out.ids) w.push_back(prob[e]);
  if (p.scoring == ExpertScoring::kSoftmaxOfTopK) {
    const double mx = *std::max_element(w.begin(), w.end());
    double sum = 0;
    for (double& x : w) sum += std::exp(x - mx);
    for (double& x : w) x = std::exp(x - mx) / sum;
  }
  if (p.normalize) {
    const double sum = std::max(std::accumulate(w.begin(), w.end(), 0.0), 6.103515625e-5);
    for (double& x : w) x /= sum;
  }
  if (p.scale != 0 && p.scale != 1) {
    for (double& x : w) x *= p.scale;
  }
  for (double x : w) out.weights.push_back(static_cast<float>(x));
  return out;
}

TEST(ExpertSelectorTest, MatchesTheDefinitionForEveryPolicy) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  std::vector<RouterPolicy> policies;
  for (ExpertScoring scoring :
       {ExpertScoring::kSoftmax, ExpertScoring::kSigmoid, ExpertScoring::kSoftmaxOfTopK}) {
    for (bool bias : {false, true}) {
      for (uint32_t groups : {0u, 4u, 8u}) {
        for (bool norm : {false, true}) {
          RouterPolicy p;
          p.n_expert = 64;
          p.n_expert_used = 6;
          p.scoring = scoring;
          p.selection_bias = bias;
          p.n_group = groups;
          p.n_group_used = groups / 2;
          p.normalize = norm;
          p.scale = norm ? 2.5f : 1.0f;
          policies.push_back(p);
        }
      }
    }
  }
  for (const RouterPolicy& p : policies) {
    for (int trial = 0; trial < 50; ++trial) {
      std::vector<float> logits(p.n_expert), bias(p.n_expert);
      for (float& x : logits) x = normal(rng);
      for (float& x : bias) x = 0.1f * normal(rng);
      const Picked got = Select(p, logits, bias), want = Reference(p, logits, bias);
      ASSERT_EQ(got.ids, want.ids) << int(p.scoring) << " groups " << p.n_group;
      for (size_t s = 0; s < got.weights.size(); ++s) {
        EXPECT_NEAR(got.weights[s], want.weights[s], 1e-6f * std::max(1.0f, want.weights[s]));
      }
    }
  }
}

TEST(ExpertSelectorTest, TiesGoToTheLowerIdAndTheLowerGroup) {
  RouterPolicy p;
  p.n_expert = 8;
  p.n_expert_used = 2;
  EXPECT_EQ(Select(p, {1, 3, 3, 0, 3, 0, 0, 0}).ids, (std::vector<int32_t>{1, 2}));
  // Groups {0,1} {2,3} {4,5} {6,7}: groups 1 and 2 tie at 2 + 1; group 1 wins.
  p.n_group = 4;
  p.n_group_used = 1;
  p.scoring = ExpertScoring::kSoftmaxOfTopK;  // scores are the logits
  EXPECT_EQ(Select(p, {0, 0, 2, 1, 1, 2, 0, 0}).ids, (std::vector<int32_t>{2, 3}));
}

TEST(ExpertSelectorTest, TheBiasChoosesButDoesNotWeigh) {
  RouterPolicy p;
  p.n_expert = 4;
  p.n_expert_used = 1;
  p.scoring = ExpertScoring::kSigmoid;
  p.selection_bias = true;
  const std::vector<float> logits = {2, 0, 0, 0};
  const Picked got = Select(p, logits, {0, 10, 0, 0});
  EXPECT_EQ(got.ids, std::vector<int32_t>{1});
  EXPECT_FLOAT_EQ(got.weights[0], 0.5f);  // sigmoid(0), not the biased score
}

TEST(ExpertSelectorTest, GroupsLimitTheChoice) {
  // The best single expert (7) sits in a group whose second best is poor: with groups of 2
  // and one used, the group {2, 3} (0.9 + 0.8) beats {6, 7} (1.0 + 0.0).
  RouterPolicy p;
  p.n_expert = 8;
  p.n_expert_used = 1;
  p.scoring = ExpertScoring::kSoftmaxOfTopK;
  const std::vector<float> logits = {0.1f, 0.1f, 0.9f, 0.8f, 0.2f, 0.2f, 0.0f, 1.0f};
  EXPECT_EQ(Select(p, logits).ids, std::vector<int32_t>{7});
  p.n_group = 4;
  p.n_group_used = 1;
  EXPECT_EQ(Select(p, logits).ids, std::vector<int32_t>{2});
}

}  // namespace
}  // namespace mt
