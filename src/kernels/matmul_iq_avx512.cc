// IQ lattice types (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M), AVX-512 variant
// (F/BW/VL/DQ + VNNI). Compiled with its own -m flags; keeps the rules of matmul_internal.h
// (everything in an anonymous namespace, nothing shared inline). The loops are those of
// matmul_driver.h (decode: a row's super-block at a time, used at once by every token; more
// tokens: register tiles over super-blocks unpacked into L1); this file has the traits.
//
// The integer form (matmul_iq_scalar.cc): x_c = D * L_j * w_c, w_c signed (|w| <= 62),
// L_j odd per 16 elements. Unpack decodes a super-block into u_c = w_c + off, unsigned bytes
// (off = 64 for the signed grids: u in [2, 126]; 9 for IQ1: u in [0, 18]) in element order,
// 64 per vector, by one gather of grid entries per 8 groups (a qword per group of 8; IQ3: a
// dword per half group) and masked negation by the groups' sign bits. Per (row, token) and
// super-block, with the token's codes a (int8), scale da and sums bsum per 16:
//   S (16 x int32, exact) = dpwssd(-off * L_j, bsum_j)                 (the offset's term)
//                         + sum_k dpwssd(maddubs(u_k, a_k), L16_k)      (k = 0..3: 64 each)
//     (maddubs pairs: 2 * 126 * 127 < 2^15, no saturation; L16_k holds each pair's L_j)
//   f = fma(float(S), set1(D * da), f)                                  (16 lanes)
// and y = Reduce16(f) at the end. Each lane of S sums at most 16 products of L * w * a plus
// its share of the offset term, below 2^24, so float(S) is exact.
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

// A super-block of one row, decoded (see the top of the file).
struct alignas(64) UnpackedIq {
  __m512i u[4];    // w + off, elements 64k .. 64k + 63 in u[k]
  __m512i l16[4];  // int16 lane m of l16[k]: L of elements 64k + 2m, 64k + 2m + 1
  __m512i loff;    // int16 lanes 0..15: -off * L_j; lanes 16..31: 0
  float d;         // D
};

// ---- Decoding helpers ---------------------------------------------------------------------

// 7-bit sign fields (bytes) with their parity as bit 7: the 8 sign bits of each group.
__m256i WithParity(__m256i v7) {
  // Bit 7 set for nibbles of odd parity.
  const __m256i lut =
      _mm256_setr_epi8(0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0, 0,
                       -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i lo = _mm256_and_si256(v7, low4);
  const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v7, 4), low4);
  return _mm256_ternarylogic_epi32(v7, _mm256_shuffle_epi8(lut, lo), _mm256_shuffle_epi8(lut, hi),
                                   0xF6);  // a | (b ^ c)
}

// The four 7-bit sign fields of each of 8 words (bits 7l .. 7l + 6 -> byte l), as the groups'
// 32 sign bytes (parity added).
__m256i SignsOf7BitWords(__m256i w) {
  const __m256i f0 = _mm256_and_si256(w, _mm256_set1_epi32(0x7F));
  const __m256i f1 = _mm256_and_si256(_mm256_slli_epi32(w, 1), _mm256_set1_epi32(0x7F00));
  const __m256i f2 = _mm256_and_si256(_mm256_slli_epi32(w, 2), _mm256_set1_epi32(0x7F0000));
  const __m256i f3 = _mm256_and_si256(_mm256_slli_epi32(w, 3), _mm256_set1_epi32(0x7F000000));
  return WithParity(_mm256_or_si256(_mm256_or_si256(f0, f1), _mm256_or_si256(f2, f3)));
}

// L16 (int16 L per 16 elements) from L per 32 elements in 8 dwords.
__m256i L16From32(__m256i l32) { return _mm256_or_si256(l32, _mm256_slli_epi32(l32, 16)); }

// L16 from 8 bytes of two 4-bit ls each (low nibble: the first 16 of each 32): 2 ls + 1.
__m256i L16FromNibbles(const uint8_t* p) {
  const __m128i w = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m128i lo = _mm_and_si128(w, _mm_set1_epi16(0x0F)), hi = _mm_srli_epi16(w, 4);
  const __m256i ls = _mm256_set_m128i(_mm_unpackhi_epi16(lo, hi), _mm_unpacklo_epi16(lo, hi));
  return _mm256_add_epi16(_mm256_add_epi16(ls, ls), _mm256_set1_epi16(1));
}

