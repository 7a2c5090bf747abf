// AVX-512 variant of AttendHead (kernels/attention.h). Compiled with the AVX-512 flags; keeps
// the rules of matmul_internal.h (everything in an anonymous namespace).
//
// Fixed float op order (so a (token, head) result depends on its inputs only):
//  - score j: one 16-lane FMA chain over the 16-element chunks of d_k (tail masked to 0),
//    then a fixed-tree lane sum (Reduce16), times scale;
//  - tile: max (exact, so its order does not matter); exp by Exp16; the tile sum of p in 16
//    lanes (lane = j % 16), Reduce16;
//  - output element i: one FMA chain over the positions of a tile, onto the running value.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/attention_internal.h"
#include "kernels/attention_prefetch.h"
#include "kernels/lane_sum.h"

namespace mt::kernels {
namespace {

constexpr int kChunksPerGroup = 8;  // 16-float output chunks kept in registers at once

__mmask16 TailMask(int64_t left) {
  return left >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << left) - 1);
}

// e^x: 2^n e^r with n = round(x log2(e)) and r = x - n ln(2) (ln 2 split into a short high
// part, exact times n, and a low part), e^r by its Taylor polynomial of degree 7 (|r| <= 0.347:
// truncation below 1e-8 relative). x < -87.3 (e^x < 2^-126; also -inf) gives 0; x is clamped
// at 88.3.
__m512 Exp16(__m512 x) {
  const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.3f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);  // 355/512: n * it exact
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);       // ln 2 - 355/512
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_GE_OQ);
  return _mm512_maskz_scalef_ps(keep, p, n);
}

// 16 elements at element offset `at` of a cache, widened to f32; lanes outside m are 0 and
// their memory is not read.
template <bool kF16>
__m512 Load16(const void* base, int64_t at, __mmask16 m) {
  if constexpr (kF16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(base) + at));
  } else {
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(base) + at);
  }
}

// Scores of positions [j0, j0 + P): s[j] = scale * q . K[j0 + j].
template <bool kF16, int P>
void Scores(const AttendArgs& a, int64_t j0, float* s) {
  for (int p = 0; p < P; ++p) PrefetchForPosition(a, j0 + p);
  __m512 acc[P];
  for (int p = 0; p < P; ++p) acc[p] = _mm512_setzero_ps();
  for (int c = 0; c < a.d_k; c += 16) {
    const __mmask16 m = TailMask(a.d_k - c);
    const __m512 qv = _mm512_maskz_loadu_ps(m, a.q + c);
    for (int p = 0; p < P; ++p) {
      acc[p] = _mm512_fmadd_ps(qv, Load16<kF16>(a.k, (j0 + p) * a.k_stride + c, m), acc[p]);
    }
  }
  for (int p = 0; p < P; ++p) s[p] = a.scale * Reduce16(acc[p]);
}

// out[d0 + i] += sum_j p[j] * V[j0 + j][d0 + i] for the NC chunks of 16 from d0 (the last one
// masked by `last`), in position order.
template <bool kF16, int NC>
void AccumulateV(const AttendArgs& a, const float* p, int64_t j0, int64_t n, int d0,
                 __mmask16 last) {
  __m512 acc[NC];
  for (int c = 0; c < NC; ++c) {
    acc[c] = _mm512_maskz_loadu_ps(c == NC - 1 ? last : 0xFFFF, a.out + d0 + 16 * c);
  }
  for (int64_t j = 0; j < n; ++j) {
    const __m512 pj = _mm512_set1_ps(p[j]);
    const int64_t at = (j0 + j) * a.v_stride + d0;
    for (int c = 0; c < NC; ++c) {
      acc[c] =
          _mm512_fmadd_ps(pj, Load16<kF16>(a.v, at + 16 * c, c == NC - 1 ? last : 0xFFFF), acc[c]);
    }
  }
  for (int c = 0; c < NC; ++c) {
    _mm512_mask_storeu_ps(a.out + d0 + 16 * c, c == NC - 1 ? last : 0xFFFF, acc[c]);
  }
}

template <bool kF16>
void AccumulateAllV(const AttendArgs& a, const float* p, int64_t j0, int64_t n) {
  const int chunks = (a.d_v + 15) / 16;
  for (int g = 0; g < chunks; g += kChunksPerGroup) {
    const int nc = chunks - g < kChunksPerGroup ? chunks - g : kChunksPerGroup;
    const int d0 = 16 * g;
    const __mmask16 last = TailMask(a.d_v - (d0 + 16 * (nc - 1)));
    switch (nc) {
      case 1:
        AccumulateV<kF16, 1>(a, p, j0, n, d0, last);
        break;
      case 2:
        AccumulateV<kF16, 2>(a, p, j0, n, d0, last);
        break;
      case 3:
        AccumulateV<kF16, 3>(a, p, j0, n, d0, last);
        break;
      case 4:
        AccumulateV<kF16, 4>(a, p, j0, n, d0, last);
        break;
      case 5:
        AccumulateV<kF16, 5>(a, p, j0, n, d0, last);
        break;
      case 6:
        AccumulateV<kF16, 6>(a, p, j0, n, d0, last);
        break;
      case 7:
        AccumulateV<kF16, 7>(a, p, j0, n, d0, last);
        break;
      default:
        AccumulateV<kF16, 8>(a, p, j0, n, d0, last);
        break;
    }
  }
}

