// AVX2 + FMA + F16C variant of AttendHead (kernels/attention.h). Compiled with the AVX2 flags;
// keeps the rules of matmul_internal.h (everything in an anonymous namespace).
//
// Fixed float op order (so a (token, head) result depends on its inputs only):
//  - score j: one 8-lane FMA chain over the 8-element chunks of d_k (tail zero-filled), then
//    a fixed-tree lane sum (Reduce8), times scale; q8_0: per block of 32, 8 lanes of exact
//    integer sums of q' and K codes, folded into the lanes by one FMA with the scales'
//    product, then Reduce8, times scale;
//  - tile: max (exact); exp by Exp8; the tile sum of p in 8 lanes (lane = j % 8), Reduce8;
//  - output element i: one FMA chain over the positions of a tile, onto the running value
//    (q8_0: of fl(p_j * the block's scale) times the code).
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

// q8_0: the scale of the block holding element `at`; and the 8 codes from `at` (a multiple of
// 8, so they lie in one block) as floats. q8_0 rows are whole blocks: no tail chunk.
float ScaleQ8(const void* base, int64_t at) {
  uint16_t d;
  std::memcpy(&d, static_cast<const uint8_t*>(base) + (at >> 5) * sizeof(BlockQ8_0), 2);
  return _cvtsh_ss(d);
}
__m256 CodesQ8(const void* base, int64_t at) {
  const uint8_t* codes =
      static_cast<const uint8_t*>(base) + (at >> 5) * sizeof(BlockQ8_0) + 2 + (at & 31);
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes))));
}

// 8 elements at element offset `at` of an f16 or f32 cache, widened to f32; lanes >= left
// are 0 and their memory is not read. (q8_0 goes by blocks: ScoresQ8, AccumulateChunks.)
template <KvElemType kT>
__m256 Load8(const void* base, int64_t at, int64_t left) {
  static_assert(kT != KvElemType::kQ8_0);
  if constexpr (kT == KvElemType::kF16) {
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

// q8_0 scores (attention.h): per block, the 32 code products of q' and K[j] summed in
// integers (|a| * sign-adjusted b in pairs, then pairs of pairs: 8 exact int32 lanes; codes
// are in [-127, 127], so the pair sums fit int16), converted to floats (exact) and folded
// into the running sums by one FMA with the block's scale product (exact). Accumulates
// positions [j, j + P) for Q queries (q' of query i at a[i].q8) into acc.
template <int Q, int P>
void ScoresQ8(const AttendArgs* a, int64_t j, __m256 (&acc)[Q][P]) {
  const AttendArgs& r = a[0];
  const __m256i ones = _mm256_set1_epi16(1);
  const int blocks = r.d_k / 32;
  for (int b = 0; b < blocks; ++b) {
    __m256i k_abs[P], k_raw[P];
    float k_scale[P];
    for (int p = 0; p < P; ++p) {
      const uint8_t* block =
          static_cast<const uint8_t*>(r.k) + ((j + p) * r.k_stride / 32 + b) * sizeof(BlockQ8_0);
      uint16_t d;
      std::memcpy(&d, block, 2);
      k_scale[p] = _cvtsh_ss(d);
      k_raw[p] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 2));
      k_abs[p] = _mm256_abs_epi8(k_raw[p]);
    }
    for (int i = 0; i < Q; ++i) {
      const BlockQ8_0& qb = a[i].q8[b];
      const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qb.qs));
      const float q_scale = _cvtsh_ss(qb.d);
      for (int p = 0; p < P; ++p) {
        const __m256i pairs = _mm256_maddubs_epi16(k_abs[p], _mm256_sign_epi8(qv, k_raw[p]));
        const __m256 sums = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
        acc[i][p] = _mm256_fmadd_ps(_mm256_set1_ps(k_scale[p] * q_scale), sums, acc[i][p]);
      }
    }
  }
}

