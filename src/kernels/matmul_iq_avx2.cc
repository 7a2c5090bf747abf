// IQ lattice types (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M), AVX2 variant (AVX2 +
// FMA + F16C). Compiled with its own -m flags; keeps the rules of matmul_internal.h
// (everything in an anonymous namespace, nothing shared inline). The loops are those of
// matmul_driver.h; this file has the traits.
//
// The integer form and the unsigned codes u = w + off are those of matmul_iq_avx512.cc, 32
// per vector here. Grid entries are read by scalar loads (AVX2 gathers were slower than
// scalar loads on the CPUs llama.cpp measured, and are microcoded slowly on many Intel
// parts), signs by a byte shuffle of each group's sign byte to its 8 elements. Per (row,
// token) and super-block:
//   S (8 x int32, exact) = madd(-off * L, bsum) + sum_c madd(maddubs(u_c, a_c), L16_c)
//     (c = 0..7: 32 elements each; maddubs pairs below 2^15 as on AVX-512)
//   f = fma(float(S), set1(D * da), f)                          (8 lanes)
// and y = Reduce8(f) at the end.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/lane_sum.h"
#include "kernels/matmul_driver.h"
#include "kernels/matmul_internal.h"
#include "quant/iq_grids.h"

namespace mt::kernels {
namespace {

float F16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

uint16_t Load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

uint32_t Load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

__m256i LoadU256(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

struct alignas(32) UnpackedIq {
  __m256i u[8];    // w + off, elements 32c .. 32c + 31 in u[c]
  __m256i l16[8];  // int16 lane m of l16[c]: L of elements 32c + 2m, 32c + 2m + 1
  __m256i loff;    // int16: -off * L_j
  float d;         // D
};

// ---- Decoding helpers ---------------------------------------------------------------------

// 7-bit sign fields (bytes) with their parity as bit 7.
__m256i WithParity(__m256i v7) {
  const __m256i lut =
      _mm256_setr_epi8(0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0, 0,
                       -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(v7, low4));
  const __m256i hi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v7, 4), low4));
  return _mm256_or_si256(v7, _mm256_xor_si256(lo, hi));
}

// The four 7-bit sign fields of each of 8 words, as 32 sign bytes (parity added).
__m256i SignsOf7BitWords(__m256i w) {
  const __m256i f0 = _mm256_and_si256(w, _mm256_set1_epi32(0x7F));
  const __m256i f1 = _mm256_and_si256(_mm256_slli_epi32(w, 1), _mm256_set1_epi32(0x7F00));
  const __m256i f2 = _mm256_and_si256(_mm256_slli_epi32(w, 2), _mm256_set1_epi32(0x7F0000));
  const __m256i f3 = _mm256_and_si256(_mm256_slli_epi32(w, 3), _mm256_set1_epi32(0x7F000000));
  return WithParity(_mm256_or_si256(_mm256_or_si256(f0, f1), _mm256_or_si256(f2, f3)));
}

__m256i L16From32(__m256i l32) { return _mm256_or_si256(l32, _mm256_slli_epi32(l32, 16)); }

// 2 ls + 1 in int32 (Odd32) or int16 (Odd16) lanes.
__m256i Odd32(__m256i ls) {
  return _mm256_or_si256(_mm256_add_epi32(ls, ls), _mm256_set1_epi32(1));
}
__m256i Odd16(__m256i ls) {
  return _mm256_or_si256(_mm256_add_epi16(ls, ls), _mm256_set1_epi16(1));
}

// L16 from 8 bytes of two 4-bit ls each (low nibble: the first 16 of each 32).
__m256i L16FromNibbles(const uint8_t* p) {
  const __m128i w = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m128i lo = _mm_and_si128(w, _mm_set1_epi16(0x0F)), hi = _mm_srli_epi16(w, 4);
  return Odd16(_mm256_set_m128i(_mm_unpackhi_epi16(lo, hi), _mm_unpacklo_epi16(lo, hi)));
}

