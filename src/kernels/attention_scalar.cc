// Scalar variant of AttendHead (kernels/attention.h), plain C++ for any CPU: the same tiles
// and online softmax as the SIMD variants, with sequential sums and std::exp.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/attention.h"
#include "kernels/attention_internal.h"
#include "quant/blocks.h"
#include "quant/float16.h"

namespace mt::kernels {
namespace {

// Element i of position j of a K or V cache, widened (exactly).
float Elem(const void* base, KvElemType type, int64_t j, int64_t stride, int i) {
  const int64_t at = j * stride + i;
  const auto* bytes = static_cast<const uint8_t*>(base);
  switch (type) {
    case KvElemType::kF16: {
      uint16_t h;
      std::memcpy(&h, bytes + 2 * at, 2);
      return Fp16ToFp32(h);
    }
    case KvElemType::kQ8_0: {
      BlockQ8_0 b;
      std::memcpy(&b, bytes + at / kQK * sizeof(BlockQ8_0), sizeof(b));
      return Fp16ToFp32(b.d) * static_cast<float>(b.qs[at % kQK]);
    }
    case KvElemType::kF32:
      break;
  }
  float f;
  std::memcpy(&f, bytes + 4 * at, 4);
  return f;
}

// q . K[j] in order.
float Dot(const AttendArgs& a, int64_t j) {
  float dot = 0.0f;
  for (int i = 0; i < a.d_k; ++i) dot += a.q[i] * Elem(a.k, a.types.k, j, a.k_stride, i);
  return dot;
}

// q' . K[j] for a q8_0 K (attention.h): per block, the code products' integer sum times
// the product of the two scales (exact: 11 x 11 significant bits), summed in order.
float DotQ8(const AttendArgs& a, int64_t j) {
  const auto* row = static_cast<const uint8_t*>(a.k) + j * a.k_stride / kQK * sizeof(BlockQ8_0);
  float dot = 0.0f;
  for (int b = 0; b < a.d_k / kQK; ++b) {
    BlockQ8_0 kb;
    std::memcpy(&kb, row + b * sizeof(BlockQ8_0), sizeof(kb));
    int32_t sum = 0;
    for (int i = 0; i < kQK; ++i) sum += int32_t{a.q8[b].qs[i]} * kb.qs[i];
    dot += Fp16ToFp32(kb.d) * Fp16ToFp32(a.q8[b].d) * static_cast<float>(sum);
  }
  return dot;
}

// e^x, with x < -87.3 (e^x < 2^-126) as 0 like the SIMD variants; x = -inf gives 0.
float Exp(float x) { return x < -87.3f ? 0.0f : std::exp(x); }

}  // namespace

void StoreF16Scalar(const float* src, int64_t n, uint16_t* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Fp32ToFp16(src[i]);
}

void AttendScalar(const AttendArgs& a) {
  float m = -INFINITY;  // running maximum of the scores
  float l = 0.0f;       // running sum of exp(s_j - m)
  for (int i = 0; i < a.d_v; ++i) a.out[i] = 0.0f;
  float* s = a.scratch;
  for (int64_t j0 = 0; j0 < a.n_pos; j0 += kAttendTile) {
    const int64_t n = a.n_pos - j0 < kAttendTile ? a.n_pos - j0 : kAttendTile;
    float tile_max = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
      const float dot = a.types.k == KvElemType::kQ8_0 ? DotQ8(a, j0 + j) : Dot(a, j0 + j);
      s[j] = a.scale * dot;
      tile_max = s[j] > tile_max ? s[j] : tile_max;
    }
    if (tile_max > m) {
      const float c = Exp(m - tile_max);  // 0 for the first tile
      l *= c;
      for (int i = 0; i < a.d_v; ++i) a.out[i] *= c;
      m = tile_max;
    }
    float tile_sum = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
      const float p = Exp(s[j] - m);
      tile_sum += p;
      for (int i = 0; i < a.d_v; ++i) a.out[i] += p * Elem(a.v, a.types.v, j0 + j, a.v_stride, i);
    }
    l += tile_sum;
  }
  const float inv = InverseDenominator(a, m, l);
  for (int i = 0; i < a.d_v; ++i) a.out[i] *= inv;
}

}  // namespace mt::kernels
