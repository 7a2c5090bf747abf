// GGUF tensor names, from one table. The names are llama.cpp's (blk.N.ffn_down_exps...),
// so a reader who knows llama.cpp finds their way.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace mt {

// What a tensor is, independent of architecture.
enum class TensorRole {
  kTokenEmbd,   // token_embd            (n_embd, n_vocab)
  kOutputNorm,  // output_norm           (n_embd)
  kOutput,      // output                (n_embd, n_vocab)
  kAttnNorm,    // blk.N.attn_norm       (n_embd)
  kAttnQ,       // blk.N.attn_q          (n_embd, n_head*head_dim_k)
  kAttnK,       // blk.N.attn_k          (n_embd, n_head_kv*head_dim_k)
  kAttnV,       // blk.N.attn_v          (n_embd, n_head_kv*head_dim_v)
  kAttnOutput,  // blk.N.attn_output     (n_head*head_dim_v, n_embd)
  kAttnQNorm,   // blk.N.attn_q_norm     (head_dim_k) or (n_embd)
  kAttnKNorm,   // blk.N.attn_k_norm     (head_dim_k) or (n_kv)
  kAttnSinks,   // blk.N.attn_sinks      (n_head)  a sink logit per head (gpt-oss)
  // Gated DeltaNet (qwen3next, qwen35moe); dims: K = key_dim, V = value_dim, H = H_v,
  // C = 2K + V conv channels, S = head_v_dim.
  kAttnQkv,       // blk.N.attn_qkv        (n_embd, C)  [q | k | v] before the convolution
  kAttnGate,      // blk.N.attn_gate       (n_embd, V)  z, the output norm's gate
  kSsmConv1d,     // blk.N.ssm_conv1d      (d_conv, C)  per channel its window's weights
  kSsmDt,         // blk.N.ssm_dt.bias     (H)  added to a before the softplus
  kSsmA,          // blk.N.ssm_a           (H)  -exp(A_log): the decay rate (no suffix)
  kSsmBetaAlpha,  // blk.N.ssm_ba          (n_embd, 2H)  b and a interleaved by key head
  kSsmBeta,       // blk.N.ssm_beta        (n_embd, H)
  kSsmAlpha,      // blk.N.ssm_alpha       (n_embd, H)
  kSsmNorm,       // blk.N.ssm_norm        (S)  the gated RMS norm's weight
  kSsmOut,        // blk.N.ssm_out         (V, n_embd)
  // MLA (deepseek2); dims: L = kv_lora_rank, Q = q_lora_rank, R = n_rot, N = head_dim_nope,
  // V = head_dim_v.
  kAttnQA,           // blk.N.attn_q_a        (n_embd, Q)
  kAttnQANorm,       // blk.N.attn_q_a_norm   (Q)
  kAttnQB,           // blk.N.attn_q_b        (Q, n_head*(N+R))
  kAttnKvAMqa,       // blk.N.attn_kv_a_mqa   (n_embd, L+R)
  kAttnKvANorm,      // blk.N.attn_kv_a_norm  (L)
  kAttnKB,           // blk.N.attn_k_b        (N, L, n_head)  k_b per head, transposed
  kAttnVB,           // blk.N.attn_v_b        (L, V, n_head)
  kAttnKvB,          // blk.N.attn_kv_b       (L, n_head*(N+V))  legacy files only
  kFfnNorm,          // blk.N.ffn_norm        (n_embd)
  kAttnPostNorm,     // blk.N.post_attention_norm (n_embd)  the FFN's norm, as glm4moe names it
  kFfnGate,          // blk.N.ffn_gate        (n_embd, n_ff)  dense layers
  kFfnUp,            // blk.N.ffn_up          (n_embd, n_ff)
  kFfnDown,          // blk.N.ffn_down        (n_ff, n_embd)
  kFfnGateInp,       // blk.N.ffn_gate_inp    (n_embd, n_expert)  the router
  kFfnExpProbsB,     // blk.N.exp_probs_b.bias (n_expert)  selection-only router bias
  kFfnGateExps,      // blk.N.ffn_gate_exps   (n_embd, n_ff_exp, n_expert)
  kFfnUpExps,        // blk.N.ffn_up_exps     (n_embd, n_ff_exp, n_expert)
  kFfnDownExps,      // blk.N.ffn_down_exps   (n_ff_exp, n_embd, n_expert)
  kFfnGateInpShexp,  // blk.N.ffn_gate_inp_shexp (n_embd)  shared-expert gate
  kFfnGateShexp,     // blk.N.ffn_gate_shexp  (n_embd, n_ff_shexp)
  kFfnUpShexp,       // blk.N.ffn_up_shexp    (n_embd, n_ff_shexp)
  kFfnDownShexp,     // blk.N.ffn_down_shexp  (n_ff_shexp, n_embd)
  // A NextN/MTP block's own tensors (besides a whole layer's), never loaded:
  kNextnEhProj,          // blk.N.nextn.eh_proj          (2*n_embd, n_embd)
  kNextnEnorm,           // blk.N.nextn.enorm            (n_embd)
  kNextnHnorm,           // blk.N.nextn.hnorm            (n_embd)
  kNextnSharedHeadNorm,  // blk.N.nextn.shared_head_norm (n_embd)
};

// kNone: the name has no ".weight"/".bias" (llama.cpp's ssm_a).
enum class TensorSuffix { kWeight, kBias, kNone };

// "blk.3.ffn_down_exps.weight". `layer` is ignored for non-layer tensors.
std::string TensorName(TensorRole role, int layer, TensorSuffix suffix = TensorSuffix::kWeight);

// llama.cpp's per-expert tensor names (LLM_TENSOR_FFN_{GATE,UP,DOWN}_EXP,
// "blk.%d.ffn_gate.%d"): expert `expert`'s slice of a stacked tensor as a tensor of its own,
// as expert-major packs store it: "blk.3.ffn_down.17.weight". `stacked` is kFfnGateExps,
// kFfnUpExps or kFfnDownExps.
std::string PerExpertTensorName(TensorRole stacked, int layer, int expert);

struct PerExpertName {
  TensorRole stacked;  // kFfnGateExps, kFfnUpExps or kFfnDownExps
  int layer;
  int expert;
};
// The parts of a PerExpertTensorName, or nullopt for any other name.
std::optional<PerExpertName> ParsePerExpertTensorName(std::string_view name);

// True for routed-expert tensors: the stacked ones (ffn_{gate,up,down}_exps,
// ffn_gate_up_exps; their weights, not gpt-oss's per-expert biases), judged by name so it holds for
// architectures moetier cannot run yet, and the per-expert ones of a pack (PerExpertTensorName).
bool IsRoutedExpertTensorName(std::string_view name);

// The layer of a "blk.N." tensor name, or -1.
int LayerOfTensorName(std::string_view name);

}  // namespace mt
