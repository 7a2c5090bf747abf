// Elementwise and normalisation ops of the transformer, on float rows. Scalar reference
// code; pure functions, thread-safe.
#pragma once

#include <cstdint>

namespace mt {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i]  (weight may be null: 1). out may be x.
void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* out);

enum class RopeMode { kNorm, kNeox };

// Rotary position embedding in two steps, because the angles depend on the position only
// (a forward pass computes them once per token, not per layer and head):
// RopeAngles writes cos_sin[i] = cos(theta_i) and cos_sin[n_rot / 2 + i] = sin(theta_i),
// theta_i = pos * freq_scale * base^(-2i / n_rot), for the n_rot / 2 pairs; RopeRotate
// rotates the first n_rot dims of each of n_heads heads (head_dim apart) in place by them.
// kNorm pairs (2i, 2i+1); kNeox pairs (i, i + n_rot/2).
void RopeAngles(int n_rot, int pos, float freq_base, float freq_scale, float* cos_sin);
void RopeRotate(float* x, int n_heads, int head_dim, int n_rot, const float* cos_sin,
                RopeMode mode);

// In place softmax over n values (max-subtracted).
void SoftmaxInPlace(float* x, int64_t n);

// out[i] = silu(gate[i]) * up[i]
void SwiGlu(const float* gate, const float* up, int64_t n, float* out);

}  // namespace mt
