// Hyperparameters of a MoE transformer, read from (and written to) GGUF keys with
// llama.cpp's names and defaults ("{arch}.block_count", ...). The common keys are read here;
// each architecture file reads its own (ArchDef::read_keys) and describes its layers from
// them (ArchDef::describe, model/layer_parts.h).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"
#include "model/expert_selection.h"

namespace mt {

class GgufMetadata;
struct ArchDef;

enum class RopeScalingType { kNone, kLinear, kYarn };

struct HParams {
  std::string arch;            // general.architecture
  uint32_t n_vocab = 0;        // tokens (rows of token_embd)
  uint32_t n_ctx_train = 0;    // {arch}.context_length
  uint32_t n_embd = 0;         // {arch}.embedding_length
  uint32_t n_layer = 0;        // {arch}.block_count
  uint32_t n_head = 0;         // {arch}.attention.head_count
  uint32_t n_head_kv = 0;      // {arch}.attention.head_count_kv (default n_head)
  uint32_t head_dim_k = 0;     // {arch}.attention.key_length (default n_embd / n_head)
  uint32_t head_dim_v = 0;     // {arch}.attention.value_length (default n_embd / n_head)
  uint32_t n_rot = 0;          // {arch}.rope.dimension_count (default head_dim_k)
  uint32_t n_ff = 0;           // {arch}.feed_forward_length (0 if absent): dense layers' width
  uint32_t n_expert = 0;       // {arch}.expert_count
  uint32_t n_expert_used = 0;  // {arch}.expert_used_count (top-k)
  uint32_t n_ff_exp = 0;       // routed expert hidden size (resolved per architecture)
  uint32_t n_ff_shexp = 0;     // shared experts' hidden size, 0 if the model has none
  float rms_eps = 1e-6f;       // {arch}.attention.layer_norm_rms_epsilon

  // Router (read per architecture; the defaults are a plain softmax top-k).
  ExpertScoring expert_gating = ExpertScoring::kSoftmax;  // {arch}.expert_gating_func
  bool expert_weights_norm = false;  // {arch}.expert_weights_norm: renormalise the k weights
  float expert_weights_scale = 0;    // {arch}.expert_weights_scale (0 or 1: none)
  uint32_t n_expert_groups = 0;      // {arch}.expert_group_count (0: no groups)
  uint32_t n_group_used = 0;         // {arch}.expert_group_used_count

  // deepseek2 (DeepSeek-V2/V3/R1, Kimi-K2).
  uint32_t n_layer_dense_lead = 0;  // {arch}.leading_dense_block_count: layers without experts
  // {arch}.nextn_predict_layers: NextN/MTP blocks stored after the n_layer trunk blocks
  // (block_count = n_layer + n_layer_nextn); never run, loaded or streamed.
  uint32_t n_layer_nextn = 0;
  uint32_t n_expert_shared = 0;  // {arch}.expert_shared_count
  uint32_t n_lora_q = 0;         // {arch}.attention.q_lora_rank (0: attn_q, no q LoRA)
  uint32_t n_lora_kv = 0;        // {arch}.attention.kv_lora_rank
  // {arch}.attention.key_length_mla / value_length_mla: a head's q/k and v sizes; both 0 in
  // legacy files (attn_kv_b), whose key_length / value_length are those sizes instead.
  uint32_t head_dim_k_mla = 0;
  uint32_t head_dim_v_mla = 0;

  // gpt-oss: attention.sliding_window (0: none) on the layers the pattern picks: with
  // attention.sliding_window_pattern P, layer il slides when il % P < P - 1 (llama.cpp's
  // set_swa_pattern; P = 2: the even layers).
  uint32_t n_swa = 0;
  uint32_t swa_pattern = 0;

