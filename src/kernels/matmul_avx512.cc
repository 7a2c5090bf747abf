// AVX-512 variant (F/BW/VL/DQ + VNNI). Compiled with its own -m flags; keeps the rules of
// matmul_internal.h (everything in an anonymous namespace, nothing shared inline).
//
// The loops are in matmul_driver.h; this file has the per-format traits. A "step" is a run of
// columns with one set of weight scales: 256 for the K-quants, 64 (two blocks) for the
// 32-block formats, 16 for F32/F16/BF16. Per (row, token)
// and step the float ops are fixed (listed at each Step): an exact int32 vector of code
// products is converted to float and FMA-ed into one 16-lane accumulator with the scales;
// the 16 lanes are summed in a fixed tree at the end (Reduce16). Hence the value of y(r, t)
// does not depend on the tile it was computed in (batch invariance).
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

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

// Fixed-order sum of the 16 lanes: halves, then quarters, then pairs.
float Reduce16(__m512 v) {
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
  return _mm_cvtss_f32(s1);
}

// 16-bit lanes 0..15 get a, lanes 16..31 get b (for per-256-bit-half shifts and picks).
__m512i Halves16(int a, int b) {
  return _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16(static_cast<int16_t>(a)),
                                 _mm512_set1_epi16(static_cast<int16_t>(b)));
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

// The accumulator policy every traits class here inherits.
struct Acc512 {
  using Acc = __m512;
  static __m512 Zero() { return _mm512_setzero_ps(); }
  static float Reduce(__m512 v) { return Reduce16(v); }
};

// ---- Format traits (the interface is described in matmul_driver.h) ----------------------

// K-quant integer core, per (row, token) and super-block, for code vectors q_c and
// activation vectors a_c (c = 0..3, 64 elements each):
//   p_c = dpbusd(0, q_c, a_c)    16 x int32, each the sum of 4 products q * a, with
//                                 |p| <= 4 * 63 * 127 = 32004 < 2^15 (codes q <= 63, |a| <= 127)
//   S   = sum over the pairs (c, c+1) = (0, 1), (2, 3) of dpwssd(S, packs(p_c, p_{c+1}),
//         sc_{c/2}), sc holding the scale of the sub-block of each int16 lane
// i.e. S = sum_j scale[j] * (q . a over sub-block j), exact, in 16 int32 lanes. vpdpbusd (64
// products per instruction) plus one pack and one vpdpwssd per two vectors was measurably
// faster here than vpmaddubsw + vpdpwssd per vector.
//
// Lane l of packs(x, y) (int16): 128-bit lane k = l / 8 takes x's int32 lanes 4k..4k+3 for
// l % 8 < 4, else y's; int32 lane i of a 64-element vector sums elements 4i..4i+3. So int16
// lane l starts at element PackedLaneElement(l), counted from the first of the two vectors.
constexpr int PackedLaneElement(int l) {
  const int k = l / 8, chunk = (l % 8) < 4 ? 0 : 1;
  return 64 * chunk + 4 * (4 * k + l % 4);
}

// Index vectors for vpermw: lane l of pair p -> sub-block of element 128 p +
// PackedLaneElement(l), for sub-blocks of 32 (Q4_K/Q5_K) or 16 (Q6_K) elements.
struct PackedScaleIndex {
  alignas(64) int16_t idx[2][32];
};
constexpr PackedScaleIndex MakePackedScaleIndex(int sub_block) {
  PackedScaleIndex r{};
  for (int p = 0; p < 2; ++p) {
    for (int l = 0; l < 32; ++l) r.idx[p][l] = (128 * p + PackedLaneElement(l)) / sub_block;
  }
  return r;
}
constexpr PackedScaleIndex kScaleIndex32 = MakePackedScaleIndex(32);
constexpr PackedScaleIndex kScaleIndex16 = MakePackedScaleIndex(16);

