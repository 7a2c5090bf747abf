// What the engine runs, described without naming an architecture. An architecture file
// (arch_<name>.cc) reads a model's GGUF keys into HParams and describes each layer as parts:
// an attention kind with its options and an FFN kind, plus the model-wide RoPE and router
// policy. The tensor list (ArchTensors), the loader, the forward pass, the memory plan and
// synth all follow these parts, so adding an architecture adds no branch anywhere else.
#pragma once

#include <cstdint>
#include <vector>

#include "model/expert_selection.h"

namespace mt {

enum class RopeType {
  kNorm,  // rotate adjacent pairs (x[2i], x[2i+1]): llama, deepseek2
  kNeox,  // rotate halves (x[i], x[i + n_rot/2]): qwen2/3, olmoe
};

// Rotary embedding of the model, as llama.cpp's rope with YaRN computes it. Angles:
// theta_i = pos * base^(-2i / n_rot); with ext_factor != 0 (YaRN) each is mixed between
// its interpolated (freq_scale * theta) and extrapolated value by a ramp over the
// correction dims [corr_low, corr_high], and cos/sin are scaled by
// attn_factor * (1 + 0.1 ln(1 / freq_scale)).
struct RopeParts {
  RopeType type = RopeType::kNeox;
  int n_rot = 0;            // rotated dims of a head (its last n_rot dims for MLA)
  float freq_base = 10000;  // {arch}.rope.freq_base
  float freq_scale = 1;     // 1 / rope.scaling.factor (1: no scaling)
  float ext_factor = 0;     // 1 for YaRN, else 0
  float attn_factor = 1;    // cos/sin magnitude before YaRN's own correction
  float corr_low = 0;       // YaRN correction dims (ggml_rope_yarn_corr_dims)
  float corr_high = 0;
};

enum class AttentionKind {
  kGqa,  // grouped-query attention: q, k, v projections, a K and a V cache per kv head
  kMla,  // multi-head latent attention: one compressed latent + rotated key per position
  // linear attention (gated DeltaNet): a short convolution and a matrix state per head that
  // every token updates; no cache grows with the positions
  kDeltaNet,
};
inline constexpr int kAttentionKinds = 3;

enum class QkNorm {
  kNone,
  kPerHead,         // RMSNorm over each head's head_dim before RoPE (qwen3moe)
  kWholeProjection  // RMSNorm over the whole q / k projection (olmoe)
};

struct GqaParts {
  QkNorm qk_norm = QkNorm::kNone;
  bool qk_norm_optional = false;  // the norms may be absent (glm4moe: GLM-4.5 has them, Air not)
  bool qkv_bias = false;          // attn_{q,k,v}.bias: optional (qwen2moe checkpoints have them)...
  bool qkv_bias_required = false;  // ... or required (gpt-oss)
  bool out_bias = false;           // attn_output.bias (gpt-oss), required
  // attn_q emits per head [q (head_dim) | gate (head_dim)], and the head's attention output is
  // multiplied by sigmoid(gate) before attn_output (qwen3next, qwen35moe).
  bool output_gate = false;
};

// DeepSeek's MLA. A head's query is [q_nope (head_dim_nope) | q_pe (n_rot)]; the cache holds
// per position c = rms_norm(kv_a[:kv_lora_rank]) and the rotated k_pe (n_rot): one
// (kv_lora_rank + n_rot) row shared by all heads. Attention runs in the latent space: the
// query is absorbed as [k_b_h^T q_nope | q_pe] and V is c, so out_h = v_b_h (c-weighted sum).
struct MlaParts {
  uint32_t q_lora_rank = 0;    // 0: attn_q straight from the input (DeepSeek-V2-Lite)
  uint32_t kv_lora_rank = 0;   // latent width (512)
  uint32_t head_dim_nope = 0;  // q/k dims without rotation (128)
  uint32_t head_dim_v = 0;     // a head's value width after v_b (128)
  // Legacy files have attn_kv_b (both up-projections in one) instead of attn_k_b/attn_v_b;
  // the loader splits it.
  bool legacy_kv_b = false;
};

// Which key head a value head of a DeltaNet layer reads when there are fewer key heads: its
// group's (v / (H_v / H_k): the checkpoints' order, qwen3next) or v % H_k (the converter
// reorders qwen35moe's value heads so that ggml's broadcast applies).
enum class KeyHeadOrder { kGrouped, kTiled };

// Gated DeltaNet as llama.cpp computes it (qwen3next, qwen35moe). Per token:
//   [q | k | v] = silu(causal conv over the last d_conv projections attn_qkv x, per channel)
//   z = attn_gate x, beta = sigmoid(b), g = softplus(a + ssm_dt) * ssm_a (a decay, < 0)
//   q, k l2-normalised per head; per value head h, with S the head's (S_k x S_v) state:
//   S = exp(g) S; S += k (beta (v - S^T k))^T; o = S^T q / sqrt(S_k)
//   out = ssm_out (rms_norm(o per head) * ssm_norm * silu(z))
struct DeltaNetParts {
  uint32_t conv_kernel = 0;  // d_conv: the convolution's window, the token's own included (4)
  uint32_t n_k_heads = 0;    // H_k, ssm.group_count
  uint32_t n_v_heads = 0;    // H_v, ssm.time_step_rank (a multiple of H_k)
  uint32_t head_k_dim = 0;   // S_k, ssm.state_size
  uint32_t head_v_dim = 0;   // S_v, ssm.inner_size / H_v (= S_k)
  KeyHeadOrder key_heads = KeyHeadOrder::kGrouped;
  // b and a from ssm_beta and ssm_alpha (qwen35moe), or from ssm_ba: per key head, the b of
  // its value heads then their a (qwen3next).
  bool separate_beta_alpha = false;
  uint32_t key_dim() const { return n_k_heads * head_k_dim; }
  uint32_t value_dim() const { return n_v_heads * head_v_dim; }
  uint32_t conv_channels() const { return 2 * key_dim() + value_dim(); }  // [q | k | v]
};

struct AttentionParts {
  AttentionKind kind = AttentionKind::kGqa;
  GqaParts gqa;
  MlaParts mla;
  DeltaNetParts delta_net;
  float kq_scale = 1;  // scores = kq_scale * q . k
  // attn_sinks (n_head): a learned logit per head that joins the softmax without a value,
  // so a head can attend to nothing (gpt-oss).
  bool sinks = false;
  // Positions a query sees, itself included: pos - window < j <= pos, as llama.cpp's
  // LLAMA_SWA_TYPE_STANDARD (gpt-oss: 128 on every other layer). 0: all (causal). The KV
  // cache of such a layer holds only a ring of the last positions.
  uint32_t sliding_window = 0;
};

enum class FfnKind {
  kDense,  // SwiGLU: down(silu(gate x) * up x)
  kMoe,    // routed experts (+ shared experts)
};

enum class FfnActivation {
  kSwiglu,  // silu(g) * u
  // gpt-oss's clamped SwiGLU: g' = min(g, 7), u' = clamp(u, -7, 7),
  // g' * sigmoid(1.702 g') * (u' + 1) (ggml_swiglu_oai with llama.cpp's alpha and limit)
  kSwigluOai,
};

enum class SharedExpertGate {
  kNone,     // the shared experts' output is added as is (deepseek2)
  kSigmoid,  // scaled by sigmoid(x . ffn_gate_inp_shexp) (qwen2moe)
};

struct FfnParts {
  FfnKind kind = FfnKind::kMoe;
  // The norm before the FFN is stored as ffn_norm, or as post_attention_norm (glm4moe).
  bool norm_named_post_attention = false;
  uint32_t n_ff = 0;         // dense: the hidden width; moe: each routed expert's
  uint32_t n_ff_shared = 0;  // moe: the shared experts' hidden width (0: none)
  SharedExpertGate shared_gate = SharedExpertGate::kNone;
  FfnActivation activation = FfnActivation::kSwiglu;  // the routed experts'
  bool router_bias = false;    // ffn_gate_inp.bias (n_expert) added to the router's logits
  bool expert_biases = false;  // ffn_{gate,up,down}_exps.bias, added after each product
};

struct LayerParts {
  AttentionParts attention;
  FfnParts ffn;
  bool has_experts() const { return ffn.kind == FfnKind::kMoe; }
};

struct ModelParts {
  RopeParts rope;
  RouterPolicy router;             // every MoE layer's
  std::vector<LayerParts> layers;  // (n_layer)
  bool output_optional = false;    // output.weight may be absent (tied to token_embd)
};

}  // namespace mt
