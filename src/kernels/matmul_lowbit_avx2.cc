// AVX2 products of Q2_K, Q3_K and IQ4_XS weights with kQ8_K activations (no VNNI: vpmaddubsw,
// u8 x s8 pairs summed to int16, then vpmaddwd, int16 pairs to int32). GGUF rows, through the
// blocking driver (kernels/matmul_driver.h): one step is a super-block of 256, unpacked into
// the codes in element order (8 vectors of 32) and the sub-block scales as int16 lanes.
//
// Per (row, token) and super-block, 8 int32 lanes of exact sums, then fixed float steps into
// an 8-lane accumulator (summed in Reduce8's order at the end):
//   Q2_K   S = sum_c madd(maddubs(q_c, a_c), sc_c)        (q 0..3: pairs <= 762)
//          M = madd(m, bsum)                               (16 mins x 16 block sums)
//          f = fma(float(S), d * da, f);  f = fnmadd(float(M), dmin * da, f)
//   Q3_K   S = sum_c madd(maddubs(q_c, a_c), sc_c) + madd(-4 sc, bsum)   (q 0..7: pairs <= 1778)
//          f = fma(float(S), d * da, f)
//   IQ4_XS S = sum_c madd(maddubs(|v_c|, sign(a_c, v_c)), sc_c)   (|v| <= 127: pairs <= 32258)
//          f = fma(float(S), d * da, f)
// with sc_c the int16 scales of chunk c's elements (Q2_K, Q3_K: sub-blocks 2c and 2c + 1 in
// the low and high 128-bit halves; IQ4_XS: sub-block c in all lanes).
//
// Compiled with the AVX2 flags; keeps the rules of matmul_internal.h (everything in an
// anonymous namespace, nothing shared inline).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/matmul_driver.h"
#include "kernels/matmul_internal.h"

namespace mt::kernels {
namespace {

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

// vpshufb masks: kScalePairMasks[c % 4] fills the low 128 bits with int16 lane 2 (c % 4) and
// the high 128 bits with lane 2 (c % 4) + 1 of a vector holding 8 int16 scales in both halves.
alignas(32) constexpr int8_t kScalePairMasks[4][32] = {
#define MT_PAIR(x) x, x + 1, x, x + 1, x, x + 1, x, x + 1, x, x + 1, x, x + 1, x, x + 1, x, x + 1
    {MT_PAIR(0), MT_PAIR(2)},
    {MT_PAIR(4), MT_PAIR(6)},
    {MT_PAIR(8), MT_PAIR(10)},
    {MT_PAIR(12), MT_PAIR(14)},
#undef MT_PAIR
};

// The scales of chunks 0..7 (sub-blocks 2c, 2c + 1 in the halves) from 16 int16 scales.
void ChunkScales(__m256i sc16, __m256i out[8]) {
  const __m256i first8 = _mm256_permute2x128_si256(sc16, sc16, 0x00);  // sc[0..7], twice
  const __m256i last8 = _mm256_permute2x128_si256(sc16, sc16, 0x11);   // sc[8..15], twice
  for (int c = 0; c < 8; ++c) {
    const __m256i mask =
        _mm256_load_si256(reinterpret_cast<const __m256i*>(kScalePairMasks[c % 4]));
    out[c] = _mm256_shuffle_epi8(c < 4 ? first8 : last8, mask);
  }
}

// The 2-bit fields of Q2_K / Q3_K's qs (see BlockQ2_K) in element order: chunk 4n + k holds
// (qs[32n + l] >> 2k) & 3, l = 0..31.
void Low2Chunks(const uint8_t* qs, __m256i out[8]) {
  const __m256i three = _mm256_set1_epi8(3);
  for (int n = 0; n < 2; ++n) {
    const __m256i v = LoadU256(qs + 32 * n);
    out[4 * n] = _mm256_and_si256(v, three);
    out[4 * n + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 2), three);
    out[4 * n + 2] = _mm256_and_si256(_mm256_srli_epi16(v, 4), three);
    out[4 * n + 3] = _mm256_and_si256(_mm256_srli_epi16(v, 6), three);
  }
}

// Runs chunk(c) for c = 0..7: unrolled for one row (the few-token path, where that is faster),
// rolled for a tile of rows (unrolled, a tile runs out of registers: see Q6KTraits in
// matmul_avx2.cc).
template <int R, class Chunk>
[[gnu::always_inline]] inline void ForChunks(Chunk&& chunk) {
  if constexpr (R == 1) {
#pragma unroll
    for (int c = 0; c < 8; ++c) chunk(c);
  } else {
#pragma nounroll
    for (int c = 0; c < 8; ++c) chunk(c);
  }
}

struct alignas(32) UnpackedQ2K {
  __m256i q[8];   // codes 0..3, elements 32c .. 32c + 31 in q[c]
  __m256i sc[8];  // int16: sc of sub-block 2c (lanes 0..7) and 2c + 1 (lanes 8..15)
  __m256i m;      // int16: the 16 mins
  float d, dmin;
};

struct Q2KTraits : Acc256 {
  static constexpr int64_t kStep = 256;
  static constexpr int kRows = 2, kToks = 2;
  static constexpr int kDirectRows = 1;
  // As Q6_K's (matmul_avx2.cc): kernels_bench gemv 1024x2048 from DRAM, AVX2 variant on the
  // Sapphire Rapids VM, without -> with: q2_K 4.7 -> 11.1 GB/s, q3_K 3.6 -> 8.5, iq4_xs
  // 8.3 -> 10.2 (the same for all three formats).
  static constexpr int64_t kPrefetchAhead = 4096;
  using Unpacked = UnpackedQ2K;