// S for the super-blocks of R rows x T tokens.
template <int R, int T, class U>
[[gnu::always_inline]] inline void KQuantCore(const U* const* u, const ActBlockQ8K* const* a,
                                              __m512i (&acc)[R][T]) {
  for (int pair = 0; pair < 2; ++pair) {
    __m512i av0[T], av1[T];
    for (int t = 0; t < T; ++t) {
      av0[t] = _mm512_load_si512(a[t]->qs + 128 * pair);
      av1[t] = _mm512_load_si512(a[t]->qs + 128 * pair + 64);
    }
    for (int i = 0; i < R; ++i) {
      for (int t = 0; t < T; ++t) {
        const __m512i zero = _mm512_setzero_si512();
        const __m512i p0 = _mm512_dpbusd_epi32(zero, u[i]->q[2 * pair], av0[t]);
        const __m512i p1 = _mm512_dpbusd_epi32(zero, u[i]->q[2 * pair + 1], av1[t]);
        acc[i][t] = _mm512_dpwssd_epi32(pair == 0 ? zero : acc[i][t], _mm512_packs_epi32(p0, p1),
                                        u[i]->sc[pair]);
      }
    }
  }
}

// Q4_K and Q5_K: x = d * sc[s] * q - dmin * m[s], sub-blocks s of 32.
// Per (row, token) and super-block (d, dmin of the row; da, bd of the token):
//   S (16 x int32, exact) = KQuantCore (= sum_s sc[s] * q.a over s)
//   f = fma(float(S), d * da, f)
//   f = fnmadd(mdm, bd, f),  mdm[j] = dmin * m[j / 2], bd[j] = da * bsum[j]   (16 groups j)
struct alignas(64) UnpackedK4 {
  __m512i q[4];   // codes in element order, 64 per vector
  __m512i sc[2];  // int16 scale per packed lane (kScaleIndex32)
  __m512 mdm;     // dmin * m[j / 2]
  float d;
};

template <bool kFifthBit>
struct K4Traits : Acc512 {
  static constexpr int64_t kStep = 256;
  static constexpr int kRows = 4, kToks = 4;
  static constexpr int kDirectRows = 1;
  static constexpr bool kPrefetch = false;
  using Unpacked = UnpackedK4;

  static void Unpack(const RowRef& rr, int64_t s, Unpacked* u) {
    constexpr int64_t kBytes = kFifthBit ? 176 : 144;
    const uint8_t* p = rr.row + s * kBytes;
    const uint8_t* qs = p + (kFifthBit ? 48 : 16);
    u->d = F16(p);
    const float dmin = F16(p + 2);
    // Unpack the 12 scale bytes into 8 six-bit scales and 8 mins (see BlockQ4_K):
    // bytes 0-3 low 6 bits = sc[0..3], bytes 4-7 = m[0..3]; sc[4..7] = low nibbles of bytes
    // 8-11 with the top two bits of bytes 0-3 above; m[4..7] = high nibbles of 8-11 with the
    // top two bits of bytes 4-7.
    const uint32_t u0 = Load32(p + 4), u1 = Load32(p + 8), u2 = Load32(p + 12);
    const uint64_t sc8 =
        (u0 & 0x3F3F3F3Fu) | uint64_t{(u2 & 0x0F0F0F0Fu) | ((u0 >> 2) & 0x30303030u)} << 32;
    const uint64_t m8 =
        (u1 & 0x3F3F3F3Fu) | uint64_t{((u2 >> 4) & 0x0F0F0F0Fu) | ((u1 >> 2) & 0x30303030u)} << 32;
    const __m512i sc16 = _mm512_cvtepu8_epi16(
        _mm256_castsi128_si256(_mm_cvtsi64_si128(static_cast<long long>(sc8))));
    const __m128i m128 = _mm_cvtsi64_si128(static_cast<long long>(m8));
    const __m512 m16 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(m128, m128)));
    u->mdm = _mm512_mul_ps(m16, _mm512_set1_ps(dmin));
    const __m512i nib_shift = Halves16(0, 4);  // low nibbles, then high nibbles
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    __m512i qh;
    if (kFifthBit) qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)(p + 16)));
    for (int c = 0; c < 4; ++c) {
      const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)(qs + 32 * c)));
      __m512i q = _mm512_and_si512(_mm512_srlv_epi16(v, nib_shift), low4);
      if (kFifthBit) {
        // Element 64c + l: bit 2c of qh[l]; element 64c + 32 + l: bit 2c + 1.
        const __m512i h = _mm512_srlv_epi16(qh, Halves16(2 * c, 2 * c + 1));
        q = _mm512_or_si512(q, _mm512_slli_epi16(_mm512_and_si512(h, _mm512_set1_epi8(1)), 4));
      }
      u->q[c] = q;
    }
    for (int pair = 0; pair < 2; ++pair) {
      u->sc[pair] = _mm512_permutexvar_epi16(_mm512_load_si512(kScaleIndex32.idx[pair]), sc16);
    }
  }

  template <int R, int T>
  [[gnu::always_inline]] static void Step(const Unpacked* const* u, const Toks& k, int64_t s,
                                          __m512 (&f)[R][T]) {
    const ActBlockQ8K* a[T];
    for (int t = 0; t < T; ++t) a[t] = k.q8k(t, s);
    __m512i acc[R][T];
    KQuantCore<R, T>(u, a, acc);
    __m512 da[T];
    for (int t = 0; t < T; ++t) da[t] = _mm512_set1_ps(a[t]->d);
    for (int i = 0; i < R; ++i) {
      const __m512 dw = _mm512_set1_ps(u[i]->d);
      for (int t = 0; t < T; ++t) {
        const __m512 dd = _mm512_mul_ps(dw, da[t]);
        f[i][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i][t]), dd, f[i][t]);
        f[i][t] = _mm512_fnmadd_ps(u[i]->mdm, _mm512_load_ps(a[t]->bd), f[i][t]);
      }
    }
  }
};

