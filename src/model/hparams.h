// Hyperparameters of a MoE transformer, read from (and written to) GGUF keys with
// llama.cpp's names and defaults ("{arch}.block_count", ...).
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace mt {

class GgufMetadata;
struct ArchDef;

struct HParams {
  std::string arch;           // general.architecture
  uint32_t n_vocab = 0;       // tokens (rows of token_embd)
  uint32_t n_ctx_train = 0;   // {arch}.context_length
  uint32_t n_embd = 0;        // {arch}.embedding_length
  uint32_t n_layer = 0;       // {arch}.block_count
  uint32_t n_head = 0;        // {arch}.attention.head_count
  uint32_t n_head_kv = 0;     // {arch}.attention.head_count_kv (default n_head)
  uint32_t head_dim_k = 0;    // {arch}.attention.key_length (default n_embd / n_head)
  uint32_t head_dim_v = 0;    // {arch}.attention.value_length (default n_embd / n_head)
  uint32_t n_rot = 0;         // {arch}.rope.dimension_count (default head_dim_k)
  uint32_t n_ff = 0;          // {arch}.feed_forward_length (0 if absent)
  uint32_t n_expert = 0;      // {arch}.expert_count
  uint32_t n_expert_used = 0; // {arch}.expert_used_count (top-k)
  uint32_t n_ff_exp = 0;      // routed expert hidden size (resolved per architecture)
  uint32_t n_ff_shexp = 0;    // shared expert hidden size, 0 if the model has none
  float rope_freq_base = 10000.0f;  // {arch}.rope.freq_base
  float rope_freq_scale = 1.0f;     // 1 / {arch}.rope.scaling.factor
  float rms_eps = 1e-6f;            // {arch}.attention.layer_norm_rms_epsilon

  uint32_t n_embd_q() const { return n_head * head_dim_k; }
  uint32_t n_embd_k_gqa() const { return n_head_kv * head_dim_k; }
  uint32_t n_embd_v_gqa() const { return n_head_kv * head_dim_v; }
};

// Reads and validates the hyperparameters of a model. Errors are one line naming the key,
// e.g. "missing key qwen3moe.block_count", or "unsupported architecture 'gpt2' (supported:
// ...)". `n_vocab` comes from the token list or {arch}.vocab_size.
Result<HParams> ReadHParams(const GgufMetadata& metadata);

// Writes the keys llama.cpp's converter writes for this architecture (general.architecture
// and the {arch}.* keys). Tokenizer keys are written separately.
void WriteHParams(const HParams& hp, GgufMetadata& metadata);

}  // namespace mt