// Scores of positions [j0, j0 + P): s[j] = scale * q . K[j0 + j]. The full chunks of d_k
// first, then the tail chunk (if any): the same FMA chain as one loop over all chunks.
template <KvElemType kK, int P>
[[gnu::always_inline]] inline void Scores(const AttendArgs& a, int64_t j0, float* s) {
  for (int p = 0; p < P; ++p) PrefetchForPosition(a, j0 + p);
  if constexpr (kK == KvElemType::kQ8_0) {
    __m256 acc[1][P];
    for (int p = 0; p < P; ++p) acc[0][p] = _mm256_setzero_ps();
    ScoresQ8<1, P>(&a, j0, acc);
    for (int p = 0; p < P; ++p) s[p] = a.scale * Reduce8(acc[0][p]);
  } else {
    __m256 acc[P];
    for (int p = 0; p < P; ++p) acc[p] = _mm256_setzero_ps();
    const int full = a.d_k / 8 * 8;
    for (int c = 0; c < full; c += 8) {
      const __m256 qv = _mm256_loadu_ps(a.q + c);
      for (int p = 0; p < P; ++p) {
        acc[p] = _mm256_fmadd_ps(qv, Load8<kK>(a.k, (j0 + p) * a.k_stride + c, 8), acc[p]);
      }
    }
    if (full < a.d_k) {
      const __m256 qv = LoadF(a.q + full, a.d_k - full);
      for (int p = 0; p < P; ++p) {
        acc[p] =
            _mm256_fmadd_ps(qv, Load8<kK>(a.k, (j0 + p) * a.k_stride + full, a.d_k - full), acc[p]);
      }
    }
    for (int p = 0; p < P; ++p) s[p] = a.scale * Reduce8(acc[p]);
  }
}

// out[d0 + e] += sum_j p[j] * V[j0 + j][d0 + e] of the NC chunks of 8 from d0, for Q queries
// (p in each one's scratch), each element one FMA chain in position order; each V chunk is
// loaded once for all Q. kWhole: the chunks are all within d_v, so no load takes the
// out-of-line tail path (whose possible call made clang keep the accumulators on the stack:
// attention at 2048 positions 2x slower).
template <KvElemType kV, int Q, int NC, bool kWhole>
void AccumulateChunks(const AttendArgs* a, int64_t j0, int64_t n, int d0) {
  const AttendArgs& r = a[0];
  auto left = [&](int c) -> int64_t { return kWhole ? 8 : r.d_v - d0 - 8 * c; };
  __m256 acc[Q][NC];
  for (int i = 0; i < Q; ++i) {
    for (int c = 0; c < NC; ++c) acc[i][c] = LoadF(a[i].out + d0 + 8 * c, left(c));
  }
  for (int64_t j = 0; j < n; ++j) {
    const int64_t at = (j0 + j) * r.v_stride + d0;
    if constexpr (kV == KvElemType::kQ8_0) {
      // Groups of chunks in one block (AccumulateV starts NC chunks at a multiple of 8 NC
      // elements: 8 chunks at 64, 4 at 32, 2 at 16), each query's weight times the block's
      // scale once per group, then the codes: fl(p_j d) * code. Same ops for any Q and NC.
      constexpr int kG = NC < 4 ? NC : 4;
      for (int g = 0; g < NC; g += kG) {
        const float d = ScaleQ8(r.v, at + 8 * g);
        __m256 w[Q];
        for (int i = 0; i < Q; ++i) w[i] = _mm256_set1_ps(a[i].scratch[j] * d);
        for (int c = g; c < g + kG; ++c) {
          const __m256 v = CodesQ8(r.v, at + 8 * c);
          for (int i = 0; i < Q; ++i) acc[i][c] = _mm256_fmadd_ps(w[i], v, acc[i][c]);
        }
      }
    } else {
      for (int c = 0; c < NC; ++c) {
        const __m256 v = Load8<kV>(r.v, at + 8 * c, left(c));
        for (int i = 0; i < Q; ++i) {
          acc[i][c] = _mm256_fmadd_ps(_mm256_set1_ps(a[i].scratch[j]), v, acc[i][c]);
        }
      }
    }
  }
  for (int i = 0; i < Q; ++i) {
    for (int c = 0; c < NC; ++c) StoreF(a[i].out + d0 + 8 * c, left(c), acc[i][c]);
  }
}

// The weighted sum of positions [j0, j0 + n) into every output element of Q queries: 8
// accumulators at a time (8 / Q chunks), then the whole chunks left one at a time, then
// the tail chunk.
template <KvElemType kV, int Q>
void AccumulateV(const AttendArgs* a, int64_t j0, int64_t n) {
  constexpr int kNC = 8 / Q;
  const int whole = a[0].d_v / 8;
  int c = 0;
  for (; c + kNC <= whole; c += kNC) AccumulateChunks<kV, Q, kNC, true>(a, j0, n, 8 * c);
  for (; c < whole; ++c) AccumulateChunks<kV, Q, 1, true>(a, j0, n, 8 * c);
  if constexpr (kV != KvElemType::kQ8_0) {  // q8_0 rows are whole blocks
    if (8 * whole < a[0].d_v) AccumulateChunks<kV, Q, 1, false>(a, j0, n, 8 * whole);
  }
}