// Q6_K: x = d * sc[j] * (q - 32), sub-blocks j of 16, sc signed.
// Per (row, token) and super-block:
//   S (exact) = KQuantCore + dpwssd(bsum, -32 * sc)
//             (= sum_j sc[j] * (q.a over j - 32 * bsum[j]))
//   f = fma(float(S), set1(d * da), f)
struct alignas(64) UnpackedQ6K {
  __m512i q[4];   // codes 0..63 in element order
  __m512i sc[2];  // int16 scale per packed lane (kScaleIndex16)
  __m512i m32;    // int16 lanes 0..15: -32 * sc[j]; lanes 16..31: 0
  float d;
};

struct Q6KTraits : Acc512 {
  static constexpr int64_t kStep = 256;
  static constexpr int kRows = 4, kToks = 4;
  static constexpr int kDirectRows = 1;
  static constexpr bool kPrefetch = false;
  using Unpacked = UnpackedQ6K;

  static void Unpack(const RowRef& rr, int64_t s, Unpacked* u) {
    const uint8_t* p = rr.row + s * 210;
    u->d = F16(p + 208);
    const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
    for (int h = 0; h < 2; ++h) {
      // Half h: ql[64h + l] low nibble = element 128h + l (l < 64), high = 128h + 64 + l;
      // qh[32h + l] bits 2k..2k+1 are the high bits of element 128h + 32k + l.
      const __m512i ql = _mm512_loadu_si512(p + 64 * h);
      const __m512i qh =
          _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)(p + 128 + 32 * h)));
      const __m512i hi0 =
          _mm512_and_si512(_mm512_slli_epi16(_mm512_srlv_epi16(qh, Halves16(0, 2)), 4), bits45);
      const __m512i hi1 =
          _mm512_and_si512(_mm512_slli_epi16(_mm512_srlv_epi16(qh, Halves16(4, 6)), 4), bits45);
      u->q[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, low4), hi0);
      u->q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4), hi1);
    }
    const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(p + 192)));
    const __m512i sc512 = _mm512_castsi256_si512(sc);
    for (int pair = 0; pair < 2; ++pair) {
      u->sc[pair] = _mm512_permutexvar_epi16(_mm512_load_si512(kScaleIndex16.idx[pair]), sc512);
    }
    u->m32 = _mm512_zextsi256_si512(_mm256_mullo_epi16(sc, _mm256_set1_epi16(-32)));
  }

  template <int R, int T>
  [[gnu::always_inline]] static void Step(const Unpacked* const* u, const Toks& k, int64_t s,
                                          __m512 (&f)[R][T]) {
    const ActBlockQ8K* a[T];
    for (int t = 0; t < T; ++t) a[t] = k.q8k(t, s);
    __m512i acc[R][T];
    KQuantCore<R, T>(u, a, acc);
    for (int t = 0; t < T; ++t) {
      // bsum[16] then d and padding: the upper 16 lanes meet the zero half of m32.
      const __m512i bs = _mm512_load_si512(a[t]->bsum);
      const __m512 da = _mm512_set1_ps(a[t]->d);
      for (int i = 0; i < R; ++i) {
        acc[i][t] = _mm512_dpwssd_epi32(acc[i][t], bs, u[i]->m32);
        const __m512 dd = _mm512_mul_ps(_mm512_set1_ps(u[i]->d), da);
        f[i][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i][t]), dd, f[i][t]);
      }
    }
  }
};

