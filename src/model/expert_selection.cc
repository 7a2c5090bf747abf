#include "model/expert_selection.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "base/check.h"

namespace mt {
namespace {

// Max-subtracted, the exponentials summed in double (the engine's softmax since the first
// router).
void Softmax(const float* x, int n, float* out) {
  float mx = x[0];
  for (int i = 1; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    out[i] = std::exp(x[i] - mx);
    sum += out[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int i = 0; i < n; ++i) out[i] *= inv;
}

// The first k of `order` become the indices of the k largest `score`s, best first, ties to
// the lower index.
void TopK(const float* score, int k, std::vector<int32_t>& order) {
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return score[a] > score[b] || (score[a] == score[b] && a < b);
  });
}

}  // namespace

ExpertSelector::ExpertSelector(const RouterPolicy& policy)
    : policy_(policy),
      probs_(policy.n_expert),
      selection_(policy.n_expert),
      order_(policy.n_expert),
      group_score_(policy.n_group),
      group_order_(policy.n_group) {
  MT_CHECK(policy.n_expert_used >= 1 && policy.n_expert_used <= policy.n_expert);
  if (policy.n_group > 1) {
    MT_CHECK(policy.n_expert % policy.n_group == 0 && policy.n_group_used >= 1 &&
             policy.n_group_used <= policy.n_group &&
             policy.n_group_used * (policy.n_expert / policy.n_group) >= policy.n_expert_used);
  }
}

void ExpertSelector::Select(const float* logits, const float* bias, int32_t* ids, float* weights) {
  const RouterPolicy& p = policy_;
  const int E = static_cast<int>(p.n_expert), K = static_cast<int>(p.n_expert_used);
  switch (p.scoring) {
    case ExpertScoring::kSoftmax:
      Softmax(logits, E, probs_.data());
      break;
    case ExpertScoring::kSigmoid:
      for (int e = 0; e < E; ++e) probs_[e] = 1.0f / (1.0f + std::exp(-logits[e]));
      break;
    case ExpertScoring::kSoftmaxOfTopK:
      std::copy_n(logits, E, probs_.data());
      break;
  }
  const float* score = probs_.data();
  if (p.selection_bias) {
    MT_CHECK(bias != nullptr);
    for (int e = 0; e < E; ++e) selection_[e] = probs_[e] + bias[e];
    score = selection_.data();
  }
  if (p.n_group > 1) {
    if (score != selection_.data()) std::copy_n(probs_.data(), E, selection_.data());
    const int G = static_cast<int>(p.n_group), per = E / G;
    for (int g = 0; g < G; ++g) {
      // The sum of the group's two best scores (its one score if the group has one expert).
      const float* s = selection_.data() + g * per;
      float best = -std::numeric_limits<float>::infinity(), second = best;
      for (int i = 0; i < per; ++i) {
        if (s[i] > best) {
          second = best;
          best = s[i];
        } else if (s[i] > second) {
          second = s[i];
        }
      }
      group_score_[g] = per > 1 ? best + second : best;
    }
    TopK(group_score_.data(), static_cast<int>(p.n_group_used), group_order_);
    for (int r = static_cast<int>(p.n_group_used); r < G; ++r) {
      std::fill_n(selection_.data() + group_order_[r] * per, per,
                  -std::numeric_limits<float>::infinity());
    }
    score = selection_.data();
  }
  TopK(score, K, order_);
  for (int s = 0; s < K; ++s) {
    ids[s] = order_[s];
    weights[s] = probs_[order_[s]];
  }
  if (p.scoring == ExpertScoring::kSoftmaxOfTopK) Softmax(weights, K, weights);
  if (p.normalize) {
    float sum = 0;
    for (int s = 0; s < K; ++s) sum += weights[s];
    sum = std::max(sum, 6.103515625e-5f);  // llama.cpp's guard: the smallest normal f16
    for (int s = 0; s < K; ++s) weights[s] /= sum;
  }
  if (p.scale != 0 && p.scale != 1) {
    for (int s = 0; s < K; ++s) weights[s] *= p.scale;
  }
}

}  // namespace mt