// Bytes 8k .. 8k + 7 of v, zero-extended to 8 dwords.
__m256i Bytes8(__m256i v, int k) {
  const __m128i h = k < 2 ? _mm256_castsi256_si128(v) : _mm256_extracti128_si256(v, 1);
  return _mm256_cvtepu8_epi32(k % 2 == 0 ? h : _mm_unpackhi_epi64(h, h));
}

// 128-bit lane k of v.
__m128i Lane128(__m512i v, int k) {
  switch (k) {
    case 0:
      return _mm512_castsi512_si128(v);
    case 1:
      return _mm512_extracti32x4_epi32(v, 1);
    case 2:
      return _mm512_extracti32x4_epi32(v, 2);
    default:
      return _mm512_extracti32x4_epi32(v, 3);
  }
}

// Fills l16 and loff from L16 (int16 L per 16 elements) for offset `off`.
void SetScales(__m256i l16, int off, UnpackedIq* u) {
  const __m512i wide = _mm512_zextsi256_si512(l16);
  for (int k = 0; k < 4; ++k) {
    // int16 lane m of vector k: sub-block 4k + m / 8.
    const __m512i idx =
        _mm512_add_epi16(_mm512_set1_epi16(static_cast<int16_t>(4 * k)),
                         _mm512_srli_epi16(_mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22,
                                                            21, 20, 19, 18, 17, 16, 15, 14, 13, 12,
                                                            11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                           3));
    u->l16[k] = _mm512_permutexvar_epi16(idx, wide);
  }
  u->loff = _mm512_zextsi256_si512(
      _mm256_mullo_epi16(l16, _mm256_set1_epi16(static_cast<int16_t>(-off))));
}

// u from the 4 vectors of biased grid bytes b = 64 + g and the 32 sign bytes (group order):
// b where the sign bit is clear, 128 - b = 64 - g where it is set.
void ApplySigns(const __m512i b[4], __m256i signs, UnpackedIq* u) {
  // The sign bytes are the masks themselves, 8 groups = 64 bits per vector. Through memory
  // (volatile: else the compiler forwards the store into vmovq / vpextrq / kmovq from
  // registers, ~7 % slower in gemv_hot iq2_xxs): one store, then 4 kmovq loads.
  alignas(32) volatile uint64_t m[4];
  _mm256_store_si256(const_cast<__m256i*>(reinterpret_cast<volatile __m256i*>(m)), signs);
  const __m512i c128 = _mm512_set1_epi8(static_cast<char>(128));
  for (int k = 0; k < 4; ++k)
    u->u[k] = _mm512_mask_sub_epi8(b[k], _cvtu64_mask64(m[k]), c128, b[k]);
}

// 8 entries of an 8-byte grid.
__m512i Gather8(__m256i idx, const uint64_t* grid) {
  return _mm512_i32gather_epi64(idx, reinterpret_cast<const long long*>(grid), 8);
}

// 16 entries of a 4-byte grid.
__m512i Gather16(__m512i idx, const uint32_t* grid) {
  return _mm512_i32gather_epi32(idx, reinterpret_cast<const int*>(grid), 4);
}

// IQ1: u = 8 (g + 1) + (delta positive ? 2 : 0) = w + 9; pos8 bit m: group m's delta > 0.
__m512i Iq1Codes(__m256i idx, __mmask8 pos8) {
  const __m512i g = Gather8(idx, kIq1SGridBiased.entry);
  return _mm512_add_epi8(g, _mm512_maskz_mov_epi64(pos8, _mm512_set1_epi8(2)));
}

// ---- Per-type decoding of super-block s of a row --------------------------------------------

[[gnu::always_inline]] inline void UnpackIq2Xxs(const uint8_t* p, UnpackedIq* u) {
  u->d = F16(p) * 0.125f;
  const __m512i q = _mm512_loadu_si512(p + 2);  // 8 x (index word, sign word)
  // Even and odd dwords (one vpermd each; vpmovqd is two uops).
  const __m256i idx = _mm512_castsi512_si256(_mm512_permutexvar_epi32(
      _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0, 0, 0, 0, 0), q));
  const __m256i sw = _mm512_castsi512_si256(_mm512_permutexvar_epi32(
      _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 0, 0, 0, 0, 0, 0, 0, 0), q));
  // L = 2 ls + 1 with ls in bits 28..31: (w >> 27) is 2 ls plus a sign bit, which | 1 covers.
  const __m256i l32 = _mm256_or_si256(_mm256_srli_epi32(sw, 27), _mm256_set1_epi32(1));
  SetScales(L16From32(l32), 64, u);
  __m512i g[4];
  for (int k = 0; k < 4; ++k) g[k] = Gather8(Bytes8(idx, k), kIq2XxsGridBiased.entry);
  ApplySigns(g, SignsOf7BitWords(sw), u);
}