// out[i] *= c for i < d_v.
void ScaleOut(float* out, int d_v, __m512 c) {
  for (int i = 0; i < d_v; i += 16) {
    const __mmask16 m = TailMask(d_v - i);
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, out + i), c));
  }
}

// Folds one tile's n scores (in a.scratch) into the running maximum m and sum l, rescaling
// a.out when m rises, and turns the scores into the tile's weights p.
void SoftmaxTile(const AttendArgs& a, int64_t n, float& m, float& l) {
  float* s = a.scratch;
  __m512 mx = _mm512_set1_ps(-INFINITY);
  for (int64_t j = 0; j < n; j += 16) {
    mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(mx, TailMask(n - j), s + j));
  }
  const float tile_max = _mm512_reduce_max_ps(mx);  // order-free: max is exact
  if (tile_max > m) {
    const __m512 c = Exp16(_mm512_set1_ps(m - tile_max));  // 0 for the first tile
    l *= _mm512_cvtss_f32(c);
    ScaleOut(a.out, a.d_v, c);
    m = tile_max;
  }
  __m512 sum = _mm512_setzero_ps();
  const __m512 mv = _mm512_set1_ps(m);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = TailMask(n - j);
    const __m512 p =
        _mm512_maskz_mov_ps(k, Exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + j), mv)));
    _mm512_mask_storeu_ps(s + j, k, p);
    sum = _mm512_add_ps(sum, p);
  }
  l += Reduce16(sum);
}

template <bool kF16>
void Attend(const AttendArgs& a) {
  for (int i = 0; i < a.d_v; i += 16) {
    _mm512_mask_storeu_ps(a.out + i, TailMask(a.d_v - i), _mm512_setzero_ps());
  }
  PrefetchFirstRows(a);  // Scores asks for the rest
  float m = -INFINITY;  // running maximum of the scores
  float l = 0.0f;       // running sum of exp(s_j - m)
  float* s = a.scratch;
  for (int64_t j0 = 0; j0 < a.n_pos; j0 += kAttendTile) {
    const int64_t n = a.n_pos - j0 < kAttendTile ? a.n_pos - j0 : kAttendTile;
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) Scores<kF16, 4>(a, j0 + j, s + j);
    for (; j < n; ++j) Scores<kF16, 1>(a, j0 + j, s + j);
    SoftmaxTile(a, n, m, l);
    AccumulateAllV<kF16>(a, s, j0, n);
  }
  ScaleOut(a.out, a.d_v, _mm512_set1_ps(1.0f / l));
}

// ---- A GQA group: G queries over the same rows, each with Attend's float ops ------------

// Scores<kF16, P> for each of the G queries, the K chunks loaded and widened once for all.
template <bool kF16, int P, int G>
void GroupScores(const AttendArgs* a, int64_t j0, int64_t jt) {
  for (int p = 0; p < P; ++p) PrefetchForPosition(a[0], j0 + p);
  __m512 acc[G][P];
  for (int g = 0; g < G; ++g) {
    for (int p = 0; p < P; ++p) acc[g][p] = _mm512_setzero_ps();
  }
  for (int c = 0; c < a[0].d_k; c += 16) {
    const __mmask16 m = TailMask(a[0].d_k - c);
    __m512 kv[P];
    for (int p = 0; p < P; ++p) kv[p] = Load16<kF16>(a[0].k, (j0 + p) * a[0].k_stride + c, m);
    for (int g = 0; g < G; ++g) {
      const __m512 qv = _mm512_maskz_loadu_ps(m, a[g].q + c);
      for (int p = 0; p < P; ++p) acc[g][p] = _mm512_fmadd_ps(qv, kv[p], acc[g][p]);
    }
  }
  for (int g = 0; g < G; ++g) {
    for (int p = 0; p < P; ++p) a[g].scratch[jt + p] = a[g].scale * Reduce16(acc[g][p]);
  }
}

