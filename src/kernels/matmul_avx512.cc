// AVX-512 variant (F/BW/VL/DQ + VNNI). Compiled with its own -m flags; keeps the rules of
// matmul_internal.h (everything in an anonymous namespace, nothing shared inline).
//
// The K-quants (Q4_K, Q5_K, Q6_K) run on 16-row panels in matmul_kquant_avx512.cc. For the
// others the loops are in matmul_driver.h and this file has the per-format traits. A "step"
// is a run of columns with one set of weight scales: 64 (two blocks) for the 32-block
// formats, 16 for F32/F16/BF16. Per (row, token)
// and step the float ops are fixed (listed at each Step): an exact int32 vector of code
// products is converted to float and FMA-ed into one 16-lane accumulator with the scales;
// the 16 lanes are summed in a fixed tree at the end (Reduce16). Hence the value of y(r, t)
// does not depend on the tile it was computed in (batch invariance).
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

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

// ---- Activation quantization (bit-identical to the scalar variant) ------------------------

// Codes of 16 floats times id, clamped like the scalar Code() and rounded half to even.
__m128i Codes16(__m512 x, __m512 id) {
  __m512 v = _mm512_mul_ps(x, id);
  v = _mm512_max_ps(v, _mm512_set1_ps(-127.0f));  // (v > -127) ? v : -127
  v = _mm512_min_ps(v, _mm512_set1_ps(127.0f));   // (v < 127) ? v : 127
  return _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(v));
}

float AbsMax(const float* x, int n) {
  __m512 m = _mm512_setzero_ps();
  for (int i = 0; i < n; i += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
  return _mm512_reduce_max_ps(m);  // order-free: max is exact
}

void QuantizeQ8_0(const float* x, int64_t cols, uint8_t* dst) {
  const int64_t nb = cols / 32, nbp = Q8_0PaddedBlocks(cols);
  auto* d = reinterpret_cast<float*>(dst + Q8_0ScaleOffset(nbp));
  auto* sum = reinterpret_cast<float*>(dst + Q8_0SumOffset(nbp));
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + 32 * b;
    const float amax = AbsMax(xb, 32);
    d[b] = amax / 127.0f;
    const __m512 id = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    const __m128i q0 = Codes16(_mm512_loadu_ps(xb), id), q1 = Codes16(_mm512_loadu_ps(xb + 16), id);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 32 * b), q0);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 32 * b + 16), q1);
    const int s = _mm512_reduce_add_epi32(
        _mm512_add_epi32(_mm512_cvtepi8_epi32(q0), _mm512_cvtepi8_epi32(q1)));  // exact
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
    const __m512 id = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    for (int j = 0; j < 16; ++j) {
      const __m128i q = Codes16(_mm512_loadu_ps(xb + 16 * j), id);
      _mm_store_si128(reinterpret_cast<__m128i*>(o.qs + 16 * j), q);
      const int s = _mm512_reduce_add_epi32(_mm512_cvtepi8_epi32(q));  // exact
      o.bsum[j] = static_cast<int16_t>(s);
      o.bd[j] = o.d * static_cast<float>(s);
    }
  }
}

// ---- Format traits (the interface is described in matmul_driver.h) ----------------------

// The 32-block formats. A step is two blocks. Codes w (signed: Q8_0 [-128, 127], Q4_0
// [-8, 7], Q5_0 [-16, 15], MXFP4 [-12, 12], IQ4_NL [-127, 113]; unsigned: Q4_1 [0, 15], Q5_1 [0,
// 31]) times dw, plus m per block for Q4_1/Q5_1. The activation codes a are made unsigned (a + 128,
// i.e. a xor 0x80) for vpdpbusd, and corr = -128 * (sum of w per 4 lanes) is taken off in the
// accumulator's start value:
//   S (16 x int32, exact; lanes 0..7 block 2s, 8..15 block 2s + 1) = dpbusd(corr, a+128, w)
//   f = fma(float(S), dw * da, f)    (dw, da: per-lane block scales)
//   Q4_1/Q5_1: f = fma(mw, sa, f)    (mw: m of block 2s in lane 0, of 2s + 1 in lane 8, else
//                                     0; sa: the token's d * sum(a) of those blocks)
enum class Kind32 { kQ8_0, kQ4_0, kQ4_1, kQ5_0, kQ5_1, kMxfp4, kIq4nl };

constexpr bool HasMin(Kind32 k) { return k == Kind32::kQ4_1 || k == Kind32::kQ5_1; }

struct alignas(64) Unpacked32 {
  __m512i w;     // codes, two blocks (zero for an absent second block)
  __m512i corr;  // -128 * sum of 4 codes per int32 lane
  __m512 dw;     // lanes 0..7 scale of block 2s, 8..15 of block 2s + 1 (0 if absent)
};
struct alignas(64) Unpacked32Min : Unpacked32 {
  __m512 mw;  // m of block 2s in lane 0, of block 2s + 1 in lane 8, 0 elsewhere
};

