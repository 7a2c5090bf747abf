// AVX2 + FMA + F16C variant of AttendHead (kernels/attention.h). Compiled with the AVX2 flags;
// keeps the rules of matmul_internal.h (everything in an anonymous namespace).
//
// Fixed float op order (so a (token, head) result depends on its inputs only):
//  - score j: one 8-lane FMA chain over the 8-element chunks of d_k (tail zero-filled), then
//    a fixed-tree lane sum (Reduce8), times scale;
//  - tile: max (exact); exp by Exp8; the tile sum of p in 8 lanes (lane = j % 8), Reduce8;
//  - output element i: one FMA chain over the positions of a tile, onto the running value.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/attention.h"
#include "kernels/attention_internal.h"
#include "kernels/attention_prefetch.h"
#include "kernels/lane_sum.h"

namespace mt::kernels {
namespace {

constexpr int kChunksPerGroup = 8;  // 8-float output chunks kept in registers at once

// Lanes [0, left) set (all for left >= 8), as a maskload/maskstore mask.
__m256i TailMask(int64_t left) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const int n = left >= 8 ? 8 : static_cast<int>(left);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lanes);
}

// e^x as Exp16 in attention_avx512.cc: 2^n e^r, e^r by its degree-7 Taylor polynomial, 2^n
// built in the exponent field (x is clamped to [-87.3, 88.3], so n is in [-126, 127]);
// x < -87.3 (and -inf) gives 0.
__m256 Exp8(__m256 x) {
  const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);  // 355/512: n * it exact
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);       // ln 2 - 355/512
  __m256 p = _mm256_set1_ps(1.0f / 5040);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_GE_OQ);
  return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), keep);
}

// The last 1..7 f16 elements of a row, widened; the other lanes 0. Kept out of line: when
// inlined, clang merges it with the full-width load of Load8 and rebuilds every full load
// from 16-bit lane extracts (2.4x slower).
[[gnu::noinline]] __m256 LoadTailF16(const uint16_t* p, int64_t left) {
  uint16_t tmp[8] = {};
  std::memcpy(tmp, p, 2 * left);
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tmp)));
}

// 8 elements at element offset `at` of a cache, widened to f32; lanes >= left are 0 and
// their memory is not read.
template <bool kF16>
__m256 Load8(const void* base, int64_t at, int64_t left) {
  if constexpr (kF16) {
    const uint16_t* p = static_cast<const uint16_t*>(base) + at;
    if (left >= 8) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return LoadTailF16(p, left);
  } else {
    const float* p = static_cast<const float*>(base) + at;
    if (left >= 8) return _mm256_loadu_ps(p);
    return _mm256_maskload_ps(p, TailMask(left));
  }
}

__m256 LoadF(const float* p, int64_t left) {
  return left >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, TailMask(left));
}

void StoreF(float* p, int64_t left, __m256 v) {
  if (left >= 8) {
    _mm256_storeu_ps(p, v);
  } else {
    _mm256_maskstore_ps(p, TailMask(left), v);
  }
}

// Scores of positions [j0, j0 + P): s[j] = scale * q . K[j0 + j]. The full chunks of d_k
// first, then the tail chunk (if any): the same FMA chain as one loop over all chunks.
template <bool kF16, int P>
void Scores(const AttendArgs& a, int64_t j0, float* s) {
  for (int p = 0; p < P; ++p) PrefetchForPosition(a, j0 + p);
  __m256 acc[P];
  for (int p = 0; p < P; ++p) acc[p] = _mm256_setzero_ps();
  const int full = a.d_k / 8 * 8;
  for (int c = 0; c < full; c += 8) {
    const __m256 qv = _mm256_loadu_ps(a.q + c);
    for (int p = 0; p < P; ++p) {
      acc[p] = _mm256_fmadd_ps(qv, Load8<kF16>(a.k, (j0 + p) * a.k_stride + c, 8), acc[p]);
    }
  }
  if (full < a.d_k) {
    const __m256 qv = LoadF(a.q + full, a.d_k - full);
    for (int p = 0; p < P; ++p) {
      acc[p] =
          _mm256_fmadd_ps(qv, Load8<kF16>(a.k, (j0 + p) * a.k_stride + full, a.d_k - full), acc[p]);
    }
  }
  for (int p = 0; p < P; ++p) s[p] = a.scale * Reduce8(acc[p]);
}

// out[d0 + i] += sum_j p[j] * V[j0 + j][d0 + i] for the NC chunks of 8 from d0, in position
// order.
template <bool kF16, int NC>
void AccumulateV(const AttendArgs& a, const float* p, int64_t j0, int64_t n, int d0) {
  __m256 acc[NC];
  for (int c = 0; c < NC; ++c) acc[c] = LoadF(a.out + d0 + 8 * c, a.d_v - d0 - 8 * c);
  for (int64_t j = 0; j < n; ++j) {
    const __m256 pj = _mm256_set1_ps(p[j]);
    const int64_t at = (j0 + j) * a.v_stride + d0;
    for (int c = 0; c < NC; ++c) {
      acc[c] = _mm256_fmadd_ps(pj, Load8<kF16>(a.v, at + 8 * c, a.d_v - d0 - 8 * c), acc[c]);
    }
  }
  for (int c = 0; c < NC; ++c) StoreF(a.out + d0 + 8 * c, a.d_v - d0 - 8 * c, acc[c]);
}