[[gnu::always_inline]] inline void UnpackIq2Xs(const uint8_t* p, UnpackedIq* u) {
  u->d = F16(p) * 0.125f;
  const __m512i q = _mm512_loadu_si512(p + 2);  // 32 words: 9-bit index | 7-bit signs << 9
  SetScales(L16FromNibbles(p + 66), 64, u);
  __m512i g[4];
  for (int k = 0; k < 4; ++k) {
    const __m256i idx =
        _mm256_and_si256(_mm256_cvtepu16_epi32(Lane128(q, k)), _mm256_set1_epi32(511));
    g[k] = Gather8(idx, kIq2XsGridBiased.entry);
  }
  ApplySigns(g, WithParity(_mm512_cvtepi16_epi8(_mm512_srli_epi16(q, 9))), u);
}

[[gnu::always_inline]] inline void UnpackIq2S(const uint8_t* p, UnpackedIq* u) {
  u->d = F16(p) * 0.125f;
  const __m256i low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
  SetScales(L16FromNibbles(p + 74), 64, u);
  const __m256i shifts = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  __m512i g[4];
  for (int k = 0; k < 4; ++k) {
    // Groups 8k .. 8k + 7: high index bits 2 (G % 4) of qh[G / 4] = bits 2m of qh[2k .. 2k + 1].
    const __m256i qh = _mm256_set1_epi32(Load16(p + 66 + 2 * k));
    const __m256i high = _mm256_and_si256(_mm256_srlv_epi32(qh, shifts), _mm256_set1_epi32(3));
    g[k] =
        Gather8(_mm256_or_si256(Bytes8(low, k), _mm256_slli_epi32(high, 8)), kIq2SGridBiased.entry);
  }
  ApplySigns(g, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 34)), u);
}

[[gnu::always_inline]] inline void UnpackIq3Xxs(const uint8_t* p, UnpackedIq* u) {
  u->d = F16(p) * 0.25f;
  const __m256i sw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 66));
  const __m256i ls = _mm256_srli_epi32(sw, 28);
  SetScales(L16From32(_mm256_add_epi32(_mm256_add_epi32(ls, ls), _mm256_set1_epi32(1))), 64, u);
  __m512i g[4];
  for (int k = 0; k < 4; ++k) {
    const __m512i idx =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 + 16 * k)));
    g[k] = Gather16(idx, kIq3XxsGridBiased.entry);
  }
  ApplySigns(g, SignsOf7BitWords(sw), u);
}

[[gnu::always_inline]] inline void UnpackIq3S(const uint8_t* p, UnpackedIq* u) {
  u->d = F16(p);
  const __m256i sc = _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(Load32(p + 106))),
                                       _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
  const __m256i ls = _mm256_and_si256(sc, _mm256_set1_epi32(0x0F));
  SetScales(L16From32(_mm256_add_epi32(_mm256_add_epi32(ls, ls), _mm256_set1_epi32(1))), 64, u);
  __m512i g[4];
  for (int k = 0; k < 4; ++k) {
    // Indices 16k .. 16k + 15: the 9th bits are the 16 bits of qh[2k .. 2k + 1].
    const __m512i low =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 + 16 * k)));
    const __m512i idx = _mm512_mask_or_epi32(low, _cvtu32_mask16(Load16(p + 66 + 2 * k)), low,
                                             _mm512_set1_epi32(256));
    g[k] = Gather16(idx, kIq3SGridBiased.entry);
  }
  ApplySigns(g, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 74)), u);
}

[[gnu::always_inline]] inline void UnpackIq1S(const uint8_t* p, UnpackedIq* u) {
  u->d = F16(p) * 0.125f;
  const __m128i qh = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 34));  // 8 words
  const __m256i ls =
      _mm256_and_si256(_mm256_srli_epi32(_mm256_cvtepu16_epi32(qh), 12), _mm256_set1_epi32(7));
  SetScales(L16From32(_mm256_add_epi32(_mm256_add_epi32(ls, ls), _mm256_set1_epi32(1))), 9, u);
  // All 32 indices at once, as int16: qs[G] | ((qh[G / 4] >> 3 (G % 4)) & 7) << 8.
  const __m512i g4 = _mm512_srli_epi16(  // int16 lane G: G / 4
      _mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13,
                       12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
      2);
  const __m512i qh32 = _mm512_permutexvar_epi16(g4, _mm512_castsi128_si512(qh));  // qh[G / 4]
  const __m512i shift = _mm512_set4_epi32(0x00090006, 0x00030000, 0x00090006, 0x00030000);
  const __m512i high = _mm512_and_si512(_mm512_srlv_epi16(qh32, shift), _mm512_set1_epi16(7));
  const __m512i idx = _mm512_or_si512(
      _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2))),
      _mm512_slli_epi16(high, 8));
  const uint32_t neg = _cvtmask32_u32(_mm512_movepi16_mask(qh32));  // bit G: delta < 0
  for (int k = 0; k < 4; ++k) {
    const __mmask8 pos = static_cast<__mmask8>(~(neg >> (8 * k)));
    u->u[k] = Iq1Codes(_mm256_cvtepu16_epi32(Lane128(idx, k)), pos);
  }
}