// 2^(e - 128): the E8M0 scale halved, to pair with the doubled e2m1 values.
float Mxfp4HalfScale(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// 32 nibbles of a 16-byte block in element order (low nibbles then high nibbles) for two
// blocks: [lo(b0), hi(b0), lo(b1), hi(b1)] in the four 128-bit lanes.
__m512i Nibbles2(__m128i b0, __m128i b1) {
  const __m512i v = _mm512_permutexvar_epi64(_mm512_set_epi64(3, 2, 3, 2, 1, 0, 1, 0),
                                             _mm512_castsi256_si512(_mm256_set_m128i(b1, b0)));
  const __m512i shift = _mm512_set_epi64(0x0004000400040004, 0x0004000400040004, 0, 0,
                                         0x0004000400040004, 0x0004000400040004, 0, 0);
  return _mm512_and_si512(_mm512_srlv_epi16(v, shift), _mm512_set1_epi8(0x0F));
}

// Two lanes' worth of per-block floats: lanes 0..7 a, lanes 8..15 b.
__m512 Pair16(float a, float b) {
  return _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(a), _mm512_set1_ps(b));
}

template <Kind32 kKind>
struct Traits32 : Acc512 {
  static constexpr int64_t kStep = 64;
  static constexpr int kRows = 4, kToks = 4;
  static constexpr int kDirectRows = 1;
  static constexpr int64_t kPrefetchAhead = 0;
  static constexpr bool kMin = HasMin(kKind);
  using Unpacked = std::conditional_t<kMin, Unpacked32Min, Unpacked32>;

  // Block bytes and the offsets of d, m, qh, qs in a block (-1: absent).
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
    const uint8_t* b0 = rr.row + 2 * s * kBytes;
    const uint8_t* b1 = b0 + kBytes;
    const bool has1 = 2 * s + 1 < rr.cols / 32;
    float d0, d1 = 0.0f;
    if (kKind == Kind32::kQ8_0) {
      const __m256i w0 = _mm256_loadu_si256((const __m256i*)(b0 + kQs));
      const __m256i w1 =
          has1 ? _mm256_loadu_si256((const __m256i*)(b1 + kQs)) : _mm256_setzero_si256();
      u->w = _mm512_inserti64x4(_mm512_castsi256_si512(w0), w1, 1);
    } else {
      const __m128i q0 = _mm_loadu_si128((const __m128i*)(b0 + kQs));
      const __m128i q1 = has1 ? _mm_loadu_si128((const __m128i*)(b1 + kQs)) : _mm_setzero_si128();
      __m512i w = Nibbles2(q0, q1);
      if (kKind == Kind32::kQ5_0 || kKind == Kind32::kQ5_1) {
        // Fifth bit of element i = bit i of the block's qh (little-endian uint32).
        const uint64_t h = Load32(b0 + kQs - 4) | (has1 ? uint64_t{Load32(b1 + kQs - 4)} << 32 : 0);
        w = _mm512_mask_add_epi8(w, _cvtu64_mask64(h), w, _mm512_set1_epi8(0x10));
      }
      if (kKind == Kind32::kQ4_0) w = _mm512_sub_epi8(w, _mm512_set1_epi8(8));
      if (kKind == Kind32::kQ5_0) w = _mm512_sub_epi8(w, _mm512_set1_epi8(16));
      if (kKind == Kind32::kMxfp4) {
        const __m512i table = _mm512_broadcast_i32x4(
            _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
        w = _mm512_shuffle_epi8(table, w);
      }
      if (kKind == Kind32::kIq4nl) {  // kIq4nlValues
        const __m512i table = _mm512_broadcast_i32x4(_mm_setr_epi8(
            -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113));
        w = _mm512_shuffle_epi8(table, w);
      }
      // An absent second block contributes nothing (its scale is 0 too).
      u->w = has1 ? w : _mm512_maskz_mov_epi8(0xFFFFFFFFull, w);
    }
    if (kKind == Kind32::kMxfp4) {
      d0 = Mxfp4HalfScale(b0[0]);
      if (has1) d1 = Mxfp4HalfScale(b1[0]);
    } else {
      d0 = F16(b0);
      if (has1) d1 = F16(b1);
    }
    u->dw = Pair16(d0, d1);
    if constexpr (kMin) {
      const float m0 = F16(b0 + 2), m1 = has1 ? F16(b1 + 2) : 0.0f;
      u->mw = _mm512_maskz_mov_ps(0x0101, Pair16(m0, m1));
    }
    u->corr =
        _mm512_sub_epi32(_mm512_setzero_si512(),
                         _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(-128), u->w));
  }

  template <int R, int T>
  [[gnu::always_inline]] static void Step(const Unpacked* const* u, const Toks& k, int64_t s,
                                          __m512 (&f)[R][T]) {
    const __m512i bias = _mm512_set1_epi8(-128);
    const __m512i pick = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    __m512i av[T];
    __m512 da[T], sa[T];
    for (int t = 0; t < T; ++t) {
      av[t] = _mm512_xor_si512(_mm512_load_si512(k.row(t) + 64 * s), bias);
      const __m128d d2 = _mm_load_sd(reinterpret_cast<const double*>(k.scales(t) + 2 * s));
      da[t] = _mm512_permutexvar_ps(pick, _mm512_castps128_ps512(_mm_castpd_ps(d2)));
      if constexpr (kMin) {
        const __m128d s2 = _mm_load_sd(reinterpret_cast<const double*>(k.sums(t) + 2 * s));
        sa[t] = _mm512_permutexvar_ps(pick, _mm512_castps128_ps512(_mm_castpd_ps(s2)));
      }
    }
    for (int i = 0; i < R; ++i) {
      for (int t = 0; t < T; ++t) {
        const __m512i sum = _mm512_dpbusd_epi32(u[i]->corr, av[t], u[i]->w);
        f[i][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(u[i]->dw, da[t]), f[i][t]);
        if constexpr (kMin) f[i][t] = _mm512_fmadd_ps(u[i]->mw, sa[t], f[i][t]);
      }
    }
  }
};

