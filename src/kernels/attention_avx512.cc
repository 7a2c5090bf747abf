// AVX-512 variant of AttendHead (kernels/attention.h). Compiled with the AVX-512 flags; keeps
// the rules of matmul_internal.h (everything in an anonymous namespace).
//
// Fixed float op order (so a (token, head) result depends on its inputs only):
//  - score j: one 16-lane FMA chain over the 16-element chunks of d_k (tail masked to 0),
//    then a fixed-tree lane sum (Reduce16), times scale; q8_0: per pair of blocks (lanes
//    0-7 the first, 8-15 the second; an odd last block alone, its other lanes 0), exact
//    int32 sums of 4 code products each (vpdpbusd), folded into the lanes by one FMA with
//    the blocks' scale products (exact), then Reduce16, times scale;
//  - tile: max (exact, so its order does not matter); exp by Exp16; the tile sum of p in 16
//    lanes (lane = j % 16), Reduce16;
//  - output element i: one FMA chain over the positions of a tile, onto the running value
//    (q8_0: of fl(p_j * the block's scale) times the code, as in the AVX2 variant).
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/attention.h"
#include "kernels/attention_internal.h"
#include "kernels/attention_per_isa.h"
#include "kernels/lane_sum.h"
#include "quant/blocks.h"

namespace mt::kernels {
namespace {

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

constexpr KvElemType kF16 = KvElemType::kF16, kQ8 = KvElemType::kQ8_0;

// 16 elements at element offset `at` of an f16 or f32 cache, widened to f32; lanes outside m
// are 0 and their memory is not read. (q8_0 goes by blocks: ScoresQ8, CodesQ8.)
template <KvElemType kT>
__m512 Load16(const void* base, int64_t at, __mmask16 m) {
  static_assert(kT != kQ8);
  if constexpr (kT == kF16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(base) + at));
  } else {
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(base) + at);
  }
}

// q8_0: the scale of the block holding element `at`, and the 16 codes from `at` (a multiple
// of 16, so they lie in one block) as floats. q8_0 rows are whole blocks: no tail chunk.
const uint8_t* BlockAt(const void* base, int64_t at) {
  return static_cast<const uint8_t*>(base) + (at >> 5) * sizeof(BlockQ8_0);
}
float ScaleQ8(const uint8_t* block) {
  uint16_t d;
  std::memcpy(&d, block, 2);
  return _cvtsh_ss(d);
}
__m512 CodesQ8(const void* base, int64_t at) {
  const uint8_t* codes = BlockAt(base, at) + 2 + (at & 31);
  return _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes))));
}

// The codes of a q8_0 block and of the one after it (if `pair`, else zeros) in the two
// 256-bit halves; their scales in lanes 0-7 and 8-15 (0 for a missing second block).
__m512i CodePair(const uint8_t* block, bool pair) {
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 2));
  const __m256i hi =
      pair ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + sizeof(BlockQ8_0) + 2))
           : _mm256_setzero_si256();
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}
__m512 ScalePair(const uint8_t* block, bool pair) {
  const float hi = pair ? ScaleQ8(block + sizeof(BlockQ8_0)) : 0.0f;
  return _mm512_insertf32x8(_mm512_set1_ps(ScaleQ8(block)), _mm256_set1_ps(hi), 1);
}