// AccumulateV<kF16, NC> for each of the G queries (weights in their scratch), the V chunks
// loaded and widened once for all.
template <bool kF16, int NC, int G>
void GroupAccumulateV(const AttendArgs* a, int64_t j0, int64_t n, int d0, __mmask16 last) {
  __m512 acc[G][NC];
  for (int g = 0; g < G; ++g) {
    for (int c = 0; c < NC; ++c) {
      acc[g][c] = _mm512_maskz_loadu_ps(c == NC - 1 ? last : 0xFFFF, a[g].out + d0 + 16 * c);
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    const int64_t at = (j0 + j) * a[0].v_stride + d0;
    __m512 vv[NC];
    for (int c = 0; c < NC; ++c) {
      vv[c] = Load16<kF16>(a[0].v, at + 16 * c, c == NC - 1 ? last : 0xFFFF);
    }
    for (int g = 0; g < G; ++g) {
      const __m512 pj = _mm512_set1_ps(a[g].scratch[j]);
      for (int c = 0; c < NC; ++c) acc[g][c] = _mm512_fmadd_ps(pj, vv[c], acc[g][c]);
    }
  }
  for (int g = 0; g < G; ++g) {
    for (int c = 0; c < NC; ++c) {
      _mm512_mask_storeu_ps(a[g].out + d0 + 16 * c, c == NC - 1 ? last : 0xFFFF, acc[g][c]);
    }
  }
}

template <bool kF16, int G>
void GroupAccumulateAllV(const AttendArgs* a, int64_t j0, int64_t n) {
  constexpr int kGroupChunks = 4;  // G x 4 accumulators and 4 chunks stay in registers
  const int chunks = (a[0].d_v + 15) / 16;
  for (int c0 = 0; c0 < chunks; c0 += kGroupChunks) {
    const int nc = chunks - c0 < kGroupChunks ? chunks - c0 : kGroupChunks;
    const int d0 = 16 * c0;
    const __mmask16 last = TailMask(a[0].d_v - (d0 + 16 * (nc - 1)));
    switch (nc) {
      case 1: GroupAccumulateV<kF16, 1, G>(a, j0, n, d0, last); break;
      case 2: GroupAccumulateV<kF16, 2, G>(a, j0, n, d0, last); break;
      case 3: GroupAccumulateV<kF16, 3, G>(a, j0, n, d0, last); break;
      default: GroupAccumulateV<kF16, 4, G>(a, j0, n, d0, last); break;
    }
  }
}

template <bool kF16, int G>
void AttendGroup(const AttendArgs* a) {
  float m[G], l[G];
  for (int g = 0; g < G; ++g) {
    for (int i = 0; i < a[g].d_v; i += 16) {
      _mm512_mask_storeu_ps(a[g].out + i, TailMask(a[g].d_v - i), _mm512_setzero_ps());
    }
    m[g] = -INFINITY;
    l[g] = 0.0f;
  }
  PrefetchFirstRows(a[0]);
  for (int64_t j0 = 0; j0 < a[0].n_pos; j0 += kAttendTile) {
    const int64_t n = a[0].n_pos - j0 < kAttendTile ? a[0].n_pos - j0 : kAttendTile;
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) GroupScores<kF16, 4, G>(a, j0 + j, j);
    for (; j < n; ++j) GroupScores<kF16, 1, G>(a, j0 + j, j);
    for (int g = 0; g < G; ++g) SoftmaxTile(a[g], n, m[g], l[g]);
    GroupAccumulateAllV<kF16, G>(a, j0, n);
  }
  for (int g = 0; g < G; ++g) ScaleOut(a[g].out, a[g].d_v, _mm512_set1_ps(1.0f / l[g]));
}

template <bool kF16>
void AttendGroups(const AttendArgs* a, int n_q) {
  for (int i = 0; i < n_q; i += 4) {  // 4 x 4 score accumulators fill half the registers
    switch (n_q - i < 4 ? n_q - i : 4) {
      case 1: Attend<kF16>(a[i]); break;
      case 2: AttendGroup<kF16, 2>(a + i); break;
      case 3: AttendGroup<kF16, 3>(a + i); break;
      default: AttendGroup<kF16, 4>(a + i); break;
    }
  }
}

// 16 floats to halves as Fp32ToFp16: the hardware rounds to nearest even like it, but keeps
// a NaN's payload, so NaNs become the quiet NaN (with their sign) first.
__m256i ToF16(__m512 x) {
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  const __m512 quiet = _mm512_or_ps(_mm512_and_ps(x, _mm512_set1_ps(-0.0f)),
                                    _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000)));
  return _mm512_cvtps_ph(_mm512_mask_blend_ps(nan, x, quiet),
                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

}  // namespace

void StoreF16Avx512(const float* src, int64_t n, uint16_t* dst) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    _mm256_mask_storeu_epi16(dst + i, m, ToF16(_mm512_maskz_loadu_ps(m, src + i)));
  }
}

// q8_0 never comes here (attention.cc runs it with the AVX2 kernels).
void AttendGroupAvx512(const AttendArgs* a, int n_q) {
  if (a[0].type == KvElemType::kF16) {
    AttendGroups<true>(a, n_q);
  } else {
    AttendGroups<false>(a, n_q);
  }
}

void AttendAvx512(const AttendArgs& args) {
  const AttendArgs a = args;  // a local copy: its fields can stay in registers
  if (a.type == KvElemType::kF16) {
    Attend<true>(a);
  } else {
    Attend<false>(a);
  }
}

}  // namespace mt::kernels
