// How a router turns one token's logits into its experts and their weights: the one
// expert-selection function that the forward pass, next-layer prediction, synth's routing
// report and the profile all use, so they can never disagree on a tie.
#pragma once

#include <cstdint>
#include <vector>

namespace mt {

enum class ExpertScoring {
  kSoftmax,        // p = softmax(logits) over all experts (llama.cpp's gating func 1)
  kSigmoid,        // p = sigmoid(logits) (gating func 2: DeepSeek-V3, GLM-4.5)
  kSoftmaxOfTopK,  // top-k on the logits, weights = softmax over those k (gpt-oss)
};

// A model's router, as llama.cpp's build_moe_ffn applies it:
//   1. scores p from the logits (scoring);
//   2. selection scores s = p + exp_probs_b when the model has a selection bias, else p;
//   3. group-limited (n_group > 1): the experts form n_group equal groups, a group's score is
//      the sum of its two best s, and only the n_group_used best groups stay eligible;
//   4. the k = n_expert_used eligible experts with the largest s, best first; ties go to the
//      lower expert (and the lower group) id;
//   5. weights = the unbiased p of the chosen experts (kSoftmaxOfTopK: softmax over their
//      logits); normalised to sum 1 when `normalize` (the sum clamped at 2^-14 as llama.cpp
//      does); then multiplied by `scale` unless it is 0 or 1.
struct RouterPolicy {
  uint32_t n_expert = 0;
  uint32_t n_expert_used = 0;  // k
  ExpertScoring scoring = ExpertScoring::kSoftmax;
  bool selection_bias = false;  // exp_probs_b (n_expert) added for selection only
  uint32_t n_group = 0;         // 0 or 1: no groups
  uint32_t n_group_used = 0;
  bool normalize = false;
  float scale = 1;
};

// Applies a RouterPolicy to one token at a time. Holds scratch sized at construction, so
// Select allocates nothing; not thread-safe (one per thread).
class ExpertSelector {
 public:
  explicit ExpertSelector(const RouterPolicy& policy);

  // logits (n_expert) -> ids (k, best first) and weights (k). `bias` (n_expert) is the
  // selection bias, required when policy.selection_bias (checked), ignored otherwise.
  void Select(const float* logits, const float* bias, int32_t* ids, float* weights);

  const RouterPolicy& policy() const { return policy_; }

 private:
  RouterPolicy policy_;
  std::vector<float> probs_;          // (n_expert) p
  std::vector<float> selection_;      // (n_expert) s, -inf outside the chosen groups
  std::vector<int32_t> order_;        // (n_expert) sort scratch
  std::vector<float> group_score_;    // (n_group)
  std::vector<int32_t> group_order_;  // (n_group)
};

}  // namespace mt