// q8_0 scores (attention.h) of positions [j, j + P) for G queries (q' of query g at a[g].q8),
// accumulated into acc. vpdpbusd multiplies unsigned by signed bytes, so K's codes go in as
// k + 128 (xor 0x80), and each lane starts at -128 times its 4 q' codes' sum: every int32
// lane is then exactly the sum of its 4 code products (codes in [-127, 127]).
template <int G, int P>
void ScoresQ8(const AttendArgs* a, int64_t j, __m512 (&acc)[G][P]) {
  const AttendArgs& r = a[0];
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  const int blocks = r.d_k / 32;
  for (int b = 0; b < blocks; b += 2) {
    const bool pair = b + 1 < blocks;
    __m512i k[P];
    __m512 k_scale[P];
    for (int p = 0; p < P; ++p) {
      const uint8_t* block =
          static_cast<const uint8_t*>(r.k) + ((j + p) * r.k_stride / 32 + b) * sizeof(BlockQ8_0);
      k[p] = _mm512_xor_si512(CodePair(block, pair), bias);
      k_scale[p] = ScalePair(block, pair);
    }
    for (int g = 0; g < G; ++g) {
      const uint8_t* qb = reinterpret_cast<const uint8_t*>(a[g].q8 + b);
      const __m512i q = CodePair(qb, pair);
      const __m512 q_scale = ScalePair(qb, pair);
      const __m512i zero = _mm512_setzero_si512();
      const __m512i start = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, bias, q));
      for (int p = 0; p < P; ++p) {
        const __m512 sums = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, k[p], q));
        acc[g][p] = _mm512_fmadd_ps(_mm512_mul_ps(k_scale[p], q_scale), sums, acc[g][p]);
      }
    }
  }
}

// Scores of positions [j0, j0 + P) for G queries: a[g].scratch[s_at + p] = scale * q_g .
// K[j0 + p], each K chunk loaded and widened once for all of them. Prefetches for `ahead`
// (a query with the most positions) when it is set.
template <KvElemType kK, int P, int G>
[[gnu::always_inline]] inline void GroupScores(const AttendArgs* a, const AttendArgs* ahead,
                                               int64_t j0, int64_t s_at) {
  if (ahead != nullptr) {
    for (int p = 0; p < P; ++p) PrefetchForPosition(*ahead, j0 + p);
  }
  __m512 acc[G][P];
  for (int g = 0; g < G; ++g) {
    for (int p = 0; p < P; ++p) acc[g][p] = _mm512_setzero_ps();
  }
  if constexpr (kK == kQ8) {
    ScoresQ8<G, P>(a, j0, acc);
  } else {
    for (int c = 0; c < a[0].d_k; c += 16) {
      const __mmask16 m = TailMask(a[0].d_k - c);
      __m512 kv[P];
      for (int p = 0; p < P; ++p) kv[p] = Load16<kK>(a[0].k, (j0 + p) * a[0].k_stride + c, m);
      for (int g = 0; g < G; ++g) {
        const __m512 qv = _mm512_maskz_loadu_ps(m, a[g].q + c);
        for (int p = 0; p < P; ++p) acc[g][p] = _mm512_fmadd_ps(qv, kv[p], acc[g][p]);
      }
    }
  }
  for (int g = 0; g < G; ++g) {
    for (int p = 0; p < P; ++p) a[g].scratch[s_at + p] = a[g].scale * Reduce16(acc[g][p]);
  }
}

// out[d0 + i] += sum_j p_g[j] * V[j0 + j][d0 + i] for the NC chunks of 16 from d0 (the last
// one masked by `last`) and G queries (weights p_g in their scratch), in position order;
// each V chunk is loaded and widened once for all G. q8_0: fl(p_j * the block's scale) once
// per block, times the codes.
template <KvElemType kV, int NC, int G>
void AccumulateV(const AttendArgs* a, int64_t j0, int64_t n, int d0, __mmask16 last) {
  auto mask = [&](int c) { return c == NC - 1 ? last : __mmask16{0xFFFF}; };
  __m512 acc[G][NC];
  for (int g = 0; g < G; ++g) {
    for (int c = 0; c < NC; ++c) acc[g][c] = _mm512_maskz_loadu_ps(mask(c), a[g].out + d0 + 16 * c);
  }
  for (int64_t j = 0; j < n; ++j) {
    const int64_t at = (j0 + j) * a[0].v_stride + d0;
    if constexpr (kV == kQ8) {
      // d0 is a multiple of 32 (chunk groups start at multiples of 64 elements), so chunks
      // 2i and 2i + 1 share a block.
      __m512 w[G];
      for (int c = 0; c < NC; ++c) {
        if (c % 2 == 0) {
          const float d = ScaleQ8(BlockAt(a[0].v, at + 16 * c));
          for (int g = 0; g < G; ++g) w[g] = _mm512_set1_ps(a[g].scratch[j] * d);
        }
        const __m512 v = CodesQ8(a[0].v, at + 16 * c);
        for (int g = 0; g < G; ++g) acc[g][c] = _mm512_fmadd_ps(w[g], v, acc[g][c]);
      }
    } else {
      __m512 vv[NC];
      for (int c = 0; c < NC; ++c) vv[c] = Load16<kV>(a[0].v, at + 16 * c, mask(c));
      for (int g = 0; g < G; ++g) {
        const __m512 pj = _mm512_set1_ps(a[g].scratch[j]);
        for (int c = 0; c < NC; ++c) acc[g][c] = _mm512_fmadd_ps(pj, vv[c], acc[g][c]);
      }
    }
  }
  for (int g = 0; g < G; ++g) {
    for (int c = 0; c < NC; ++c) _mm512_mask_storeu_ps(a[g].out + d0 + 16 * c, mask(c), acc[g][c]);
  }
}