// vpshufb masks: kPairMasks[p] fills the low 128 bits with int16 lane 2p and the high 128 bits
// with lane 2p + 1 of a vector holding 8 int16 values in both halves.
alignas(32) constexpr int8_t kPairMasks[4][32] = {
#define MT_PAIR(x) x, x + 1, x, x + 1, x, x + 1, x, x + 1, x, x + 1, x, x + 1, x, x + 1, x, x + 1
    {MT_PAIR(0), MT_PAIR(2)},
    {MT_PAIR(4), MT_PAIR(6)},
    {MT_PAIR(8), MT_PAIR(10)},
    {MT_PAIR(12), MT_PAIR(14)},
#undef MT_PAIR
};

// Fills l16 and loff from L16 (int16 L per 16 elements) for offset `off`.
void SetScales(__m256i l16, int off, UnpackedIq* u) {
  const __m256i first8 = _mm256_permute2x128_si256(l16, l16, 0x00);  // L0..7, twice
  const __m256i last8 = _mm256_permute2x128_si256(l16, l16, 0x11);   // L8..15, twice
  for (int c = 0; c < 8; ++c) {
    const __m256i mask = _mm256_load_si256(reinterpret_cast<const __m256i*>(kPairMasks[c % 4]));
    u->l16[c] = _mm256_shuffle_epi8(c < 4 ? first8 : last8, mask);
  }
  u->loff = _mm256_mullo_epi16(l16, _mm256_set1_epi16(static_cast<int16_t>(-off)));
}