  static void Unpack(const RowRef& rr, int64_t s, Unpacked* u) {
    const uint8_t* p = rr.row + s * 84;
    u->d = F16(p + 80);
    u->dmin = F16(p + 82);
    Low2Chunks(p + 16, u->q);
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i low4 = _mm_set1_epi8(0x0F);
    ChunkScales(_mm256_cvtepu8_epi16(_mm_and_si128(bytes, low4)), u->sc);
    u->m = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(bytes, 4), low4));
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
    ForChunks<R>([&](int c) {
      __m256i av[T];
      for (int t = 0; t < T; ++t) av[t] = _mm256_load_si256((const __m256i*)(a[t]->qs + 32 * c));
      for (int i = 0; i < R; ++i) {
        for (int t = 0; t < T; ++t) {
          const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(u[i]->q[c], av[t]), u[i]->sc[c]);
          acc[i][t] = _mm256_add_epi32(acc[i][t], p);
        }
      }
    });
    for (int t = 0; t < T; ++t) {
      const __m256i bs = _mm256_load_si256((const __m256i*)a[t]->bsum);
      for (int i = 0; i < R; ++i) {
        const __m256i m = _mm256_madd_epi16(bs, u[i]->m);
        const float dd = u[i]->d * a[t]->d, dm = u[i]->dmin * a[t]->d;
        f[i][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[i][t]), _mm256_set1_ps(dd), f[i][t]);
        f[i][t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(dm), f[i][t]);
      }
    }
  }
};

struct alignas(32) UnpackedQ3K {
  __m256i q[8];   // codes 0..7, elements 32c .. 32c + 31 in q[c]
  __m256i sc[8];  // int16: sc (-32..31) of sub-block 2c (lanes 0..7) and 2c + 1 (8..15)
  __m256i m4;     // int16: -4 * sc[j], j = 0..15
  float d;
};

struct Q3KTraits : Acc256 {
  static constexpr int64_t kStep = 256;
  static constexpr int kRows = 2, kToks = 2;
  static constexpr int kDirectRows = 1;
  static constexpr int64_t kPrefetchAhead = 4096;
  using Unpacked = UnpackedQ3K;