// out[i] *= c for i < d_v.
void ScaleOut(float* out, int d_v, __m256 c) {
  for (int i = 0; i < d_v; i += 8)
    StoreF(out + i, d_v - i, _mm256_mul_ps(LoadF(out + i, d_v - i), c));
}

// The softmax steps of a tile whose scores are s[0, n): when its maximum raises m, l and the
// output are first multiplied by exp(m - tile max); then s becomes p_j = exp(s_j - m), and l
// grows by their sum.
void FoldTile(const AttendArgs& a, float* s, int64_t n, float& m, float& l) {
  float tile_max = -INFINITY;
  for (int64_t j = 0; j < n; ++j) tile_max = s[j] > tile_max ? s[j] : tile_max;  // exact
  if (tile_max > m) {
    const __m256 c = Exp8(_mm256_set1_ps(m - tile_max));  // 0 for the first tile
    l *= _mm256_cvtss_f32(c);
    ScaleOut(a.out, a.d_v, c);
    m = tile_max;
  }
  __m256 sum = _mm256_setzero_ps();
  const __m256 mv = _mm256_set1_ps(m);
  for (int64_t j = 0; j < n; j += 8) {
    const __m256 keep = _mm256_castsi256_ps(TailMask(n - j));
    const __m256 p = _mm256_and_ps(Exp8(_mm256_sub_ps(LoadF(s + j, n - j), mv)), keep);
    StoreF(s + j, n - j, p);
    sum = _mm256_add_ps(sum, p);
  }
  l += Reduce8(sum);
}

// One query's tiles from position j_begin (a tile edge) to n_pos, continuing its m, l and
// output.
template <KvElemType kK, KvElemType kV>
void Tiles(const AttendArgs& a, int64_t j_begin, float& m, float& l) {
  float* s = a.scratch;
  for (int64_t j0 = j_begin; j0 < a.n_pos; j0 += kAttendTile) {
    const int64_t n = a.n_pos - j0 < kAttendTile ? a.n_pos - j0 : kAttendTile;
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) Scores<kK, 4>(a, j0 + j, s + j);
    for (; j < n; ++j) Scores<kK, 1>(a, j0 + j, s + j);
    FoldTile(a, s, n, m, l);
    AccumulateV<kV, 1>(&a, j0, n);
  }
}

template <KvElemType kK, KvElemType kV>
void Attend(const AttendArgs& a) {
  for (int i = 0; i < a.d_v; i += 8) StoreF(a.out + i, a.d_v - i, _mm256_setzero_ps());
  PrefetchFirstRows(a);  // Scores asks for the rest
  float m = -INFINITY;   // running maximum of the scores
  float l = 0.0f;        // running sum of exp(s_j - m)
  Tiles<kK, kV>(a, 0, m, l);
  ScaleOut(a.out, a.d_v, _mm256_set1_ps(InverseDenominator(a, m, l)));
}

// Several queries over the same rows (AttendManyAvx2). Each query's float ops are exactly
// Attend's for it; only the loads and widenings of K and V are shared.