// u_c from biased grid bytes b = 64 + g of elements 32c .. 32c + 31 and the 32 sign bytes of
// the super-block: b where the element's sign bit is clear, 128 - b = 64 - g where it is set.
__m256i Signed32(__m256i b, __m256i signs, int c) {
  const __m256i spread = _mm256_shuffle_epi8(  // byte i <- sign byte 4c + i / 8
      _mm256_permutevar8x32_epi32(signs, _mm256_set1_epi32(c)),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                       3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i neg = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_blendv_epi8(b, _mm256_sub_epi8(_mm256_set1_epi8(static_cast<char>(128)), b), neg);
}

void ApplySigns(const __m256i b[8], __m256i signs, UnpackedIq* u) {
  for (int c = 0; c < 8; ++c) u->u[c] = Signed32(b[c], signs, c);
}

// Four entries of an 8-byte grid.
__m256i Grid4(const uint64_t* grid, int i0, int i1, int i2, int i3) {
  return _mm256_set_epi64x(static_cast<int64_t>(grid[i3]), static_cast<int64_t>(grid[i2]),
                           static_cast<int64_t>(grid[i1]), static_cast<int64_t>(grid[i0]));
}

// Eight entries of a 4-byte grid, indices idx[0..7].
__m256i Grid8(const uint32_t* grid, const int* idx) {
  return _mm256_setr_epi32(static_cast<int>(grid[idx[0]]), static_cast<int>(grid[idx[1]]),
                           static_cast<int>(grid[idx[2]]), static_cast<int>(grid[idx[3]]),
                           static_cast<int>(grid[idx[4]]), static_cast<int>(grid[idx[5]]),
                           static_cast<int>(grid[idx[6]]), static_cast<int>(grid[idx[7]]));
}

// The odd (sign) dwords of IQ2_XXS's 64 bytes of qs, in block order.
__m256i SignWords(const uint8_t* qs) {
  const __m256 q0 = _mm256_castsi256_ps(LoadU256(qs)), q1 = _mm256_castsi256_ps(LoadU256(qs + 32));
  // shuffle_ps works per 128-bit lane: blocks 0 1 4 5 | 2 3 6 7, put in order by the permute.
  return _mm256_permute4x64_epi64(_mm256_castps_si256(_mm256_shuffle_ps(q0, q1, 0xDD)), 0xD8);
}

// ---- Per-type decoding ------------------------------------------------------------------

[[gnu::always_inline]] inline void UnpackIq2Xxs(const uint8_t* p, UnpackedIq* u) {
  u->d = F16(p) * 0.125f;
  const __m256i sw = SignWords(p + 2);
  SetScales(L16From32(_mm256_or_si256(_mm256_srli_epi32(sw, 27), _mm256_set1_epi32(1))), 64, u);
  __m256i b[8];
  const uint8_t* q = p + 2;
  for (int c = 0; c < 8; ++c) {
    b[c] = Grid4(kIq2XxsGridBiased.entry, q[8 * c], q[8 * c + 1], q[8 * c + 2], q[8 * c + 3]);
  }
  ApplySigns(b, SignsOf7BitWords(sw), u);
}

[[gnu::always_inline]] inline void UnpackIq2Xs(const uint8_t* p, UnpackedIq* u) {
  u->d = F16(p) * 0.125f;
  SetScales(L16FromNibbles(p + 66), 64, u);
  uint16_t qs[32];
  std::memcpy(qs, p + 2, 64);
  __m256i b[8];
  for (int c = 0; c < 8; ++c) {
    const uint16_t* g = qs + 4 * c;
    b[c] = Grid4(kIq2XsGridBiased.entry, g[0] & 511, g[1] & 511, g[2] & 511, g[3] & 511);
  }
  const __m256i s0 = _mm256_srli_epi16(LoadU256(p + 2), 9),
                s1 = _mm256_srli_epi16(LoadU256(p + 34), 9);
  const __m256i fields = _mm256_permute4x64_epi64(_mm256_packus_epi16(s0, s1), 0xD8);
  ApplySigns(b, WithParity(fields), u);
}

[[gnu::always_inline]] inline void UnpackIq2S(const uint8_t* p, UnpackedIq* u) {
  u->d = F16(p) * 0.125f;
  SetScales(L16FromNibbles(p + 74), 64, u);
  const uint8_t* qs = p + 2;
  const uint8_t* qh = p + 66;
  __m256i b[8];
  for (int c = 0; c < 8; ++c) {  // groups 4c .. 4c + 3: high bits 2l of qh[c]
    const int h = qh[c];
    b[c] = Grid4(kIq2SGridBiased.entry, qs[4 * c] | (h & 3) << 8, qs[4 * c + 1] | (h >> 2 & 3) << 8,
                 qs[4 * c + 2] | (h >> 4 & 3) << 8, qs[4 * c + 3] | (h >> 6 & 3) << 8);
  }
  ApplySigns(b, LoadU256(p + 34), u);
}

[[gnu::always_inline]] inline void UnpackIq3Xxs(const uint8_t* p, UnpackedIq* u) {
  u->d = F16(p) * 0.25f;
  const __m256i sw = LoadU256(p + 66);
  SetScales(L16From32(Odd32(_mm256_srli_epi32(sw, 28))), 64, u);
  __m256i b[8];
  for (int c = 0; c < 8; ++c) {
    int idx[8];
    for (int m = 0; m < 8; ++m) idx[m] = p[2 + 8 * c + m];
    b[c] = Grid8(kIq3XxsGridBiased.entry, idx);
  }
  ApplySigns(b, SignsOf7BitWords(sw), u);
}

[[gnu::always_inline]] inline void UnpackIq3S(const uint8_t* p, UnpackedIq* u) {
  u->d = F16(p);
  const __m256i sc = _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(Load32(p + 106))),
                                       _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
  SetScales(L16From32(Odd32(_mm256_and_si256(sc, _mm256_set1_epi32(0x0F)))), 64, u);
  __m256i b[8];
  for (int c = 0; c < 8; ++c) {  // indices 8c .. 8c + 7: 9th bits = the bits of qh[c]
    const int h = p[66 + c];
    int idx[8];
    for (int m = 0; m < 8; ++m) idx[m] = p[2 + 8 * c + m] | ((h >> m) & 1) << 8;
    b[c] = Grid8(kIq3SGridBiased.entry, idx);
  }
  ApplySigns(b, LoadU256(p + 74), u);
}

