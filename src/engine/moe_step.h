// The FFN block of an MoE layer: the router picks each token's top-k experts (the model's
// RouterPolicy, model/expert_selection.h), the tokens are grouped by expert, the expert store
// hands out each expert as its bytes are ready, and each runs over all the tokens routed to it
// (gate and up, SwiGLU, down, weighted by the router); then the shared experts where the
// layer has them. With prefetch, the next layers'
// routers are applied to the current residual stream and their predicted experts hinted to
// the store. Each token's output is the sum of its k slots in slot order, so the result
// never depends on which expert arrived first or how many threads ran. Not thread-safe; one
// per Context.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "engine/context.h"
#include "engine/gpu_dense.h"
#include "engine/gpu_experts.h"
#include "engine/model.h"
#include "engine/projection.h"
#include "engine/routing_stats.h"
#include "engine/scratch.h"
#include "engine/swiglu_ffn.h"
#include "experts/expert_store.h"
#include "model/expert_selection.h"

namespace mt {

class MoeStep {
 public:
  MoeStep(const Model& model, ThreadPool& pool, uint32_t n_batch);

  // Counts (the memory plan) or allocates the scratch for batches of n_batch tokens.
  void SizeScratch(ScratchSizer& sizer);
  // The store that supplies the experts, and the layers ahead whose experts are predicted
  // and hinted to it (0: no prefetch). Before the first Run.
  void Attach(ExpertStore* store, int prefetch_depth);
  // The device tier (may be null): the experts it owns run there, the others come from the
  // store. Before the first Run.
  void AttachGpu(GpuExpertTier* gpu) { gpu_ = gpu; }
  // The shared experts' products on the device (may be null: the CPU's).
  void AttachGpuBlocks(GpuSwiGluBlocks* blocks) { gpu_blocks_ = blocks; }

  // ffn_out (n, n_embd) = layer il's FFN of xn (n, n_embd), the normed FFN inputs; the layer
  // must have experts. x (n, n_embd) is the residual stream, which predicts the next layers'
  // routing. Errors: an expert the store cannot supply (naming file, layer, expert).
  Status Run(int il, int n, const float* x, const float* xn, float* ffn_out);

  RoutingStats& routing() { return routing_; }
  const std::vector<Context::PrefetchCounters>& prefetch_counters() const {
    return prefetch_counters_;
  }
  int prefetch_depth() const { return prefetch_depth_; }

 private:
  // Scratch for running one expert over its tokens; one per thread, so experts can run in
  // parallel, one per thread.
  struct ExpertScratch {
    std::vector<float> in;    // (n_batch, n_embd) gathered inputs
    std::vector<float> gate;  // (n_batch, n_ff) gate projection, then SwiGLU output
    std::vector<float> up;    // (n_batch, n_ff)
    std::vector<float> out;   // (n_batch, n_embd)
    QuantizedInput in_acts;   // `in` quantized
    QuantizedInput hid_acts;  // `gate` (SwiGLU output) quantized
  };

