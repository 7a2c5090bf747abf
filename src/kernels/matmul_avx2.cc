// AVX2 variant (AVX2 + FMA + F16C; no VNNI, so it runs on Haswell / Zen 1 and later).
// Compiled with its own -m flags; keeps the rules of matmul_internal.h (everything in an
// anonymous namespace, nothing shared inline).
//
// The loops are in matmul_driver.h; this file has the per-format traits. Steps: 256 columns
// for the K-quants, 32 (one block) for the 32-block formats, 8 for F32/F16/BF16. Integer products
// use vpmaddubsw (u8 x s8, pairs summed to int16) and vpmaddwd (int16 pairs summed to int32); the
// code ranges keep vpmaddubsw from saturating (noted at each use). Per (row, token) and step the
// float ops are fixed (listed at each Step) into one 8-lane accumulator, summed in a fixed tree at
// the end (Reduce8); Q4_K / Q5_K instead fold each super-block's exact integer sums into one
// float per (row, token), so that their 16-row panel kernels (the last section) give the same
// bits as their rows.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/lane_sum.h"
#include "kernels/matmul_driver.h"
#include "kernels/matmul_internal.h"

namespace mt::kernels {
namespace {

// ---- Small helpers ------------------------------------------------------------------------

float F16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

uint32_t Load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

__m256i LoadU256(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Sum of 8 int32 lanes (exact, order-free).
int32_t HSum8(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// ---- Activation quantization (bit-identical to the scalar variant) ------------------------

// Codes of 8 floats times id, clamped like the scalar Code() and rounded half to even, as
// int32 lanes.
__m256i Codes8(__m256 x, __m256 id) {
  __m256 v = _mm256_mul_ps(x, id);
  v = _mm256_max_ps(v, _mm256_set1_ps(-127.0f));  // (v > -127) ? v : -127
  v = _mm256_min_ps(v, _mm256_set1_ps(127.0f));   // (v < 127) ? v : 127
  return _mm256_cvtps_epi32(v);
}

// 32 codes as bytes in element order.
__m256i Codes32(const float* x, __m256 id) {
  const __m256i a = Codes8(_mm256_loadu_ps(x), id), b = Codes8(_mm256_loadu_ps(x + 8), id);
  const __m256i c = Codes8(_mm256_loadu_ps(x + 16), id), d = Codes8(_mm256_loadu_ps(x + 24), id);
  // packs work within 128-bit lanes: the bytes come out as a0 b0 c0 d0 a1 b1 c1 d1 (4 each);
  // the dword permute puts them back in order. Values are in [-127, 127]: no saturation.
  const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
  return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd),
                                     _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

float AbsMax(const float* x, int n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8)
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
  __m128 r = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  r = _mm_max_ps(r, _mm_movehl_ps(r, r));
  r = _mm_max_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);  // order-free: max is exact
}

void QuantizeQ8_0(const float* x, int64_t cols, uint8_t* dst) {
  const int64_t nb = cols / 32, nbp = Q8_0PaddedBlocks(cols);
  auto* d = reinterpret_cast<float*>(dst + Q8_0ScaleOffset(nbp));
  auto* sum = reinterpret_cast<float*>(dst + Q8_0SumOffset(nbp));
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + 32 * b;
    const float amax = AbsMax(xb, 32);
    d[b] = amax / 127.0f;
    const __m256 id = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    const __m256i q = Codes32(xb, id);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32 * b), q);
    const int s = HSum8(_mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q),
                                          _mm256_set1_epi16(1)));  // exact
    sum[b] = d[b] * static_cast<float>(s);
  }
  for (int64_t b = nb; b < nbp; ++b) {
    std::memset(dst + 32 * b, 0, 32);
    d[b] = 0.0f;
    sum[b] = 0.0f;
  }
}

void QuantizeQ8_K(const float* x, int64_t cols, uint8_t* dst) {
  auto* blocks = reinterpret_cast<ActBlockQ8K*>(dst);
  for (int64_t b = 0; b < cols / 256; ++b) {
    const float* xb = x + 256 * b;
    ActBlockQ8K& o = blocks[b];
    const float amax = AbsMax(xb, 256);
    o.d = amax / 127.0f;
    const __m256 id = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    for (int j = 0; j < 8; ++j) {
      const __m256i q = Codes32(xb + 32 * j, id);
      _mm256_store_si256(reinterpret_cast<__m256i*>(o.qs + 32 * j), q);
      for (int h = 0; h < 2; ++h) {
        const __m128i q16 = h == 0 ? _mm256_castsi256_si128(q) : _mm256_extracti128_si256(q, 1);
        const int s = HSum8(_mm256_madd_epi16(_mm256_cvtepi8_epi16(q16), _mm256_set1_epi16(1)));
        o.bsum[2 * j + h] = static_cast<int16_t>(s);
        o.bd[2 * j + h] = o.d * static_cast<float>(s);
      }
    }
  }
}

// ---- Format traits ------------------------------------------------------------------------