// Scores of positions [j, j + P) for Q queries: each K chunk is loaded once for all of them.
// Prefetches for `ahead` (a query with the most positions) when it is set.
template <KvElemType kK, int Q, int P>
[[gnu::always_inline]] inline void ScoresJoint(const AttendArgs* a, const AttendArgs* ahead,
                                               int64_t j, int64_t s_at) {
  if (ahead != nullptr) {
    for (int p = 0; p < P; ++p) PrefetchForPosition(*ahead, j + p);
  }
  const AttendArgs& r = a[0];  // the shared rows
  __m256 acc[Q][P];
  for (int i = 0; i < Q; ++i) {
    for (int p = 0; p < P; ++p) acc[i][p] = _mm256_setzero_ps();
  }
  if constexpr (kK == KvElemType::kQ8_0) {
    ScoresQ8<Q, P>(a, j, acc);
  } else {
    const int full = r.d_k / 8 * 8;
    for (int c = 0; c < full; c += 8) {
      __m256 kv[P];
      for (int p = 0; p < P; ++p) kv[p] = Load8<kK>(r.k, (j + p) * r.k_stride + c, 8);
      for (int i = 0; i < Q; ++i) {
        const __m256 qv = _mm256_loadu_ps(a[i].q + c);
        for (int p = 0; p < P; ++p) acc[i][p] = _mm256_fmadd_ps(qv, kv[p], acc[i][p]);
      }
    }
    if (full < r.d_k) {
      __m256 kv[P];
      for (int p = 0; p < P; ++p) {
        kv[p] = Load8<kK>(r.k, (j + p) * r.k_stride + full, r.d_k - full);
      }
      for (int i = 0; i < Q; ++i) {
        const __m256 qv = LoadF(a[i].q + full, r.d_k - full);
        for (int p = 0; p < P; ++p) acc[i][p] = _mm256_fmadd_ps(qv, kv[p], acc[i][p]);
      }
    }
  }
  for (int i = 0; i < Q; ++i) {
    for (int p = 0; p < P; ++p) a[i].scratch[s_at + p] = a[i].scale * Reduce8(acc[i][p]);
  }
}

// The whole tile at j0 for Q queries: Tiles' steps for each, with K and V loaded once.
template <KvElemType kK, KvElemType kV, int Q>
void JointTile(const AttendArgs* a, const AttendArgs* ahead, int64_t j0, float* m, float* l) {
  for (int64_t j = 0; j < kAttendTile; j += 2) ScoresJoint<kK, Q, 2>(a, ahead, j0 + j, j);
  for (int i = 0; i < Q; ++i) FoldTile(a[i], a[i].scratch, kAttendTile, m[i], l[i]);
  AccumulateV<kV, Q>(a, j0, kAttendTile);
}

// n queries over the same rows: each tile that is whole for all of them goes through all of
// them, 4 at a time, while its K and V rows are in L1/L2 (one pass over a head's cache per
// query, as AttendAvx2, streamed it from L3 for every prompt token); then each its own rest.
template <KvElemType kK, KvElemType kV>
void AttendMany(const AttendArgs* a, int n) {
  if (n == 1) return Attend<kK, kV>(a[0]);
  const auto [shared, far] = FindSharedTiles(a, n);
  float m[kAttendGroupMax], l[kAttendGroupMax];
  for (int i = 0; i < n; ++i) {
    for (int e = 0; e < a[i].d_v; e += 8) StoreF(a[i].out + e, a[i].d_v - e, _mm256_setzero_ps());
    m[i] = -INFINITY;
    l[i] = 0.0f;
  }
  PrefetchFirstRows(a[far]);
  for (int64_t j0 = 0; j0 < shared; j0 += kAttendTile) {
    for (int i = 0; i < n; i += 4) {
      const AttendArgs* ahead = i == 0 ? &a[far] : nullptr;  // the first pass brings the rows
      switch (n - i < 4 ? n - i : 4) {
        case 1:
          JointTile<kK, kV, 1>(a + i, ahead, j0, m + i, l + i);
          break;
        case 2:
          JointTile<kK, kV, 2>(a + i, ahead, j0, m + i, l + i);
          break;
        case 3:
          JointTile<kK, kV, 3>(a + i, ahead, j0, m + i, l + i);
          break;
        default:
          JointTile<kK, kV, 4>(a + i, ahead, j0, m + i, l + i);
      }
    }
  }
  for (int i = 0; i < n; ++i) {
    Tiles<kK, kV>(a[i], shared, m[i], l[i]);
    ScaleOut(a[i].out, a[i].d_v, _mm256_set1_ps(InverseDenominator(a[i], m[i], l[i])));
  }
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

void AttendManyAvx2(const AttendArgs* a, int n_q) {
  WithKvTypes(a[0].types, [&]<KvElemType kK, KvElemType kV>() { AttendMany<kK, kV>(a, n_q); });
}

void AttendAvx2(const AttendArgs& args) {
  // A local copy: the compiler may keep its fields in registers (it must reload those of a
  // caller's object around the out-of-line tail loads).
  const AttendArgs a = args;
  WithKvTypes(a.types, [&]<KvElemType kK, KvElemType kV>() { Attend<kK, kV>(a); });
}

}  // namespace mt::kernels
