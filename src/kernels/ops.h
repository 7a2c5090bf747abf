// Elementwise and normalisation ops of the transformer, on float rows. Scalar reference
// code; pure functions, thread-safe.
#pragma once

#include <cstdint>

namespace mt {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i]  (weight may be null: 1). out may be x.
void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* out);

enum class RopeMode { kNorm, kNeox };

// Rotates the first n_rot dims of each of n_heads heads (head_dim apart) in place by
// position `pos`: theta_i = pos * freq_scale * base^(-2i / n_rot) for pair i. kNorm pairs
// (2i, 2i+1); kNeox pairs (i, i + n_rot/2).
void Rope(float* x, int n_heads, int head_dim, int n_rot, int pos, float freq_base,
          float freq_scale, RopeMode mode);

// In place softmax over n values (max-subtracted).
void SoftmaxInPlace(float* x, int64_t n);

// out[i] = silu(gate[i]) * up[i]
void SwiGlu(const float* gate, const float* up, int64_t n, float* out);

}  // namespace mt