// Q4_K and Q5_K: x = d * sc[s] * q - dmin * m[s], sub-blocks s of 32 (one vector each).
// Per (row, token) and super-block, the sequence the panel kernel below also follows (so a
// matrix gives the same bits as rows and as panels):
//   S (exact int32) = sum_s sc[s] * sum(q * a over s)      (by madd; |S| < 2^26)
//   M (exact int32) = sum_s m[s] * bsum32[s]                (|M| < 2^21)
//   f = fma(float(S), d * da, f);  f = fnmadd(float(M), dmin * da, f)
// f is one float per (row, token): the sums are integers, exact in any order, so the row
// kernel's lane sums are exact too.
struct alignas(32) UnpackedK4 {
  __m256i q[8];   // codes, sub-block s in q[s]
  __m128i m;      // int16 mins m[0..7]
  int16_t sc[8];  // sub-block scales
  float d, dmin;
};

// Bit `shift` of every byte of qh, moved to bit 4: Q5_K's fifth code bit.
__m256i FifthBitOf(__m256i qh, __m128i shift) {
  return _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, shift), _mm256_set1_epi8(1)), 4);
}

// One float accumulator per (row, token) (K4Traits).
struct AccScalar {
  using Acc = float;
  static float Zero() { return 0.0f; }
  static float Reduce(float v) { return v; }
};

// The super-block's end for one (row, token): f = fma(float(S), dd, f); f = fnmadd(float(M),
// dm, f), with S the sum of the 8 lanes of s8 and M of the 4 lanes of m4 (exact).
[[gnu::always_inline]] float FoldK4(__m256i s8, __m128i m4, float dd, float dm, float f) {
  const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
  __m128i h = _mm_hadd_epi32(s4, m4);  // s0+s1, s2+s3, m0+m1, m2+m3
  h = _mm_hadd_epi32(h, h);            // S, M, S, M
  const __m128 sm = _mm_cvtepi32_ps(h);
  __m128 r = _mm_fmadd_ss(sm, _mm_set_ss(dd), _mm_set_ss(f));
  r = _mm_fnmadd_ss(_mm_movehdup_ps(sm), _mm_set_ss(dm), r);
  return _mm_cvtss_f32(r);
}

// Lane j: the sum of the 8 int32 lanes of v[j] (exact).
__m256i LaneSums(const __m256i (&v)[8]) {
  const __m256i h0 = _mm256_hadd_epi32(v[0], v[1]), h1 = _mm256_hadd_epi32(v[2], v[3]);
  const __m256i h2 = _mm256_hadd_epi32(v[4], v[5]), h3 = _mm256_hadd_epi32(v[6], v[7]);
  // a: the 128-bit halves' sums of v[0..3], low halves in lanes 0-3, high in 4-7; b: v[4..7].
  const __m256i a = _mm256_hadd_epi32(h0, h1), b = _mm256_hadd_epi32(h2, h3);
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                          _mm256_permute2x128_si256(a, b, 0x31));
}

template <bool kFifthBit>
struct K4Traits : AccScalar {
  static constexpr int64_t kStep = 256;
  static constexpr int kRows = 3, kToks = 2;
  static constexpr int kDirectRows = 1;
  static constexpr int64_t kPrefetchAhead = 0;
  using Unpacked = UnpackedK4;

  static void Unpack(const RowRef& rr, int64_t s, Unpacked* u) {
    constexpr int64_t kBytes = kFifthBit ? 176 : 144;
    const uint8_t* p = rr.row + s * kBytes;
    const uint8_t* qs = p + (kFifthBit ? 48 : 16);
    u->d = F16(p);
    u->dmin = F16(p + 2);
    // The 12 scale bytes -> 8 six-bit scales and mins (see BlockQ4_K and the AVX-512 file).
    const uint32_t u0 = Load32(p + 4), u1 = Load32(p + 8), u2 = Load32(p + 12);
    const uint64_t sc8 =
        (u0 & 0x3F3F3F3Fu) | uint64_t{(u2 & 0x0F0F0F0Fu) | ((u0 >> 2) & 0x30303030u)} << 32;
    const uint64_t m8 =
        (u1 & 0x3F3F3F3Fu) | uint64_t{((u2 >> 4) & 0x0F0F0F0Fu) | ((u1 >> 2) & 0x30303030u)} << 32;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(u->sc),
                     _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(sc8))));
    u->m = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(m8)));
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    __m256i qh = _mm256_setzero_si256();
    if (kFifthBit) qh = LoadU256(p + 16);
    for (int c = 0; c < 4; ++c) {
      // 32 bytes: low nibbles = sub-block 2c, high nibbles = sub-block 2c + 1.
      const __m256i v = LoadU256(qs + 32 * c);
      __m256i lo = _mm256_and_si256(v, low4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
      if (kFifthBit) {
        // Fifth bit of sub-block s: bit s of qh[l].
        lo = _mm256_or_si256(lo, FifthBitOf(qh, _mm_cvtsi32_si128(2 * c)));
        hi = _mm256_or_si256(hi, FifthBitOf(qh, _mm_cvtsi32_si128(2 * c + 1)));
      }
      u->q[2 * c] = lo;
      u->q[2 * c + 1] = hi;
    }
  }

  template <int R, int T>
  [[gnu::always_inline]] static void Step(const Unpacked* const* u, const Toks& k, int64_t s,
                                          float (&f)[R][T]) {
    const ActBlockQ8K* a[T];
    for (int t = 0; t < T; ++t) a[t] = k.q8k(t, s);
    __m256i acc[R][T];
    for (int c = 0; c < 8; ++c) {
      __m256i av[T];
      for (int t = 0; t < T; ++t) av[t] = _mm256_load_si256((const __m256i*)(a[t]->qs + 32 * c));
      for (int i = 0; i < R; ++i) {
        const __m256i sc = _mm256_set1_epi16(u[i]->sc[c]);
        for (int t = 0; t < T; ++t) {
          const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(u[i]->q[c], av[t]), sc);
          acc[i][t] = c == 0 ? p : _mm256_add_epi32(acc[i][t], p);
        }
      }
    }
    if constexpr (R * T <= 2) {
      for (int t = 0; t < T; ++t) {
        const __m128i bsum32 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a[t]->bsum32));
        for (int i = 0; i < R; ++i) {
          f[i][t] = FoldK4(acc[i][t], _mm_madd_epi16(u[i]->m, bsum32), u[i]->d * a[t]->d,
                           u[i]->dmin * a[t]->d, f[i][t]);
        }
      }
    } else {
      // A tile's pairs folded together, one per lane: the same steps as FoldK4, for a fraction
      // of its lane sums (one at a time, they halved the tile's speed).
      static_assert(R * T <= 8);
      __m256i sv[8], mv[8];
      alignas(32) float dd[8] = {}, dm[8] = {}, fv[8] = {};
      for (int n = R * T; n < 8; ++n) sv[n] = mv[n] = _mm256_setzero_si256();
      for (int t = 0; t < T; ++t) {
        const __m128i bsum32 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a[t]->bsum32));
        for (int i = 0; i < R; ++i) {
          const int n = i * T + t;
          sv[n] = acc[i][t];
          mv[n] = _mm256_zextsi128_si256(_mm_madd_epi16(u[i]->m, bsum32));
          dd[n] = u[i]->d * a[t]->d;
          dm[n] = u[i]->dmin * a[t]->d;
          fv[n] = f[i][t];
        }
      }
      __m256 r =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(LaneSums(sv)), _mm256_load_ps(dd), _mm256_load_ps(fv));
      r = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(LaneSums(mv)), _mm256_load_ps(dm), r);
      _mm256_store_ps(fv, r);
      for (int t = 0; t < T; ++t) {
        for (int i = 0; i < R; ++i) f[i][t] = fv[i * T + t];
      }
    }
  }
};