template <bool kF16>
void AccumulateAllV(const AttendArgs& a, const float* p, int64_t j0, int64_t n) {
  const int chunks = (a.d_v + 7) / 8;
  for (int g = 0; g < chunks; g += kChunksPerGroup) {
    const int nc = chunks - g < kChunksPerGroup ? chunks - g : kChunksPerGroup;
    const int d0 = 8 * g;
    switch (nc) {
      case 1:
        AccumulateV<kF16, 1>(a, p, j0, n, d0);
        break;
      case 2:
        AccumulateV<kF16, 2>(a, p, j0, n, d0);
        break;
      case 3:
        AccumulateV<kF16, 3>(a, p, j0, n, d0);
        break;
      case 4:
        AccumulateV<kF16, 4>(a, p, j0, n, d0);
        break;
      case 5:
        AccumulateV<kF16, 5>(a, p, j0, n, d0);
        break;
      case 6:
        AccumulateV<kF16, 6>(a, p, j0, n, d0);
        break;
      case 7:
        AccumulateV<kF16, 7>(a, p, j0, n, d0);
        break;
      default:
        AccumulateV<kF16, 8>(a, p, j0, n, d0);
        break;
    }
  }
}

// out[i] *= c for i < d_v.
void ScaleOut(float* out, int d_v, __m256 c) {
  for (int i = 0; i < d_v; i += 8)
    StoreF(out + i, d_v - i, _mm256_mul_ps(LoadF(out + i, d_v - i), c));
}

template <bool kF16>
void Attend(const AttendArgs& a) {
  for (int i = 0; i < a.d_v; i += 8) StoreF(a.out + i, a.d_v - i, _mm256_setzero_ps());
  PrefetchFirstRows(a);  // Scores asks for the rest
  float m = -INFINITY;  // running maximum of the scores
  float l = 0.0f;       // running sum of exp(s_j - m)
  float* s = a.scratch;
  for (int64_t j0 = 0; j0 < a.n_pos; j0 += kAttendTile) {
    const int64_t n = a.n_pos - j0 < kAttendTile ? a.n_pos - j0 : kAttendTile;
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) Scores<kF16, 4>(a, j0 + j, s + j);
    for (; j < n; ++j) Scores<kF16, 1>(a, j0 + j, s + j);
    float tile_max = -INFINITY;
    for (j = 0; j < n; ++j) tile_max = s[j] > tile_max ? s[j] : tile_max;  // exact
    if (tile_max > m) {
      const __m256 c = Exp8(_mm256_set1_ps(m - tile_max));  // 0 for the first tile
      l *= _mm256_cvtss_f32(c);
      ScaleOut(a.out, a.d_v, c);
      m = tile_max;
    }
    __m256 sum = _mm256_setzero_ps();
    const __m256 mv = _mm256_set1_ps(m);
    for (j = 0; j < n; j += 8) {
      const __m256 keep = _mm256_castsi256_ps(TailMask(n - j));
      const __m256 p = _mm256_and_ps(Exp8(_mm256_sub_ps(LoadF(s + j, n - j), mv)), keep);
      StoreF(s + j, n - j, p);
      sum = _mm256_add_ps(sum, p);
    }
    l += Reduce8(sum);
    AccumulateAllV<kF16>(a, s, j0, n);
  }
  ScaleOut(a.out, a.d_v, _mm256_set1_ps(1.0f / l));
}

// 8 floats to halves as Fp32ToFp16: the hardware rounds to nearest even like it, but keeps
// a NaN's payload, so NaNs become the quiet NaN (with their sign) first.
__m128i ToF16(__m256 x) {
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  const __m256 quiet = _mm256_or_ps(_mm256_and_ps(x, _mm256_set1_ps(-0.0f)),
                                    _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000)));
  return _mm256_cvtps_ph(_mm256_blendv_ps(x, quiet, nan),
                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

}  // namespace

void StoreF16Avx2(const float* src, int64_t n, uint16_t* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), ToF16(_mm256_loadu_ps(src + i)));
  }
  if (i < n) {
    alignas(32) float in[8] = {};
    alignas(16) uint16_t out[8];
    std::memcpy(in, src + i, (n - i) * sizeof(float));
    _mm_store_si128(reinterpret_cast<__m128i*>(out), ToF16(_mm256_load_ps(in)));
    std::memcpy(dst + i, out, (n - i) * sizeof(uint16_t));
  }
}

void AttendAvx2(const AttendArgs& args) {
  // A local copy: the compiler may keep its fields in registers (it must reload those of a
  // caller's object around the out-of-line tail loads).
  const AttendArgs a = args;
  if (a.f16) {
    Attend<true>(a);
  } else {
    Attend<false>(a);
  }
}

}  // namespace mt::kernels