// F32, F16, BF16: 16 weights per step converted exactly to f32 (masked at the row's end).
//   f = fma(w, x, f)
struct alignas(64) UnpackedF {
  __m512 w;
};

template <GgmlType kType>
struct FloatTraits : Acc512 {
  static constexpr int64_t kStep = 16;
  static constexpr int kRows = 4, kToks = 4;
  static constexpr int kDirectRows = 4;
  static constexpr int64_t kPrefetchAhead = 512;
  using Unpacked = UnpackedF;

  static void Unpack(const RowRef& rr, int64_t s, Unpacked* u) {
    const int64_t left = rr.cols - 16 * s;
    const __mmask16 m = left >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << left) - 1);
    if (kType == GgmlType::kF32) {
      u->w = _mm512_maskz_loadu_ps(m, rr.row + 64 * s);
    } else {
      const __m256i h = _mm256_maskz_loadu_epi16(m, rr.row + 32 * s);
      if (kType == GgmlType::kF16) {
        u->w = _mm512_cvtph_ps(h);
      } else {
        u->w = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
      }
    }
  }

  template <int R, int T>
  [[gnu::always_inline]] static void Step(const Unpacked* const* u, const Toks& k, int64_t s,
                                          __m512 (&f)[R][T]) {
    __m512 x[T];
    for (int t = 0; t < T; ++t) {
      x[t] = _mm512_load_ps(k.f32(t) + 16 * s);
    }
    for (int i = 0; i < R; ++i) {
      for (int t = 0; t < T; ++t) f[i][t] = _mm512_fmadd_ps(u[i]->w, x[t], f[i][t]);
    }
  }
};

void MatMulAvx512(const WeightView& w, const ActView& a, float* y, int64_t y_stride, int64_t r0,
                  int64_t r1) {
  // The K-quants have their own panel kernels (matmul_kquant_avx512.cc).
  if (MatMulKQuantAvx512(w, a, y, y_stride, r0, r1)) return;
  if (MatMulLowBitAvx512(w, a, y, y_stride, r0, r1)) return;  // Q2_K, Q3_K, IQ4_XS
  if (MatMulIqAvx512(w, a, y, y_stride, r0, r1)) return;      // IQ2_XXS ... IQ1_M
  switch (w.type) {
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
      if (UseBf16Dot()) return MatMulBf16Avx512(w, a, y, y_stride, r0, r1);
      return Run<FloatTraits<GgmlType::kBF16>>(w, a, y, y_stride, r0, r1);
  }
}

// The 16 partial sums of KernelTable::dot_f32 are the 16 lanes.
float DotF32Avx512(const float* a, const float* b, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
  }
  if (i < n) {  // the tail adds to the first n - i lanes only (an added +0 could flip a -0)
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    acc = _mm512_mask_add_ps(
        acc, m, acc,
        _mm512_mul_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i)));
  }
  return Reduce16(acc);
}

}  // namespace

const KernelTable& Avx512Kernels() {
  static const KernelTable table{QuantizeQ8_0, QuantizeQ8_K, MatMulAvx512, DotF32Avx512};
  return table;
}

}  // namespace mt::kernels