// Q6_K: x = d * sc[j] * (q - 32), sub-blocks j of 16, sc signed.
// Per (row, token) and super-block:
//   S (exact) = sum_c madd(maddubs(q_c, a_c), sc_c) + madd(bsum, -32 * sc)  (pairs <= 2*63*127)
//   f = fma(float(S), set1(d * da), f)
struct alignas(32) UnpackedQ6K {
  __m256i q[8];   // codes 0..63, elements 32c .. 32c + 31 in q[c]
  __m256i sc[8];  // int16 lanes 0..7: sc[2c], lanes 8..15: sc[2c + 1]
  __m256i m32;    // int16: -32 * sc[j]
  float d;
};

// vpshufb masks: kQ6ScaleMasks[j] fills the low 128 bits with int16 lane 2j and the high 128
// bits with lane 2j + 1 of a vector holding 8 int16 scales in both halves.
alignas(32) constexpr int8_t kQ6ScaleMasks[4][32] = {
#define MT_PAIR(x) x, x + 1, x, x + 1, x, x + 1, x, x + 1, x, x + 1, x, x + 1, x, x + 1, x, x + 1
    {MT_PAIR(0), MT_PAIR(2)},
    {MT_PAIR(4), MT_PAIR(6)},
    {MT_PAIR(8), MT_PAIR(10)},
    {MT_PAIR(12), MT_PAIR(14)},
#undef MT_PAIR
};

__m256i Q6ScaleMask(int j) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(kQ6ScaleMasks[j]));
}

struct Q6KTraits : Acc256 {
  static constexpr int64_t kStep = 256;
  static constexpr int kRows = 2, kToks = 2;
  static constexpr int kDirectRows = 1;
  // 4 KiB: kernels_bench gemv q6_K from DRAM 6.2-8.1 -> 10-13 GB/s on Zen 3 (its unpack outlasts
  // the hardware prefetcher's lead; the Q4_K/Q5_K panels and rows gained nothing).
  static constexpr int64_t kPrefetchAhead = 4096;
  using Unpacked = UnpackedQ6K;