// IQ1: u = 8 (g + 1) + (delta positive ? 2 : 0) = w + 9, for groups 4c .. 4c + 3.
__m256i Iq1Codes(const int idx[4], const bool neg[4]) {
  const __m256i g = Grid4(kIq1SGridBiased.entry, idx[0], idx[1], idx[2], idx[3]);
  const int64_t two = 0x0202020202020202;
  return _mm256_add_epi8(
      g, _mm256_set_epi64x(neg[3] ? 0 : two, neg[2] ? 0 : two, neg[1] ? 0 : two, neg[0] ? 0 : two));
}

[[gnu::always_inline]] inline void UnpackIq1S(const uint8_t* p, UnpackedIq* u) {
  u->d = F16(p) * 0.125f;
  const __m256i qh =
      _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 34)));
  SetScales(L16From32(Odd32(_mm256_and_si256(_mm256_srli_epi32(qh, 12), _mm256_set1_epi32(7)))), 9,
            u);
  for (int c = 0; c < 8; ++c) {
    const int h = Load16(p + 34 + 2 * c);
    const bool neg = (h & 0x8000) != 0;
    const int idx[4] = {p[2 + 4 * c] | (h & 7) << 8, p[3 + 4 * c] | (h >> 3 & 7) << 8,
                        p[4 + 4 * c] | (h >> 6 & 7) << 8, p[5 + 4 * c] | (h >> 9 & 7) << 8};
    const bool negs[4] = {neg, neg, neg, neg};
    u->u[c] = Iq1Codes(idx, negs);
  }
}

[[gnu::always_inline]] inline void UnpackIq1M(const uint8_t* p, UnpackedIq* u) {
  uint16_t s[4];
  std::memcpy(s, p + 48, 8);
  const uint16_t d = static_cast<uint16_t>((s[0] >> 12) | ((s[1] >> 8) & 0x00F0) |
                                           ((s[2] >> 4) & 0x0F00) | (s[3] & 0xF000));
  u->d = _cvtsh_ss(d) * 0.125f;
  alignas(32) int16_t l[16];
  for (int j = 0; j < 16; ++j)
    l[j] = static_cast<int16_t>(2 * ((s[j / 4] >> (3 * (j % 4))) & 7) + 1);
  SetScales(_mm256_load_si256(reinterpret_cast<const __m256i*>(l)), 9, u);
  for (int c = 0; c < 8; ++c) {  // groups 4c .. 4c + 3: nibbles of qh[2c], qh[2c + 1]
    const int h0 = p[32 + 2 * c], h1 = p[33 + 2 * c];
    const int nib[4] = {h0 & 15, h0 >> 4, h1 & 15, h1 >> 4};
    int idx[4];
    bool neg[4];
    for (int m = 0; m < 4; ++m) {
      idx[m] = p[4 * c + m] | (nib[m] & 7) << 8;
      neg[m] = (nib[m] & 8) != 0;
    }
    u->u[c] = Iq1Codes(idx, neg);
  }
}

// ---- Traits -------------------------------------------------------------------------------

template <GgmlType kType>
struct IqTraits : Acc256 {
  static constexpr int64_t kStep = 256;
  static constexpr int kRows = 2, kToks = 2;
  static constexpr int kDirectRows = 1;
  static constexpr int64_t kPrefetchAhead = 2048;
  using Unpacked = UnpackedIq;

  static constexpr int64_t kBytes = kType == GgmlType::kIQ2_XXS   ? 66
                                    : kType == GgmlType::kIQ2_XS  ? 74
                                    : kType == GgmlType::kIQ2_S   ? 82
                                    : kType == GgmlType::kIQ3_XXS ? 98
                                    : kType == GgmlType::kIQ3_S   ? 110
                                    : kType == GgmlType::kIQ1_S   ? 50
                                                                  : 56;

