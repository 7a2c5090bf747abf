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
// RopeAngles writes cos_sin[i] = m cos(theta_i) and cos_sin[n_rot / 2 + i] = m sin(theta_i)
// for the n_rot / 2 pairs; RopeRotate rotates the first n_rot dims of each of n_heads heads
// (head_dim apart) in place by them. kNorm pairs (2i, 2i+1); kNeox pairs (i, i + n_rot/2).
//
// The angles are ggml's rope with YaRN: theta_e = pos * base^(-2i / n_rot) and theta_i =
// freq_scale * theta_e. Without YaRN (ext_factor 0) theta = theta_i and m = attn_factor.
// With it, ramp = 1 - clamp((i - corr_low) / max(0.001, corr_high - corr_low), 0, 1),
// r = ramp * ext_factor, theta = theta_i (1 - r) + theta_e r, and m = attn_factor (1 + 0.1
// ln(1 / freq_scale)).
struct RopeFreqs {
  int n_rot = 0;
  float freq_base = 10000;
  float freq_scale = 1;
  float ext_factor = 0;
  float attn_factor = 1;
  float corr_low = 0;
  float corr_high = 0;
};
void RopeAngles(const RopeFreqs& f, int pos, float* cos_sin);
void RopeRotate(float* x, int n_heads, int head_dim, int n_rot, const float* cos_sin,
                RopeMode mode);

// out[i] = silu(gate[i]) * up[i]
void SwiGlu(const float* gate, const float* up, int64_t n, float* out);
// gpt-oss's clamped SwiGLU (ggml_swiglu_oai, alpha 1.702, limit 7): with g = min(gate[i], 7)
// and u = clamp(up[i], -7, 7), out[i] = g / (1 + exp(-1.702 g)) * (u + 1).
void SwiGluOai(const float* gate, const float* up, int64_t n, float* out);

}  // namespace mt
