#include "kernels/ops.h"

#include <cmath>

namespace mt {

void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  double sum = 0;  // double: the mean of squares of 2-8k values in float loses digits
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(sum / n + eps));
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * (weight ? weight[i] : 1.0f);
}

void RopeAngles(int n_rot, int pos, float freq_base, float freq_scale, float* cos_sin) {
  const int half = n_rot / 2;
  for (int i = 0; i < half; ++i) {
    const double theta = pos * static_cast<double>(freq_scale) *
                         std::pow(static_cast<double>(freq_base), -2.0 * i / n_rot);
    cos_sin[i] = static_cast<float>(std::cos(theta));
    cos_sin[half + i] = static_cast<float>(std::sin(theta));
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

void SoftmaxInPlace(float* x, int64_t n) {
  float mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

static float Silu(float x) { return x / (1.0f + std::exp(-x)); }

void SwiGlu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = Silu(gate[i]) * up[i];
}

}  // namespace mt