  static void Unpack(const RowRef& rr, int64_t s, Unpacked* u) {
    const uint8_t* p = rr.row + s * kBytes;
    if constexpr (kType == GgmlType::kIQ2_XXS) UnpackIq2Xxs(p, u);
    if constexpr (kType == GgmlType::kIQ2_XS) UnpackIq2Xs(p, u);
    if constexpr (kType == GgmlType::kIQ2_S) UnpackIq2S(p, u);
    if constexpr (kType == GgmlType::kIQ3_XXS) UnpackIq3Xxs(p, u);
    if constexpr (kType == GgmlType::kIQ3_S) UnpackIq3S(p, u);
    if constexpr (kType == GgmlType::kIQ1_S) UnpackIq1S(p, u);
    if constexpr (kType == GgmlType::kIQ1_M) UnpackIq1M(p, u);
  }

  template <int R, int T>
  [[gnu::always_inline]] static void Step(const Unpacked* const* u, const Toks& k, int64_t s,
                                          __m256 (&f)[R][T]) {
    const ActBlockQ8K* a[T];
    __m256i acc[R][T];
    for (int t = 0; t < T; ++t) {
      a[t] = k.q8k(t, s);
      const __m256i bsum = _mm256_load_si256(reinterpret_cast<const __m256i*>(a[t]->bsum));
      for (int i = 0; i < R; ++i) acc[i][t] = _mm256_madd_epi16(u[i]->loff, bsum);
    }
    auto chunk = [&](int c) {
      for (int t = 0; t < T; ++t) {
        const __m256i av = _mm256_load_si256(reinterpret_cast<const __m256i*>(a[t]->qs + 32 * c));
        for (int i = 0; i < R; ++i) {
          const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(u[i]->u[c], av), u[i]->l16[c]);
          acc[i][t] = _mm256_add_epi32(acc[i][t], p);
        }
      }
    };
    // As Q6K's tiles in matmul_avx2.cc: unrolled, a tile of several rows or tokens runs out of
    // registers (clang hoists every chunk's loads and spills them; kernels_bench gemm16 ran at
    // 52 GOP/s), while one (row, token) is faster unrolled.
    if constexpr (R * T == 1) {
      for (int c = 0; c < 8; ++c) chunk(c);
    } else {
#pragma nounroll
      for (int c = 0; c < 8; ++c) chunk(c);
    }
    for (int t = 0; t < T; ++t) {
      for (int i = 0; i < R; ++i) {
        const __m256 dd = _mm256_set1_ps(u[i]->d * a[t]->d);
        f[i][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[i][t]), dd, f[i][t]);
      }
    }
  }
};

}  // namespace

bool MatMulIqAvx2(const WeightView& w, const ActView& a, float* y, int64_t y_stride, int64_t r0,
                  int64_t r1) {
  switch (w.type) {
    case GgmlType::kIQ2_XXS:
      Run<IqTraits<GgmlType::kIQ2_XXS>>(w, a, y, y_stride, r0, r1);
      return true;
    case GgmlType::kIQ2_XS:
      Run<IqTraits<GgmlType::kIQ2_XS>>(w, a, y, y_stride, r0, r1);
      return true;
    case GgmlType::kIQ2_S:
      Run<IqTraits<GgmlType::kIQ2_S>>(w, a, y, y_stride, r0, r1);
      return true;
    case GgmlType::kIQ3_XXS:
      Run<IqTraits<GgmlType::kIQ3_XXS>>(w, a, y, y_stride, r0, r1);
      return true;
    case GgmlType::kIQ3_S:
      Run<IqTraits<GgmlType::kIQ3_S>>(w, a, y, y_stride, r0, r1);
      return true;
    case GgmlType::kIQ1_S:
      Run<IqTraits<GgmlType::kIQ1_S>>(w, a, y, y_stride, r0, r1);
      return true;
    case GgmlType::kIQ1_M:
      Run<IqTraits<GgmlType::kIQ1_M>>(w, a, y, y_stride, r0, r1);
      return true;
    default:
      return false;
  }
}

}  // namespace mt::kernels
