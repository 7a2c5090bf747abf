#include "kernels/ops.h"

#include <algorithm>
#include <cmath>

namespace mt {

void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  double sum = 0;  // double: the mean of squares of 2-8k values in float loses digits
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(sum / n + eps));
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * (weight ? weight[i] : 1.0f);
}

void RopeAngles(const RopeFreqs& f, int pos, float* cos_sin) {
  const int half = f.n_rot / 2;
  float m = f.attn_factor;
  if (f.ext_factor != 0) m *= 1.0f + 0.1f * std::log(1.0f / f.freq_scale);
  for (int i = 0; i < half; ++i) {
    const double extrap = pos * std::pow(static_cast<double>(f.freq_base), -2.0 * i / f.n_rot);
    double theta = static_cast<double>(f.freq_scale) * extrap;
    if (f.ext_factor != 0) {
      const double y = (i - f.corr_low) / std::max(0.001f, f.corr_high - f.corr_low);
      const double mix = (1 - std::min(1.0, std::max(0.0, y))) * f.ext_factor;
      theta = theta * (1 - mix) + extrap * mix;
    }
    // m == 1 (no scaling) keeps the bits of the plain rotation.
    cos_sin[i] = static_cast<float>(std::cos(theta)) * m;
    cos_sin[half + i] = static_cast<float>(std::sin(theta)) * m;
  }
}

void RopeRotate(float* x, int n_heads, int head_dim, int n_rot, const float* cos_sin,
                RopeMode mode) {
  const int half = n_rot / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const float c = cos_sin[i], s = cos_sin[half + i];
      const int a = mode == RopeMode::kNeox ? i : 2 * i;
      const int b = mode == RopeMode::kNeox ? i + half : 2 * i + 1;
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * c - x1 * s;
      v[b] = x0 * s + x1 * c;
    }
  }
}

static float Silu(float x) { return x / (1.0f + std::exp(-x)); }

void SwiGlu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = Silu(gate[i]) * up[i];
}

void SwiGluOai(const float* gate, const float* up, int64_t n, float* out) {
  constexpr float kAlpha = 1.702f, kLimit = 7.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], kLimit);
    const float u = std::clamp(up[i], -kLimit, kLimit);
    out[i] = g / (1.0f + std::exp(kAlpha * -g)) * (u + 1.0f);
  }
}

}  // namespace mt