  // logits (n, n_expert) = in (n, n_embd) . L.router (n_expert, n_embd)^T (+ L.router_b),
  // f32, the (token, expert) dot products split across threads (each is one DotF32: same
  // bits either way).
  void RouterLogits(const LayerWeights& L, const float* in, int n, float* logits);
  // Sets topk_id_ / topk_weight_ from the router of layer il and groups the (token, slot)
  // pairs by expert.
  void Route(int il, int n, const float* xn);
  // Applies layer il+1's router to the FFN input of x (the residual stream after layer
  // il's attention) and hints the predicted experts to the store; with prefetch_depth d,
  // layers il+2..il+d as well (only il+1's prediction is scored for recall). Layers without
  // experts are skipped over.
  void PrefetchNextLayer(int il, int n, const float* x);
  // The experts layer `target`'s router picks for x under that layer's FFN norm, per token,
  // as flags[t * n_expert + e] = 1 (flags cleared first); returns how many were set.
  uint64_t PredictExperts(int target, int n, const float* x, uint8_t* flags);
  // Hints the union over the batch's tokens of `flags` for layer `target`.
  void HintPredicted(int target, int n, const uint8_t* flags);
  // Sets host_experts_ and gpu_experts_ from used_experts_ (all host without a device tier).
  void SplitByTier(int il);
  // After the device tier's Finish: its experts' outputs into slot_out_ (WriteSlots).
  void ScatterGpuOutputs(int il);
  // Expert e's outputs `out` (its tokens' rows, n_embd each) get layer il's down bias, in
  // place, and go times the router weights into slot_out_: the same for both tiers.
  void WriteSlots(int il, int e, float* out);
  // Runs the ready experts of `group` over their tokens, writing their weighted outputs
  // into slot_out_. With several experts and threads, each thread runs whole experts;
  // otherwise each expert's rows are split across threads. Same bits either way. An
  // expert handed out unchecked is verified first and, if it fails, not run: the first
  // failure in group order is returned.
  Status RunExperts(int il, std::span<const ReadyExpert> group, const float* xn);
  // One expert, on the calling thread (pool null) or with its rows split (pool set).
  // Layer il's expert biases and activation (FfnParts) apply.
  void RunExpert(int il, const ReadyExpert& r, const float* xn, ExpertScratch& s, ThreadPool* pool);
  // ffn_out += down(silu(gate(xn)) * up(xn)) of the shared experts, times sigmoid(xn .
  // gate_inp_shexp) where the layer gates them (qwen2moe).
  Status SharedExperts(int il, int n, const float* xn, float* ffn_out);

  const Model& model_;
  const HParams& hp_;
  const ModelParts& parts_;
  ThreadPool& pool_;
  const uint32_t n_batch_;
  ExpertStore* store_ = nullptr;
  GpuExpertTier* gpu_ = nullptr;
  GpuSwiGluBlocks* gpu_blocks_ = nullptr;
  int prefetch_depth_ = 0;
  RoutingStats routing_;                                      // live (layer, expert) counts
  std::vector<Context::PrefetchCounters> prefetch_counters_;  // (n_layer)

  ExpertSelector selector_;            // the router policy, with its scratch
  std::vector<float> logits_;          // (n_batch, n_expert) router logits
  std::vector<int32_t> topk_id_;       // (n_batch, n_expert_used) chosen experts, best first
  std::vector<float> topk_weight_;     // (n_batch, n_expert_used) their weights
  std::vector<int32_t> expert_rows_;   // (n_batch * n_expert_used) token*k+slot by expert
  std::vector<int32_t> expert_start_;  // (n_expert + 1) where each expert's rows begin
  std::vector<int32_t> expert_fill_;   // (n_expert) fill cursor
  std::vector<int32_t> used_experts_;  // (n_expert) distinct experts of the batch
  std::vector<int32_t> host_experts_;  // (n_expert) those the store supplies
  std::vector<int32_t> gpu_experts_;   // (n_expert) those the device tier runs
  std::vector<ExpertScratch> ex_;      // (n_threads) per-thread expert scratch
  std::vector<ReadyExpert> group_;     // (<= n_expert) experts ready to run together
  std::vector<Status> checks_;         // (<= n_expert) group_'s Verify results
  std::vector<int32_t> expert_order_;  // (n_expert) a group's experts, most tokens first
  std::vector<float> slot_out_;        // (n_batch, n_expert_used, n_embd) weighted expert outputs

  std::vector<uint8_t> predicted_;        // (n_batch, n_expert) 1 = predicted for the next layer
  std::vector<uint8_t> predicted_ahead_;  // (n_batch, n_expert) the same for layers beyond
  std::vector<float> next_norm_;    // (n_batch, n_embd) FFN inputs under the next layer's norm
  std::vector<float> next_logits_;  // (n_batch, n_expert) the next layer's router logits
  std::vector<int32_t> hinted_;     // (n_expert) union of the predicted experts
  std::vector<int32_t> pred_id_;    // (n_expert_used) one token's predicted experts
  std::vector<float> pred_weight_;  // (n_expert_used) and their weights (unused)

  SwiGluFfn shared_;           // the shared experts
  std::vector<float> sh_out_;  // (n_batch, n_embd) their output
};

}  // namespace mt