// The 32-block formats. A step is two blocks. Codes w (signed: Q8_0 [-128, 127], Q4_0
// [-8, 7], Q5_0 [-16, 15], MXFP4 [-12, 12]; unsigned: Q4_1 [0, 15], Q5_1 [0, 31]) times dw,
// plus m per block for Q4_1/Q5_1. The activation codes a are made unsigned (a + 128, i.e.
// a xor 0x80) for vpdpbusd, and corr = -128 * (sum of w per 4 lanes) is taken off in the
// accumulator's start value:
//   S (16 x int32, exact; lanes 0..7 block 2s, 8..15 block 2s + 1) = dpbusd(corr, a+128, w)
//   f = fma(float(S), dw * da, f)    (dw, da: per-lane block scales)
//   Q4_1/Q5_1: f = fma(mw, sa, f)    (mw: m of block 2s in lane 0, of 2s + 1 in lane 8, else
//                                     0; sa: the token's d * sum(a) of those blocks)
enum class Kind32 { kQ8_0, kQ4_0, kQ4_1, kQ5_0, kQ5_1, kMxfp4 };

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
  static constexpr bool kPrefetch = false;
  static constexpr bool kMin = HasMin(kKind);
  using Unpacked = std::conditional_t<kMin, Unpacked32Min, Unpacked32>;

  // Block bytes and the offsets of d, m, qh, qs in a block (-1: absent).
  static constexpr int64_t kBytes = kKind == Kind32::kQ8_0   ? 34
                                    : kKind == Kind32::kQ4_0 ? 18
                                    : kKind == Kind32::kQ4_1 ? 20
                                    : kKind == Kind32::kQ5_0 ? 22
                                    : kKind == Kind32::kQ5_1 ? 24
                                                             : 17;
  static constexpr int kQs = kKind == Kind32::kQ8_0   ? 2
                             : kKind == Kind32::kQ4_0 ? 2
                             : kKind == Kind32::kQ4_1 ? 4
                             : kKind == Kind32::kQ5_0 ? 6
                             : kKind == Kind32::kQ5_1 ? 8
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
  static constexpr bool kPrefetch = true;
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
    case GgmlType::kF32:
      return Run<FloatTraits<GgmlType::kF32>>(w, a, y, y_stride, r0, r1);
    case GgmlType::kF16:
      return Run<FloatTraits<GgmlType::kF16>>(w, a, y, y_stride, r0, r1);
    default:  // BF16
      return Run<FloatTraits<GgmlType::kBF16>>(w, a, y, y_stride, r0, r1);
  }
}

}  // namespace

const KernelTable& Avx512Kernels() {
  static const KernelTable table{QuantizeQ8_0, QuantizeQ8_K, MatMulAvx512};
  return table;
}

}  // namespace mt::kernels