  static void Unpack(const RowRef& rr, int64_t s, Unpacked* u) {
    const uint8_t* p = rr.row + s * 210;
    u->d = F16(p + 208);
    const __m256i low4 = _mm256_set1_epi8(0x0F), three = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; ++h) {
      // Half h, l in 0..31: element 128h + 32k + l has low 4 bits from ql[64h + l + 32 (k & 1)]
      // (low nibble for k < 2, high for k >= 2) and high 2 bits from qh[32h + l] >> 2k.
      const __m256i ql0 = LoadU256(p + 64 * h), ql1 = LoadU256(p + 64 * h + 32);
      const __m256i qh = LoadU256(p + 128 + 32 * h);
      const __m256i lows[4] = {_mm256_and_si256(ql0, low4), _mm256_and_si256(ql1, low4),
                               _mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                               _mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4)};
      for (int kq = 0; kq < 4; ++kq) {
        const __m256i hi = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * kq)), three);
        u->q[4 * h + kq] = _mm256_or_si256(lows[kq], _mm256_slli_epi16(hi, 4));
      }
    }
    // The 16 scales widened once; each chunk's pair then takes one vpshufb (a broadcast per
    // scale cost ~56 of the unpack's ~126 instructions: gemv_hot q6_K was compute-bound).
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(p + 192)));
    const __m256i first8 = _mm256_permute2x128_si256(sc16, sc16, 0x00);  // sc[0..7], twice
    const __m256i last8 = _mm256_permute2x128_si256(sc16, sc16, 0x11);   // sc[8..15], twice
    for (int c = 0; c < 8; ++c) {
      u->sc[c] = _mm256_shuffle_epi8(c < 4 ? first8 : last8, Q6ScaleMask(c % 4));
    }
    u->m32 = _mm256_mullo_epi16(sc16, _mm256_set1_epi16(-32));
  }

  template <int R, int T>
  [[gnu::always_inline]] static void Step(const Unpacked* const* u, const Toks& k, int64_t s,
                                          __m256 (&f)[R][T]) {
    const ActBlockQ8K* a[T];
    for (int t = 0; t < T; ++t) a[t] = k.q8k(t, s);
    __m256i acc[R][T];
    for (int i = 0; i < R; ++i) {
      for (int t = 0; t < T; ++t) acc[i][t] = _mm256_setzero_si256();
    }
    auto chunk = [&](int c) {
      __m256i av[T];
      for (int t = 0; t < T; ++t) av[t] = _mm256_load_si256((const __m256i*)(a[t]->qs + 32 * c));
      for (int i = 0; i < R; ++i) {
        for (int t = 0; t < T; ++t) {
          const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(u[i]->q[c], av[t]), u[i]->sc[c]);
          acc[i][t] = _mm256_add_epi32(acc[i][t], p);
        }
      }
    };
    // Unrolled, a tile of several rows runs out of registers (clang hoists the panel's loads
    // and spills them): 40-50 % slower in kernels_bench gemm16 than the rolled loop, while
    // one row (the few-token path) is faster unrolled.
    if constexpr (R == 1) {
      for (int c = 0; c < 8; ++c) chunk(c);
    } else {
#pragma nounroll
      for (int c = 0; c < 8; ++c) chunk(c);
    }
    for (int t = 0; t < T; ++t) {
      const __m256i bs = _mm256_load_si256((const __m256i*)a[t]->bsum);
      for (int i = 0; i < R; ++i) {
        acc[i][t] = _mm256_add_epi32(acc[i][t], _mm256_madd_epi16(bs, u[i]->m32));
        const float dd = u[i]->d * a[t]->d;
        f[i][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[i][t]), _mm256_set1_ps(dd), f[i][t]);
      }
    }
  }
};

// The 32-block formats, one block per step. Codes w (signed: Q8_0 [-128, 127], Q4_0 [-8, 7],
// Q5_0 [-16, 15], MXFP4 [-12, 12], IQ4_NL [-127, 113]; unsigned: Q4_1 [0, 15], Q5_1 [0, 31]) times
// dw, plus m per block for Q4_1/Q5_1. vpmaddubsw needs an unsigned side: the unsigned codes
// themselves, or |w| times a with w's sign (|w| <= 128, |a| <= 127: pairs stay within int16).
//   S (8 x int32, exact) = madd(maddubs(w, a), 1)  or  madd(maddubs(|w|, sign(a, w)), 1)
//   f = fma(float(S), set1(dw * da), f)
//   Q4_1/Q5_1: f = fma(mw, set1(sa), f)   (mw = m in lane 0, else 0; sa = da * sum(a))
enum class Kind32 { kQ8_0, kQ4_0, kQ4_1, kQ5_0, kQ5_1, kMxfp4, kIq4nl };

constexpr bool HasMin(Kind32 k) { return k == Kind32::kQ4_1 || k == Kind32::kQ5_1; }

struct alignas(32) Unpacked32 {
  __m256i w;     // codes
  __m256i absw;  // |w| (as unsigned bytes: |-128| = 128); unused for unsigned codes
  __m256 mw;     // m in lane 0, 0 elsewhere (Q4_1/Q5_1)
  float dw;
};