  static void Unpack(const RowRef& rr, int64_t s, Unpacked* u) {
    const uint8_t* p = rr.row + s * 110;
    u->d = F16(p + 108);
    Low2Chunks(p + 32, u->q);
    // High bit of element 32c + l: bit c of hmask[l].
    const __m256i hm = LoadU256(p);
    const __m256i four = _mm256_set1_epi8(4);
    for (int c = 0; c < 8; ++c) {
      const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << c));
      const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit);
      u->q[c] = _mm256_or_si256(u->q[c], _mm256_and_si256(set, four));
    }
    // sc[4q .. 4q + 3] + 32 as bytes: low 4 bits from bytes 0-3 (q = 0, 2) or 4-7 (q = 1, 3),
    // low nibbles for q < 2, high for q >= 2; high 2 bits: bits 2q, 2q + 1 of bytes 8-11.
    const uint32_t w[3] = {Load32(p + 96), Load32(p + 100), Load32(p + 104)};
    uint32_t sc4[4];
    for (int q = 0; q < 4; ++q) {
      sc4[q] =
          ((w[q % 2] >> (4 * (q / 2))) & 0x0F0F0F0Fu) | (((w[2] >> (2 * q)) & 0x03030303u) << 4);
    }
    const __m128i bytes =
        _mm_sub_epi8(_mm_setr_epi32(static_cast<int>(sc4[0]), static_cast<int>(sc4[1]),
                                    static_cast<int>(sc4[2]), static_cast<int>(sc4[3])),
                     _mm_set1_epi8(32));
    const __m256i sc16 = _mm256_cvtepi8_epi16(bytes);
    ChunkScales(sc16, u->sc);
    u->m4 = _mm256_mullo_epi16(sc16, _mm256_set1_epi16(-4));
  }

  template <int R, int T>
  [[gnu::always_inline]] static void Step(const Unpacked* const* u, const Toks& k, int64_t s,
                                          __m256 (&f)[R][T]) {
    const ActBlockQ8K* a[T];
    for (int t = 0; t < T; ++t) a[t] = k.q8k(t, s);
    __m256i acc[R][T];
    for (int t = 0; t < T; ++t) {
      const __m256i bs = _mm256_load_si256((const __m256i*)a[t]->bsum);
      for (int i = 0; i < R; ++i) acc[i][t] = _mm256_madd_epi16(bs, u[i]->m4);
    }
    ForChunks<R>([&](int c) {
      __m256i av[T];
      for (int t = 0; t < T; ++t) av[t] = _mm256_load_si256((const __m256i*)(a[t]->qs + 32 * c));
      for (int i = 0; i < R; ++i) {
        for (int t = 0; t < T; ++t) {
          const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(u[i]->q[c], av[t]), u[i]->sc[c]);
          acc[i][t] = _mm256_add_epi32(acc[i][t], p);
        }
      }
    });
    for (int t = 0; t < T; ++t) {
      for (int i = 0; i < R; ++i) {
        const float dd = u[i]->d * a[t]->d;
        f[i][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[i][t]), _mm256_set1_ps(dd), f[i][t]);
      }
    }
  }
};

struct alignas(32) UnpackedIQ4XS {
  __m256i absv[8];  // |v| of the codes, sub-block c (elements 32c ..) in absv[c]
  __m256i v[8];     // v, for the signs
  int16_t sc[8];    // -32..31
  float d;
};

struct IQ4XSTraits : Acc256 {
  static constexpr int64_t kStep = 256;
  static constexpr int kRows = 2, kToks = 2;
  static constexpr int kDirectRows = 1;
  static constexpr int64_t kPrefetchAhead = 4096;
  using Unpacked = UnpackedIQ4XS;

  static void Unpack(const RowRef& rr, int64_t s, Unpacked* u) {
    const uint8_t* p = rr.row + s * 136;
    u->d = F16(p);
    const uint32_t sh = Load32(p) >> 16, sl = Load32(p + 4);
    for (int j = 0; j < 8; ++j) {
      u->sc[j] = static_cast<int16_t>((((sl >> (4 * j)) & 15) | ((sh >> (2 * j)) & 3) << 4) - 32);
    }
    const __m256i table = _mm256_broadcastsi128_si256(
        _mm_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113));
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (int j = 0; j < 8; ++j) {
      // 16 bytes: low nibbles = elements 32j + l, high nibbles = 32j + 16 + l.
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8 + 16 * j));
      const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), low4);
      u->v[j] = _mm256_shuffle_epi8(table, nib);
      u->absv[j] = _mm256_abs_epi8(u->v[j]);
    }
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
    ForChunks<R>([&](int c) {
      __m256i av[T];
      for (int t = 0; t < T; ++t) av[t] = _mm256_load_si256((const __m256i*)(a[t]->qs + 32 * c));
      for (int i = 0; i < R; ++i) {
        const __m256i sc = _mm256_set1_epi16(u[i]->sc[c]);
        for (int t = 0; t < T; ++t) {
          const __m256i prod =
              _mm256_maddubs_epi16(u[i]->absv[c], _mm256_sign_epi8(av[t], u[i]->v[c]));
          acc[i][t] = _mm256_add_epi32(acc[i][t], _mm256_madd_epi16(prod, sc));
        }
      }
    });
    for (int t = 0; t < T; ++t) {
      for (int i = 0; i < R; ++i) {
        const float dd = u[i]->d * a[t]->d;
        f[i][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[i][t]), _mm256_set1_ps(dd), f[i][t]);
      }
    }
  }
};

}  // namespace

bool MatMulLowBitAvx2(const WeightView& w, const ActView& a, float* y, int64_t y_stride, int64_t r0,
                      int64_t r1) {
  switch (w.type) {
    case GgmlType::kQ2_K:
      Run<Q2KTraits>(w, a, y, y_stride, r0, r1);
      return true;
    case GgmlType::kQ3_K:
      Run<Q3KTraits>(w, a, y, y_stride, r0, r1);
      return true;
    case GgmlType::kIQ4_XS:
      Run<IQ4XSTraits>(w, a, y, y_stride, r0, r1);
      return true;
    default:
      return false;
  }
}

}  // namespace mt::kernels