  // Gated DeltaNet layers (qwen3next, qwen35moe): {arch}.ssm.* as llama.cpp names them, and
  // full_attention_interval I: layer il attends fully when (il + 1) % I == 0, else it is a
  // DeltaNet layer.
  uint32_t ssm_d_conv = 0;          // ssm.conv_kernel
  uint32_t ssm_d_inner = 0;         // ssm.inner_size: value heads x their size
  uint32_t ssm_d_state = 0;         // ssm.state_size: a key head's size
  uint32_t ssm_dt_rank = 0;         // ssm.time_step_rank: value heads
  uint32_t ssm_n_group = 0;         // ssm.group_count: key heads
  uint32_t full_attn_interval = 0;  // full_attention_interval (llama.cpp's default: 4)
  // rope.dimension_sections (qwen35moe's interleaved M-RoPE): rotated pairs per section
  // (time, height, width, extra); all zero when absent.
  std::array<uint32_t, 4> rope_sections{};

  // RoPE. rope.scaling.* as llama.cpp reads them (llama_model::load_hparams).
  float rope_freq_base = 10000.0f;                          // {arch}.rope.freq_base
  float rope_freq_scale = 1.0f;                             // 1 / {arch}.rope.scaling.factor
  RopeScalingType rope_scaling = RopeScalingType::kLinear;  // rope.scaling.type
  uint32_t n_ctx_orig_yarn = 0;   // rope.scaling.original_context_length (n_ctx_train)
  float rope_attn_factor = 1.0f;  // rope.scaling.attn_factor
  // rope.scaling.yarn_log_multiplier as llama.cpp keeps it: deepseek2's stored value is
  // 0.1 * mscale_all_dim, and llama.cpp divides it by 0.1 (arch_deepseek2.cc).
  float rope_yarn_log_mul = 0.0f;

  uint32_t n_embd_q() const { return n_head * head_dim_k; }
  uint32_t n_embd_k_gqa() const { return n_head_kv * head_dim_k; }
  uint32_t n_embd_v_gqa() const { return n_head_kv * head_dim_v; }
  // Layers with routed experts (all but deepseek2's leading dense ones).
  bool has_experts(uint32_t il) const { return il >= n_layer_dense_lead; }
};

// Reads "{arch}.{suffix}" keys with llama.cpp's conventions; errors are one line naming the
// key. For ArchDef::read_keys.
class HParamsKeys {
 public:
  HParamsKeys(const GgufMetadata& metadata, std::string_view arch) : md_(metadata), arch_(arch) {}

  std::string Key(std::string_view suffix) const;
  bool Has(std::string_view suffix) const;
  // A scalar unsigned key at most `max`; `fallback` if absent (nullopt: required). Per-layer
  // arrays are refused.
  Status Uint(std::string_view suffix, uint32_t& out, std::optional<uint32_t> fallback,
              uint64_t max = kMaxDim) const;
  Status Float(std::string_view suffix, float& out, std::optional<float> fallback) const;
  Status Bool(std::string_view suffix, bool& out, bool fallback) const;
  // An array of exactly out.size() unsigned integers, each at most `max`; zeros if absent.
  Status UintArray(std::string_view suffix, std::span<uint32_t> out, uint64_t max = kMaxDim) const;
  // A string key; `fallback` if absent.
  Status String(std::string_view suffix, std::string& out, std::string_view fallback) const;

  static constexpr uint64_t kMaxDim = 1u << 20;

 private:
  const GgufMetadata& md_;
  std::string_view arch_;
};

// Reads and validates the hyperparameters of a model. Errors are one line naming the key,
// e.g. "missing key qwen3moe.block_count", or "unsupported architecture 'gpt2' (supported:
// ...)". `n_vocab` comes from the token list or {arch}.vocab_size.
Result<HParams> ReadHParams(const GgufMetadata& metadata);

// Writes the keys llama.cpp's converter writes for this architecture (general.architecture
// and the {arch}.* keys). Tokenizer keys are written separately.
void WriteHParams(const HParams& hp, GgufMetadata& metadata);

}  // namespace mt