[[gnu::always_inline]] inline void UnpackIq1M(const uint8_t* p, UnpackedIq* u) {
  uint16_t s[4];
  std::memcpy(s, p + 48, 8);
  const uint16_t d = static_cast<uint16_t>((s[0] >> 12) | ((s[1] >> 8) & 0x00F0) |
                                           ((s[2] >> 4) & 0x0F00) | (s[3] & 0xF000));
  u->d = _cvtsh_ss(d) * 0.125f;
  // L16 lane j = 2 ((s[j / 4] >> 3 (j % 4)) & 7) + 1.
  const __m256i sw = _mm256_permutexvar_epi16(
      _mm256_setr_epi16(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
      _mm256_castsi128_si256(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 48))));
  const __m256i ls = _mm256_and_si256(
      _mm256_srlv_epi16(sw, _mm256_setr_epi16(0, 3, 6, 9, 0, 3, 6, 9, 0, 3, 6, 9, 0, 3, 6, 9)),
      _mm256_set1_epi16(7));
  SetScales(_mm256_add_epi16(_mm256_add_epi16(ls, ls), _mm256_set1_epi16(1)), 9, u);
  const __m256i low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  for (int k = 0; k < 4; ++k) {
    // Group 8k + m: the nibble 4m of qh bytes 4k .. 4k + 3 (3 high index bits, delta sign).
    const __m256i nib = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(Load32(p + 32 + 4 * k))), shifts),
        _mm256_set1_epi32(0x0F));
    const __m256i idx = _mm256_or_si256(
        Bytes8(low, k), _mm256_slli_epi32(_mm256_and_si256(nib, _mm256_set1_epi32(7)), 8));
    const __mmask8 neg = _mm256_test_epi32_mask(nib, _mm256_set1_epi32(8));
    u->u[k] = Iq1Codes(idx, static_cast<__mmask8>(~neg));
  }
}

// ---- Traits -------------------------------------------------------------------------------

template <GgmlType kType>
struct IqTraits : Acc512 {
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
                                          __m512 (&f)[R][T]) {
    for (int t = 0; t < T; ++t) {
      const ActBlockQ8K* a = k.q8k(t, s);
      const __m512i bsum =
          _mm512_zextsi256_si512(_mm256_load_si256(reinterpret_cast<const __m256i*>(a->bsum)));
      __m512i av[4];
      for (int q = 0; q < 4; ++q) av[q] = _mm512_load_si512(a->qs + 64 * q);
      for (int i = 0; i < R; ++i) {
        // Two chains (even and odd vectors), joined at the end: the sum is exact either way.
        __m512i s0 = _mm512_dpwssd_epi32(_mm512_setzero_si512(), u[i]->loff, bsum);
        __m512i s1 = _mm512_dpwssd_epi32(_mm512_setzero_si512(),
                                         _mm512_maddubs_epi16(u[i]->u[1], av[1]), u[i]->l16[1]);
        s0 = _mm512_dpwssd_epi32(s0, _mm512_maddubs_epi16(u[i]->u[0], av[0]), u[i]->l16[0]);
        s0 = _mm512_dpwssd_epi32(s0, _mm512_maddubs_epi16(u[i]->u[2], av[2]), u[i]->l16[2]);
        s1 = _mm512_dpwssd_epi32(s1, _mm512_maddubs_epi16(u[i]->u[3], av[3]), u[i]->l16[3]);
        const __m512i sum = _mm512_add_epi32(s0, s1);
        f[i][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(u[i]->d * a->d), f[i][t]);
      }
    }
  }
};

}  // namespace

bool MatMulIqAvx512(const WeightView& w, const ActView& a, float* y, int64_t y_stride, int64_t r0,
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