// The weighted sum of a tile's n positions into every output element of G queries, in
// groups of chunks whose accumulators stay in registers: 8 for one query, 4 for more.
// GroupScores and this are inlined: shared by the pairs of K and V types they were left out
// of line, and one head's attention ran 5-15 % slower (kernels_bench attend, fresh copies).
template <KvElemType kV, int G>
[[gnu::always_inline]] inline void AccumulateAllV(const AttendArgs* a, int64_t j0, int64_t n) {
  constexpr int kGroupChunks = G == 1 ? 8 : 4;
  const int chunks = (a[0].d_v + 15) / 16;
  for (int c0 = 0; c0 < chunks; c0 += kGroupChunks) {
    const int nc = chunks - c0 < kGroupChunks ? chunks - c0 : kGroupChunks;
    const int d0 = 16 * c0;
    const __mmask16 last = TailMask(a[0].d_v - (d0 + 16 * (nc - 1)));
    switch (nc) {
      case 1:
        AccumulateV<kV, 1, G>(a, j0, n, d0, last);
        break;
      case 2:
        AccumulateV<kV, 2, G>(a, j0, n, d0, last);
        break;
      case 3:
        AccumulateV<kV, 3, G>(a, j0, n, d0, last);
        break;
      case 4:
        AccumulateV<kV, 4, G>(a, j0, n, d0, last);
        break;
      case 5:
        AccumulateV<kV, 5, G>(a, j0, n, d0, last);
        break;
      case 6:
        AccumulateV<kV, 6, G>(a, j0, n, d0, last);
        break;
      case 7:
        AccumulateV<kV, 7, G>(a, j0, n, d0, last);
        break;
      default:
        AccumulateV<kV, 8, G>(a, j0, n, d0, last);
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

// The tile at j0 (n positions) for G queries over the same rows: each query's steps alone,
// with the K and V chunks loaded and widened once for all. Inlined: out of line, one head's
// attention ran 5-12 % slower than the single-query code before it (kernels_bench attend
// f16, 128 and 1024 positions, against fresh copies).
template <KvElemType kK, KvElemType kV, int G>
[[gnu::always_inline]] inline void GroupTile(const AttendArgs* a, const AttendArgs* ahead,
                                             int64_t j0, int64_t n, float* m, float* l) {
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) GroupScores<kK, 4, G>(a, ahead, j0 + j, j);
  for (; j < n; ++j) GroupScores<kK, 1, G>(a, ahead, j0 + j, j);
  for (int g = 0; g < G; ++g) SoftmaxTile(a[g], n, m[g], l[g]);
  AccumulateAllV<kV, G>(a, j0, n);
}

void ZeroOut(const AttendArgs& a) {
  for (int i = 0; i < a.d_v; i += 16) {
    _mm512_mask_storeu_ps(a.out + i, TailMask(a.d_v - i), _mm512_setzero_ps());
  }
}

// G queries over the same rows and positions (a[g] differ only in q, q8, out and scratch).
template <KvElemType kK, KvElemType kV, int G>
void AttendGroup(const AttendArgs* a) {
  float m[G], l[G];  // running maximum of the scores; running sum of exp(s_j - m)
  for (int g = 0; g < G; ++g) {
    ZeroOut(a[g]);
    m[g] = -INFINITY;
    l[g] = 0.0f;
  }
  PrefetchFirstRows(a[0]);  // the scores ask for the rest
  for (int64_t j0 = 0; j0 < a[0].n_pos; j0 += kAttendTile) {
    const int64_t n = a[0].n_pos - j0 < kAttendTile ? a[0].n_pos - j0 : kAttendTile;
    GroupTile<kK, kV, G>(a, a, j0, n, m, l);
  }
  for (int g = 0; g < G; ++g)
    ScaleOut(a[g].out, a[g].d_v, _mm512_set1_ps(InverseDenominator(a[g], m[g], l[g])));
}

template <KvElemType kK, KvElemType kV>
void AttendGroups(const AttendArgs* a, int n_q) {
  for (int i = 0; i < n_q; i += 4) {  // 4 x 4 score accumulators fill half the registers
    switch (n_q - i < 4 ? n_q - i : 4) {
      case 1:
        AttendGroup<kK, kV, 1>(a + i);
        break;
      case 2:
        AttendGroup<kK, kV, 2>(a + i);
        break;
      case 3:
        AttendGroup<kK, kV, 3>(a + i);
        break;
      default:
        AttendGroup<kK, kV, 4>(a + i);
        break;
    }
  }
}

// n queries over the same rows with positions of their own (a prompt's tokens): each tile
// that is whole for all of them goes through them 4 at a time while its K and V rows are in
// L1/L2, rather than each token streaming the head's whole cache (olmoe-1b-7b pp256 at depth
// 2048, f16 cache: 138 / 111 tok/s token by token, 195 / 169 this way); then each query's
// own rest. Every query gets the float ops it would get alone.
template <KvElemType kK, KvElemType kV>
void AttendMany(const AttendArgs* a, int n) {
  const auto [shared, far] = FindSharedTiles(a, n);
  float m[kAttendGroupMax], l[kAttendGroupMax];
  for (int i = 0; i < n; ++i) {
    ZeroOut(a[i]);
    m[i] = -INFINITY;
    l[i] = 0.0f;
  }
  PrefetchFirstRows(a[far]);
  for (int64_t j0 = 0; j0 < shared; j0 += kAttendTile) {
    for (int i = 0; i < n; i += 4) {
      const AttendArgs* ahead = i == 0 ? &a[far] : nullptr;  // the first pass brings the rows
      switch (n - i < 4 ? n - i : 4) {
        case 1:
          GroupTile<kK, kV, 1>(a + i, ahead, j0, kAttendTile, m + i, l + i);
          break;
        case 2:
          GroupTile<kK, kV, 2>(a + i, ahead, j0, kAttendTile, m + i, l + i);
          break;
        case 3:
          GroupTile<kK, kV, 3>(a + i, ahead, j0, kAttendTile, m + i, l + i);
          break;
        default:
          GroupTile<kK, kV, 4>(a + i, ahead, j0, kAttendTile, m + i, l + i);
          break;
      }
    }
  }
  for (int i = 0; i < n; ++i) {
    for (int64_t j0 = shared; j0 < a[i].n_pos; j0 += kAttendTile) {
      const int64_t rest = a[i].n_pos - j0 < kAttendTile ? a[i].n_pos - j0 : kAttendTile;
      GroupTile<kK, kV, 1>(a + i, a + i, j0, rest, m + i, l + i);
    }
    ScaleOut(a[i].out, a[i].d_v, _mm512_set1_ps(InverseDenominator(a[i], m[i], l[i])));
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

void AttendGroupAvx512(const AttendArgs* a, int n_q) {
  WithKvTypes(a[0].types, [&]<KvElemType kK, KvElemType kV>() { AttendGroups<kK, kV>(a, n_q); });
}

void AttendManyAvx512(const AttendArgs* a, int n_q) {
  WithKvTypes(a[0].types, [&]<KvElemType kK, KvElemType kV>() { AttendMany<kK, kV>(a, n_q); });
}

void AttendAvx512(const AttendArgs& args) {
  const AttendArgs a = args;  // a local copy: its fields can stay in registers
  AttendGroupAvx512(&a, 1);
}

}  // namespace mt::kernels