// 2^(e - 128): the E8M0 scale halved, to pair with the doubled e2m1 values.
float Mxfp4HalfScale(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// The 32 nibbles of 16 bytes in element order: low nibbles, then high nibbles.
__m256i Nibbles(const uint8_t* p) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i v = _mm256_set_m128i(_mm_srli_epi16(b, 4), b);
  return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

// 16 where bit i of the 32-bit little-endian word at p is set, else 0, for byte i.
__m256i FifthBits(const uint8_t* p) {
  const __m256i v = _mm256_set1_epi32(static_cast<int>(Load32(p)));
  const __m256i bytes = _mm256_shuffle_epi8(  // byte i <- byte i / 8 of the word
      v, _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                          3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(0x8040201008040201);  // bit i % 8
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

template <Kind32 kKind>
struct Traits32 : Acc256 {
  static constexpr int64_t kStep = 32;
  static constexpr int kRows = 3, kToks = 3;
  static constexpr int kDirectRows = 1;
  static constexpr int64_t kPrefetchAhead = 0;
  static constexpr bool kMin = HasMin(kKind);
  using Unpacked = Unpacked32;

  // Block bytes and the offset of qs in a block (qh sits just before qs; d at 0, m at 2).
  static constexpr int64_t kBytes = kKind == Kind32::kQ8_0    ? 34
                                    : kKind == Kind32::kQ4_0  ? 18
                                    : kKind == Kind32::kQ4_1  ? 20
                                    : kKind == Kind32::kQ5_0  ? 22
                                    : kKind == Kind32::kQ5_1  ? 24
                                    : kKind == Kind32::kIq4nl ? 18
                                                              : 17;
  static constexpr int kQs = kKind == Kind32::kQ8_0    ? 2
                             : kKind == Kind32::kQ4_0  ? 2
                             : kKind == Kind32::kQ4_1  ? 4
                             : kKind == Kind32::kQ5_0  ? 6
                             : kKind == Kind32::kQ5_1  ? 8
                             : kKind == Kind32::kIq4nl ? 2
                                                       : 1;

  static void Unpack(const RowRef& rr, int64_t s, Unpacked* u) {
    const uint8_t* b = rr.row + s * kBytes;
    if (kKind == Kind32::kQ8_0) {
      u->w = LoadU256(b + kQs);
    } else {
      __m256i w = Nibbles(b + kQs);
      if (kKind == Kind32::kQ5_0 || kKind == Kind32::kQ5_1) {
        w = _mm256_or_si256(w, FifthBits(b + kQs - 4));
      }
      if (kKind == Kind32::kQ4_0) w = _mm256_sub_epi8(w, _mm256_set1_epi8(8));
      if (kKind == Kind32::kQ5_0) w = _mm256_sub_epi8(w, _mm256_set1_epi8(16));
      if (kKind == Kind32::kMxfp4) {
        const __m256i table = _mm256_broadcastsi128_si256(
            _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
        w = _mm256_shuffle_epi8(table, w);
      }
      if (kKind == Kind32::kIq4nl) {  // kIq4nlValues
        const __m256i table = _mm256_broadcastsi128_si256(_mm_setr_epi8(
            -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113));
        w = _mm256_shuffle_epi8(table, w);
      }
      u->w = w;
    }
    u->dw = kKind == Kind32::kMxfp4 ? Mxfp4HalfScale(b[0]) : F16(b);
    if (kMin) {
      u->mw = _mm256_setr_ps(F16(b + 2), 0, 0, 0, 0, 0, 0, 0);
    } else {
      u->absw = _mm256_abs_epi8(u->w);
    }
  }

  template <int R, int T>
  [[gnu::always_inline]] static void Step(const Unpacked* const* u, const Toks& k, int64_t s,
                                          __m256 (&f)[R][T]) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i av[T];
    float da[T], sa[T];
    for (int t = 0; t < T; ++t) {
      av[t] = _mm256_load_si256((const __m256i*)(k.row(t) + 32 * s));
      da[t] = k.scales(t)[s];
      if (kMin) sa[t] = k.sums(t)[s];
    }
    for (int i = 0; i < R; ++i) {
      for (int t = 0; t < T; ++t) {
        const __m256i p = kMin ? _mm256_maddubs_epi16(u[i]->w, av[t])
                               : _mm256_maddubs_epi16(u[i]->absw, _mm256_sign_epi8(av[t], u[i]->w));
        const __m256i sum = _mm256_madd_epi16(p, ones);
        const float dd = u[i]->dw * da[t];
        f[i][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(dd), f[i][t]);
        if (kMin) f[i][t] = _mm256_fmadd_ps(u[i]->mw, _mm256_set1_ps(sa[t]), f[i][t]);
      }
    }
  }
};

// F32, F16, BF16: 8 weights per step converted exactly to f32 (zero past the row's end).
//   f = fma(w, x, f)
struct alignas(32) UnpackedF {
  __m256 w;
};

template <GgmlType kType>
struct FloatTraits : Acc256 {
  static constexpr int64_t kStep = 8;
  static constexpr int kRows = 3, kToks = 4;
  static constexpr int kDirectRows = 4;
  static constexpr int64_t kPrefetchAhead = 512;
  using Unpacked = UnpackedF;

  static constexpr int kSize = kType == GgmlType::kF32 ? 4 : 2;  // bytes per weight

  static __m256 Convert(const uint8_t* src) {
    if (kType == GgmlType::kF32) return _mm256_loadu_ps(reinterpret_cast<const float*>(src));
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    if (kType == GgmlType::kF16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }

  // The row's last, partial step: the weights that exist, zeros after.
  [[gnu::noinline]] static __m256 ConvertTail(const uint8_t* src, int64_t left) {
    alignas(32) uint8_t tail[32] = {};
    std::memcpy(tail, src, static_cast<size_t>(left) * kSize);
    return Convert(tail);
  }

  static void Unpack(const RowRef& rr, int64_t s, Unpacked* u) {
    const int64_t left = rr.cols - 8 * s;
    const uint8_t* src = rr.row + 8 * kSize * s;
    u->w = left >= 8 ? Convert(src) : ConvertTail(src, left);
  }

  template <int R, int T>
  [[gnu::always_inline]] static void Step(const Unpacked* const* u, const Toks& k, int64_t s,
                                          __m256 (&f)[R][T]) {
    __m256 x[T];
    for (int t = 0; t < T; ++t) x[t] = _mm256_load_ps(k.f32(t) + 8 * s);
    for (int i = 0; i < R; ++i) {
      for (int t = 0; t < T; ++t) f[i][t] = _mm256_fmadd_ps(u[i]->w, x[t], f[i][t]);
    }
  }
};

// ---- Q4_K and Q5_K on 16-row panels (WeightLayout::kPanels, kernels/panel_layout.h) --------
//
// A panel stores each 16-byte chunk of a super-block as 4 groups of (16 rows x 4 bytes), so
// one 32-byte load gives the same 4 bytes of 8 rows (a half panel): lane i of every vector
// is row i. For 4 code bytes (8 codes: 4 of sub-block 2c in the low nibbles, 4 of 2c + 1 in
// the high ones) vpmaddubsw against the token's 4 activation bytes, broadcast, and vpmaddwd
// against the row's sub-block scale give each row's scaled sum in its own lane: the
// super-block's S and M need no lane sums, and the float steps (FoldK4's, per lane) run once
// per 8 rows. The codes are split once for all the tile's tokens.

// vpshufb masks: kPairMasks[b] zero-extends byte b of every dword into both of its int16
// halves (a sub-block's scale per row); kPairMasks[4 + p] bytes 2p and 2p + 1 into its two
// halves (the mins of sub-blocks 2p, 2p + 1 per row, p = 0, 1).
alignas(32) constexpr int8_t kPairMasks[6][32] = {
#define MT_DWORD_MASK(x, y)                                                                     \
  {                                                                                             \
    x, -1, y, -1, x + 4, -1, y + 4, -1, x + 8, -1, y + 8, -1, x + 12, -1, y + 12, -1, x, -1, y, \
        -1, x + 4, -1, y + 4, -1, x + 8, -1, y + 8, -1, x + 12, -1, y + 12, -1                  \
  }
    MT_DWORD_MASK(0, 0), MT_DWORD_MASK(1, 1), MT_DWORD_MASK(2, 2),
    MT_DWORD_MASK(3, 3), MT_DWORD_MASK(0, 1), MT_DWORD_MASK(2, 3),
#undef MT_DWORD_MASK
};

__m256i PairMask(int i) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(kPairMasks[i]));
}

// The 4 bytes at p in every dword.
__m256i Broadcast32(const int8_t* p) {
  return _mm256_set1_epi32(static_cast<int>(Load32(reinterpret_cast<const uint8_t*>(p))));
}

// A half panel's super-block header: the 6-bit scales and mins as bytes (dword lane i = row
// i: scales 0-3, 4-7, mins 0-3, 4-7) and d, dmin as floats.
struct PanelHeaderQ4K {
  __m256i sc[2], m[2];
  __m256 d, dmin;
};

PanelHeaderQ4K LoadHeaderQ4K(const uint8_t* h) {
  const __m256i dm = LoadU256(h), u0 = LoadU256(h + 64), u1 = LoadU256(h + 128),
                u2 = LoadU256(h + 192);
  const __m256i m3f = _mm256_set1_epi8(0x3F), m0f = _mm256_set1_epi8(0x0F),
                m30 = _mm256_set1_epi8(0x30);
  PanelHeaderQ4K o;
  // As the row kernel's Unpack, on 8 rows' dwords at once.
  o.sc[0] = _mm256_and_si256(u0, m3f);
  o.sc[1] =
      _mm256_or_si256(_mm256_and_si256(u2, m0f), _mm256_and_si256(_mm256_srli_epi32(u0, 2), m30));
  o.m[0] = _mm256_and_si256(u1, m3f);
  o.m[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u2, 4), m0f),
                           _mm256_and_si256(_mm256_srli_epi32(u1, 2), m30));
  // dword = d | dmin << 16 (f16): gather the 8 d's, then the 8 dmin's.
  const __m256i split = _mm256_shuffle_epi8(
      dm, _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, 0, 1, 4, 5, 8, 9,
                           12, 13, 2, 3, 6, 7, 10, 11, 14, 15));
  const __m256i halves = _mm256_permute4x64_epi64(split, 0xD8);  // d0-7 | dmin0-7
  o.d = _mm256_cvtph_ps(_mm256_castsi256_si128(halves));
  o.dmin = _mm256_cvtph_ps(_mm256_extracti128_si256(halves, 1));
  return o;
}

