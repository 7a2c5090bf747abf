// Deterministic synthetic weights at realistic scales, and routing skew.
//
// Element (row, col) of a tensor depends only on (seed, tensor name, row, col), so the
// bytes of a synthetic model never depend on chunking or thread count. Scales keep
// activations finite and routing healthy: token embeddings have std 1, every projection
// keeps unit variance, and the residual branches (attention output, expert down) are
// scaled by 1/sqrt(2 n_layer) so a token's identity survives all the layers. Without
// that, routing collapses onto a few experts and offloading looks far better than it is.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/arch.h"

namespace mt {

// Routing skew. Trained MoE hidden states share a large common component, and routers
// favour some experts along it. Synth does the same: token embeddings get a component of
// relative size kSkewEmbeddingShare along a seeded unit direction u, and expert e's router
// row gets offset_e / p * u, where p is the projection of a normalised hidden state on u.
// Expert e's logit is then its token-dependent part plus offset_e.
inline constexpr float kSkewEmbeddingShare = 0.5f;

struct WeightInit {
  float mean = 0;    // 1 for norm weights
  float stddev = 0;  // of the Gaussian part
  // (rows) per-row multipliers of stddev, empty for none. Zeroes the head rows of unused
  // tokens.
  std::vector<float> row_scale;
  // Row r gets direction_coef[r] * direction added (both empty for none).
  std::vector<float> direction;       // (row_len) unit vector shared by embeddings and routers
  std::vector<float> direction_coef;  // (rows)
  // Legacy MLA files: attn_kv_b's rows hold, per head, attn_k_b's N columns transposed, then
  // attn_v_b's V rows, element for element as the current layout's tensors of the same seed
  // have them, so both layouts of one model hold the same weights.
  struct SplitKvB {
    uint64_t k_b_seed = 0, v_b_seed = 0;  // TensorSeed of the current layout's tensors
    float k_b_stddev = 0, v_b_stddev = 0;
    uint64_t rank = 0, nope = 0, v = 0;  // L, N, V
  };
  std::optional<SplitKvB> kv_b_from_split;
};

struct InitContext {
  const HParams& hp;
  uint64_t seed = 0;
  float router_offset_scale = 0;  // see CalibrateRouterOffsets; 0 = uniform routing
  // (n_vocab) tokenizer.ggml.token_type; unused (padding) tokens get near-zero output rows,
  // as untrained rows of real checkpoints do, so sampling never lands on them. May be empty.
  std::span<const int32_t> token_types;
  const ModelParts* parts = nullptr;  // the model's layers (for MLA's legacy attn_kv_b)
};

WeightInit InitFor(const TensorDesc& desc, const InitContext& ctx);

// A seed for one tensor, mixing the model seed with the tensor's name.
uint64_t TensorSeed(uint64_t seed, const std::string& tensor_name);

// Writes rows [first_row, first_row + n_rows) of length `row_len` into `out`.
void GenerateRows(const WeightInit& init, uint64_t tensor_seed, uint64_t first_row, uint64_t n_rows,
                  uint64_t row_len, float* out);

// The scale s of the per-expert router offsets for a skew in [0, 3]: expert e's logit
// offset is s * sigma * q_e, with q_e shuffled normal quantiles and sigma the std of the
// token-dependent part. 0 gives uniform routing; skew 1 makes the top 20 % of a layer's
// experts take about half of its activations, as in published traces of trained MoE
// models; higher skews go further. Found by bisection on a Monte Carlo model of top-k
// routing; deterministic.
float CalibrateRouterOffsets(float skew, uint32_t n_expert, uint32_t n_expert_used);

// The share of activations the top `top_fraction` of experts take under that model, for
// reporting and tests.
double SimulatedTopShare(float offset_scale, uint32_t n_expert, uint32_t n_expert_used,
                         double top_fraction);

}  // namespace mt