// Q4_K / Q5_K: half panels hb .. hb + H - 1 (8 rows each: 4-byte groups at + 32 h) x T tokens,
// all super-blocks; y rows r0 + 8 (hb + h).
template <bool kFifthBit, int H, int T>
[[gnu::noinline]] void PanelTileK4(const uint8_t* panel, int hb, int64_t cols, const Toks& k,
                                   float* y, int64_t y_stride, int64_t r0) {
  constexpr int64_t kBlockBytes = kFifthBit ? 176 : 144;
  constexpr int kQs = kFifthBit ? 48 : 16;  // row offset of the codes (Q5_K: qh at 16)
  // Groups summed in int16 before the scale: 8 x 2 x 15 x 127 < 2^15 (Q4_K); Q5_K's codes
  // reach 31, so 4.
  constexpr int kFlush = kFifthBit ? 4 : 8;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  __m256 f[H][T];
  for (int h = 0; h < H; ++h) {
    for (int t = 0; t < T; ++t) f[h][t] = _mm256_setzero_ps();
  }
  for (int64_t s = 0; s < cols / 256; ++s) {
    const uint8_t* blk = panel + 16 * kBlockBytes * s;
    const ActBlockQ8K* a[T];
    for (int t = 0; t < T; ++t) a[t] = k.q8k(t, s);
    PanelHeaderQ4K hd[H];
    for (int h = 0; h < H; ++h) hd[h] = LoadHeaderQ4K(blk + 32 * (hb + h));
    __m256i acc[H][T];
    for (int h = 0; h < H; ++h) {
      for (int t = 0; t < T; ++t) acc[h][t] = _mm256_setzero_si256();
    }
#pragma nounroll
    for (int c = 0; c < 4; ++c) {
      // Sub-blocks 2c (low nibbles) and 2c + 1 (high). A sub-block's groups share its scale,
      // so their vpmaddubsw pairs add up in int16 first and one vpmaddwd per kFlush groups
      // applies the scale: Q4_K needs 9 multiplies per 256 products where the row kernel
      // needs 16.
      __m256i sc_lo[H], sc_hi[H];
      for (int h = 0; h < H; ++h) {
        sc_lo[h] = _mm256_shuffle_epi8(hd[h].sc[c / 2], PairMask((2 * c) % 4));
        sc_hi[h] = _mm256_shuffle_epi8(hd[h].sc[c / 2], PairMask((2 * c + 1) % 4));
      }
      const __m128i shift_lo = _mm_cvtsi32_si128(2 * c), shift_hi = _mm_cvtsi32_si128(2 * c + 1);
      __m256i s_lo[H][T], s_hi[H][T];  // int16 sums of the groups since the last flush
      // Unrolled: rolled, the group's address arithmetic made it front-end bound (~38
      // instructions per 8 multiplies; kernels_bench gemm4/gemm16 +30-45 % unrolled).
#pragma unroll
      for (int g = 0; g < 8; ++g) {  // 4-byte groups: chunk kQs + 32c + 16 (g / 4), k = g % 4
        const uint8_t* grp = blk + 16 * (kQs + 32 * c + 16 * (g / 4)) + 64 * (g % 4);
        const int l = 16 * (g / 4) + 4 * (g % 4);  // code byte within the 32 of chunk pair c
        __m256i lo[H], hi[H];
        for (int h = 0; h < H; ++h) {
          const __m256i v = LoadU256(grp + 32 * (hb + h));
          lo[h] = _mm256_and_si256(v, low4);
          hi[h] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
          if (kFifthBit) {  // bit 2c / 2c + 1 of qh[l], at chunk 16 + 16 (g / 4), k = g % 4
            const uint8_t* qh_at = blk + 16 * (16 + 16 * (g / 4)) + 64 * (g % 4);
            const __m256i qh = LoadU256(qh_at + 32 * (hb + h));
            lo[h] = _mm256_or_si256(lo[h], FifthBitOf(qh, shift_lo));
            hi[h] = _mm256_or_si256(hi[h], FifthBitOf(qh, shift_hi));
          }
        }
        for (int t = 0; t < T; ++t) {
          const __m256i al = Broadcast32(a[t]->qs + 64 * c + l);
          const __m256i ah = Broadcast32(a[t]->qs + 64 * c + 32 + l);
          for (int h = 0; h < H; ++h) {
            const __m256i pl = _mm256_maddubs_epi16(lo[h], al);
            const __m256i ph = _mm256_maddubs_epi16(hi[h], ah);
            s_lo[h][t] = g % kFlush == 0 ? pl : _mm256_add_epi16(s_lo[h][t], pl);
            s_hi[h][t] = g % kFlush == 0 ? ph : _mm256_add_epi16(s_hi[h][t], ph);
          }
        }
        if ((g + 1) % kFlush != 0) continue;
        for (int h = 0; h < H; ++h) {
          for (int t = 0; t < T; ++t) {
            acc[h][t] = _mm256_add_epi32(acc[h][t],
                                         _mm256_add_epi32(_mm256_madd_epi16(s_lo[h][t], sc_lo[h]),
                                                          _mm256_madd_epi16(s_hi[h][t], sc_hi[h])));
          }
        }
      }
    }
    // M = sum_j m[j] * bsum32[j], by pairs of sub-blocks; then FoldK4's two float steps.
    for (int t = 0; t < T; ++t) {
      const __m256 da = _mm256_set1_ps(a[t]->d);
      for (int h = 0; h < H; ++h) {
        __m256i mv = _mm256_setzero_si256();
        for (int p = 0; p < 4; ++p) {
          const __m256i mp = _mm256_shuffle_epi8(hd[h].m[p / 2], PairMask(4 + p % 2));
          const auto* pair = reinterpret_cast<const int8_t*>(a[t]->bsum32 + 2 * p);
          mv = _mm256_add_epi32(mv, _mm256_madd_epi16(mp, Broadcast32(pair)));
        }
        const __m256 dd = _mm256_mul_ps(hd[h].d, da), dm = _mm256_mul_ps(hd[h].dmin, da);
        f[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[h][t]), dd, f[h][t]);
        f[h][t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mv), dm, f[h][t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < H; ++h) _mm256_storeu_ps(y + t * y_stride + r0 + 8 * (hb + h), f[h][t]);
  }
}

// Rows [r0, r1) of a Q4_K / Q5_K panel matrix (r0, r1 on 16-row panels): one token reads
// each panel once, both halves together; more tokens go 4 at a time over each half panel
// (the halves share cache lines, so the second pass comes from L1 or, for a panel wider than
// L1, e.g. 2048 Q4_K columns = 36 KB, from L2). Every (row, token) takes the same steps
// either way.
template <bool kFifthBit>
void RunPanels(const WeightView& w, const ActView& a, float* y, int64_t y_stride, int64_t r0,
               int64_t r1) {
  constexpr int kT = 4;
  for (int64_t r = r0; r < r1; r += 16) {
    const uint8_t* panel = w.data + r * w.row_bytes;
    for (int64_t t0 = 0; t0 < a.n_tok; t0 += kT) {
      const Toks k{a.data + t0 * a.token_stride, a.token_stride, 0, 0};
      float* yt = y + t0 * y_stride;
      const int64_t nt = a.n_tok - t0 < kT ? a.n_tok - t0 : kT;
      if (nt == 1) {
        PanelTileK4<kFifthBit, 2, 1>(panel, 0, w.cols, k, yt, y_stride, r);
        continue;
      }
      for (int h = 0; h < 2; ++h) {
        switch (nt) {
          case 2:
            PanelTileK4<kFifthBit, 1, 2>(panel, h, w.cols, k, yt, y_stride, r);
            break;
          case 3:
            PanelTileK4<kFifthBit, 1, 3>(panel, h, w.cols, k, yt, y_stride, r);
            break;
          default:
            PanelTileK4<kFifthBit, 1, 4>(panel, h, w.cols, k, yt, y_stride, r);
        }
      }
    }
  }
}

void MatMulPanels(const WeightView& w, const ActView& a, float* y, int64_t y_stride, int64_t r0,
                  int64_t r1) {
  if (w.type == GgmlType::kQ4_K) return RunPanels<false>(w, a, y, y_stride, r0, r1);
  return RunPanels<true>(w, a, y, y_stride, r0, r1);  // Q5_K (PanelsReadable)
}

void MatMulAvx2(const WeightView& w, const ActView& a, float* y, int64_t y_stride, int64_t r0,
                int64_t r1) {
  if (MatMulLowBitAvx2(w, a, y, y_stride, r0, r1)) return;  // Q2_K, Q3_K, IQ4_XS
  if (MatMulIqAvx2(w, a, y, y_stride, r0, r1)) return;      // IQ2_XXS ... IQ1_M
  if (w.panels) return MatMulPanels(w, a, y, y_stride, r0, r1);
  switch (w.type) {
    case GgmlType::kQ4_K:
      return Run<K4Traits<false>>(w, a, y, y_stride, r0, r1);
    case GgmlType::kQ5_K:
      return Run<K4Traits<true>>(w, a, y, y_stride, r0, r1);
    case GgmlType::kQ6_K:
      return Run<Q6KTraits>(w, a, y, y_stride, r0, r1);
    case GgmlType::kQ8_0:
      return Run<Traits32<Kind32::kQ8_0>>(w, a, y, y_stride, r0, r1);
    case GgmlType::kQ4_0:
      return Run<Traits32<Kind32::kQ4_0>>(w, a, y, y_stride, r0, r1);
    case GgmlType::kQ4_1:
      return Run<Traits32<Kind32::kQ4_1>>(w, a, y, y_stride, r0, r1);
    case GgmlType::kQ5_0:
      return Run<Traits32<Kind32::kQ5_0>>(w, a, y, y_stride, r0, r1);
    case GgmlType::kQ5_1:
      return Run<Traits32<Kind32::kQ5_1>>(w, a, y, y_stride, r0, r1);
    case GgmlType::kMXFP4:
      return Run<Traits32<Kind32::kMxfp4>>(w, a, y, y_stride, r0, r1);
    case GgmlType::kIQ4_NL:
      return Run<Traits32<Kind32::kIq4nl>>(w, a, y, y_stride, r0, r1);
    case GgmlType::kF32:
      return Run<FloatTraits<GgmlType::kF32>>(w, a, y, y_stride, r0, r1);
    case GgmlType::kF16:
      return Run<FloatTraits<GgmlType::kF16>>(w, a, y, y_stride, r0, r1);
    default:  // BF16
      return Run<FloatTraits<GgmlType::kBF16>>(w, a, y, y_stride, r0, r1);
  }
}

// The 16 partial sums of KernelTable::dot_f32 in two 8-lane registers (lanes 0-7, 8-15).
float DotF32Avx2(const float* a, const float* b, int64_t n) {
  __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    lo = _mm256_add_ps(lo, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    hi = _mm256_add_ps(hi, _mm256_mul_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8)));
  }
  if (i < n) {  // the tail adds to the first n - i lanes only (an added +0 could flip a -0)
    alignas(32) float ta[16] = {}, tb[16] = {};
    for (int64_t j = 0; j < n - i; ++j) ta[j] = a[i + j], tb[j] = b[i + j];
    alignas(32) float l[16];
    _mm256_store_ps(l, lo);
    _mm256_store_ps(l + 8, hi);
    for (int64_t j = 0; j < n - i; ++j) l[j] += ta[j] * tb[j];
    lo = _mm256_load_ps(l);
    hi = _mm256_load_ps(l + 8);
  }
  return Reduce8(_mm256_add_ps(lo, hi));
}

}  // namespace

const KernelTable& Avx2Kernels() {
  static const KernelTable table{QuantizeQ8_0, QuantizeQ8_K, MatMulAvx2, DotF32Avx2};
  return table;
}

}  // namespace mt::kernels
