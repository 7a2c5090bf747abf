// AVX-512 (VNNI) products of Q2_K, Q3_K and IQ4_XS weights with kQ8_K activations, on 16-row
// panels as the other K-quants (matmul_kquant_avx512.cc, panels from
// kernels/panel_source_avx512.h): lane i of every vector is row i, one vpdpbusd does 4
// multiply-adds for each of 16 rows against 4 activation bytes broadcast from the token.
//
// Per (row, token) and super-block the sums are exact integers, and only they reach the float
// steps, the same in every schedule, tile and row split (batch invariance):
//   Q2_K   (x = d * sc[j] * q - dmin * m[j]; sub-blocks j of 16, q 0..3, sc and m 0..15):
//            S = sum_j sc[j] * D_j,  D_j = sum_{e in j} q a           (|D_j| < 2^13)
//            M = sum_j m[j] * bsum[j]
//            f = fma(float(S), d * da, f);  f = fnmadd(float(M), dmin * da, f)
//   Q3_K   (x = d * sc[j] * (q - 4); sub-blocks of 16, q 0..7, sc -32..31):
//            S = sum_j sc[j] * D_j - 4 * sum_j sc[j] * bsum[j]       (|D_j| < 2^14)
//            f = fma(float(S), d * da, f)
//   IQ4_XS (x = d * sc[j] * v[q]; sub-blocks of 32, v = kIq4nlValues, sc -32..31):
//            S = sum_j sc[j] * D_j - 128 * sum_j sc[j] * bsum32[j],  D_j = sum (v[q] + 128) a
//            f = fma(float(S), d * da, f)
// (float(S) is exact for Q2_K and Q3_K, |S| < 2^24; IQ4_XS's |S| < 2^28 rounds once.) The
// codes go into vpdpbusd unsigned (IQ4_XS: v + 128 by one vpshufb), so the sums D_j are of
// unsigned x signed bytes; the scale multiplies D_j by vpdpwssd where |D_j| < 2^15 (sc in the
// low half of a dword lane, 0 in the high half, so the product is D_j * sc exactly), by
// vpmulld for IQ4_XS; the bsum terms by vpdpwssd on int16 pairs.
//
// Schedules, as the other panel kernels: up to kFusedMaxToks tokens (decode) take the codes
// straight from the source into the products; more unpack each super-block of the panel once
// into an L1 buffer and run register tiles of up to kMaxToks tokens over it.
//
// Compiled with the AVX-512 flags; keeps the rules of matmul_internal.h (everything in an
// anonymous namespace, nothing shared inline).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/matmul_internal.h"
#include "kernels/panel_source_avx512.h"

namespace mt::kernels {
namespace {

constexpr int kMaxToks = 8;       // tokens of a register tile (buffered schedule)
constexpr int kFusedMaxToks = 4;  // tokens the fused schedule takes

// ---- Formats ------------------------------------------------------------------------------
//
// A format reads super-block s of a panel: ReadHeader(src, s) gives its scales; ReadCodes(src,
// s, h, emit) calls emit(j, g, codes) for each code vector (lane i: the unsigned codes of row
// i for elements kSub * j + 4 g .. + 3, one byte each), sub-block after sub-block, and
// emit_done(j) after sub-block j's last. Header::Scale(j): sc[j] per lane as an int32 in
// -32..31 (for vpdpwssd: the high half is the sign, 0 for sc >= 0... see ScaleTimes);
// Header::Pairs(out): the kPairs int16 pairs multiplying the token's bsum (kBsum32: bsum32)
// pairs; kSeparateMin: those go to M (Q2_K), else into S.

// Sub-block scales as int16 in the low half of each dword lane, 0 in the high half: vpdpwssd
// (acc, D, sc) then adds D.lo * sc + D.hi * 0, which is D * sc for |D| < 2^15.
__m512i LowHalf(__m512i v) { return _mm512_and_si512(v, _mm512_set1_epi32(0xFFFF)); }

// Q2_K (84 bytes): scales[16] at 0, qs[64] at 16, d and dmin (f16) at 80.
struct Q2K {
  static constexpr int64_t kBytes = 84;
  static constexpr int kSub = 16, kNumSub = 16, kPairs = 8;
  static constexpr bool kBsum32 = false, kSeparateMin = true, kMulScale = false;

  struct Header {
    __m512i sc[4];  // scales words 0..3: bytes = sc | m << 4 of sub-blocks 4w .. 4w + 3
    __m512 d, dmin;
    // sc[j] (0..15) in the low half of each lane.
    __m512i Scale(int j) const {
      const __m512i v = j % 4 == 0 ? sc[j / 4] : _mm512_srli_epi32(sc[j / 4], 8 * (j % 4));
      return _mm512_and_si512(v, _mm512_set1_epi32(0x0F));
    }
    // out[p] lane r = m[2p] | m[2p + 1] << 16 of row r.
    void Pairs(__m512i out[kPairs]) const {
      // Bytes 0, 1 (or 2, 3) of each dword to its two 16-bit halves (0x80: a zero byte); the
      // mins are their high nibbles.
      const __m512i idx01 =
          _mm512_set4_epi32(static_cast<int32_t>(0x800D800Cu), static_cast<int32_t>(0x80098008u),
                            static_cast<int32_t>(0x80058004u), static_cast<int32_t>(0x80018000u));
      const __m512i idx23 =
          _mm512_set4_epi32(static_cast<int32_t>(0x800F800Eu), static_cast<int32_t>(0x800B800Au),
                            static_cast<int32_t>(0x80078006u), static_cast<int32_t>(0x80038002u));
      for (int w = 0; w < 4; ++w) {
        out[2 * w] = _mm512_srli_epi16(_mm512_shuffle_epi8(sc[w], idx01), 4);
        out[2 * w + 1] = _mm512_srli_epi16(_mm512_shuffle_epi8(sc[w], idx23), 4);
      }
    }
  };

  template <class Src>
  [[gnu::always_inline]] static Header ReadHeader(const Src& src, int64_t s) {
    Header h;
    src.Chunk(s, 0, h.sc);
    __m512i tail[4];
    src.Chunk(s, 68, tail);  // words 68 .. 80: tail[3] = d | dmin << 16
    h.d = HalfLow(tail[3]);
    h.dmin = HalfHigh(tail[3]);
    return h;
  }

  // qs chunk G (words 4G .. 4G + 3 = qs bytes 16G ..): half n = G / 2, h = G % 2; bits 2k of
  // its word g are elements 128n + 32k + 16h + 4g .. + 3 = sub-block 8n + 2k + h, group g.
  template <class Src, class Emit, class Done>
  [[gnu::always_inline]] static void ReadCodes(const Src& src, int64_t s, const Header&,
                                               Emit&& emit, Done&& done) {
    const __m512i three = _mm512_set1_epi8(3);
#pragma unroll
    for (int G = 0; G < 4; ++G) {
      __m512i q[4];
      src.Chunk(s, 16 + 16 * G, q);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int j = 8 * (G / 2) + 2 * k + G % 2;
#pragma unroll
        for (int g = 0; g < 4; ++g) {
          const __m512i v = k == 0 ? q[g] : _mm512_srli_epi16(q[g], 2 * k);
          emit(j, g, _mm512_and_si512(v, three));
        }
        done(j);
      }
    }
  }
};

// Q3_K (110 bytes): hmask[32] at 0, qs[64] at 32, scales[12] at 96, d (f16) at 108.
struct Q3K {
  static constexpr int64_t kBytes = 110;
  static constexpr int kSub = 16, kNumSub = 16, kPairs = 8;
  static constexpr bool kBsum32 = false, kSeparateMin = false, kMulScale = false;

  struct Header {
    __m512i sc4[4];  // bytes: sc[4w .. 4w + 3] (signed, -32..31)
    __m512 d;
    // sc[j] sign-extended to the dword, then its low half (see LowHalf).
    __m512i Scale(int j) const {
      const __m512i v = _mm512_srai_epi32(_mm512_slli_epi32(sc4[j / 4], 24 - 8 * (j % 4)), 24);
      return LowHalf(v);
    }
    // out[p] lane r = -4 sc[2p] | (-4 sc[2p + 1]) << 16 (int16 each) of row r.
    void Pairs(__m512i out[kPairs]) const {
      // Bytes 0, 1 (2, 3) of each dword to the high byte of its two 16-bit halves; an
      // arithmetic shift by 6 then gives 4 * sc, which is negated.
      const __m512i idx01 =
          _mm512_set4_epi32(static_cast<int32_t>(0x0D800C80u), static_cast<int32_t>(0x09800880u),
                            static_cast<int32_t>(0x05800480u), static_cast<int32_t>(0x01800080u));
      const __m512i idx23 =
          _mm512_set4_epi32(static_cast<int32_t>(0x0F800E80u), static_cast<int32_t>(0x0B800A80u),
                            static_cast<int32_t>(0x07800680u), static_cast<int32_t>(0x03800280u));
      const __m512i zero = _mm512_setzero_si512();
      for (int w = 0; w < 4; ++w) {
        out[2 * w] =
            _mm512_sub_epi16(zero, _mm512_srai_epi16(_mm512_shuffle_epi8(sc4[w], idx01), 6));
        out[2 * w + 1] =
            _mm512_sub_epi16(zero, _mm512_srai_epi16(_mm512_shuffle_epi8(sc4[w], idx23), 6));
      }
    }
  };

  template <class Src>
  [[gnu::always_inline]] static Header ReadHeader(const Src& src, int64_t s) {
    __m512i w[4];
    src.Chunk(s, 92, w);  // words 92, 96, 100, 104: scales bytes 0-3, 4-7, 8-11 in w[1..3]
    const __m512i m0f = _mm512_set1_epi32(0x0F0F0F0F), m03 = _mm512_set1_epi32(0x03030303);
    Header h;
    // Sub-blocks 4q .. 4q + 3: low 4 bits from bytes 0-3 (q = 0, 2) or 4-7 (q = 1, 3), low
    // nibbles for q < 2, high for q >= 2; high 2 bits: bits 2q, 2q + 1 of bytes 8-11.
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const __m512i low = _mm512_and_si512(_mm512_srli_epi32(w[1 + q % 2], 4 * (q / 2)), m0f);
      const __m512i high = _mm512_and_si512(_mm512_srli_epi32(w[3], 2 * q), m03);
      const __m512i sc = _mm512_or_si512(low, _mm512_slli_epi32(high, 4));  // 0..63
      h.sc4[q] = _mm512_sub_epi8(sc, _mm512_set1_epi8(32));
    }
    h.d = _mm512_cvtph_ps(src.Last2(s));
    return h;
  }

  // As Q2_K's codes, plus the high bit: for qs word 4G + g (G = 2n + h), bit 4n + k of hmask
  // word 4h + g.
  template <class Src, class Emit, class Done>
  [[gnu::always_inline]] static void ReadCodes(const Src& src, int64_t s, const Header&,
                                               Emit&& emit, Done&& done) {
    const __m512i three = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4);
    __m512i hm[8];
    src.Chunk(s, 0, hm);
    src.Chunk(s, 16, hm + 4);
#pragma unroll
    for (int G = 0; G < 4; ++G) {
      __m512i q[4];
      src.Chunk(s, 32 + 16 * G, q);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int n = G / 2, j = 8 * n + 2 * k + G % 2;
        const __m512i bit = _mm512_set1_epi8(static_cast<char>(1 << (4 * n + k)));
#pragma unroll
        for (int g = 0; g < 4; ++g) {
          const __m512i v = k == 0 ? q[g] : _mm512_srli_epi16(q[g], 2 * k);
          const __mmask64 high = _mm512_test_epi8_mask(hm[4 * (G % 2) + g], bit);
          const __m512i low = _mm512_and_si512(v, three);
          emit(j, g, _mm512_mask_add_epi8(low, high, low, four));
        }
        done(j);
      }
    }
  }
};

// IQ4_XS (136 bytes): d (f16) and scales_h at 0, scales_l[4] at 4, qs[128] at 8.
struct IQ4XS {
  static constexpr int64_t kBytes = 136;
  static constexpr int kSub = 32, kNumSub = 8, kPairs = 4;
  static constexpr bool kBsum32 = true, kSeparateMin = false, kMulScale = true;

  struct Header {
    __m512i w0, w1;  // d | scales_h << 16; scales_l
    __m512 d;
    // sc[j] = ls[j] - 32 as an int32 (for vpmulld).
    __m512i Scale(int j) const {
      const __m512i low = _mm512_and_si512(_mm512_srli_epi32(w1, 4 * j), _mm512_set1_epi32(15));
      const __m512i high =
          _mm512_and_si512(_mm512_srli_epi32(w0, 16 + 2 * j), _mm512_set1_epi32(3));
      return _mm512_sub_epi32(_mm512_or_si512(low, _mm512_slli_epi32(high, 4)),
                              _mm512_set1_epi32(32));
    }
    // out[p] lane r = -128 sc[2p] | (-128 sc[2p + 1]) << 16 (int16 each) of row r.
    void Pairs(__m512i out[kPairs]) const {
      const __m512i m128 = _mm512_set1_epi32(-128);
      for (int p = 0; p < kPairs; ++p) {
        const __m512i lo = _mm512_mullo_epi32(Scale(2 * p), m128);
        const __m512i hi = _mm512_mullo_epi32(Scale(2 * p + 1), m128);
        out[p] = _mm512_or_si512(LowHalf(lo), _mm512_slli_epi32(hi, 16));
      }
    }
  };

  template <class Src>
  [[gnu::always_inline]] static Header ReadHeader(const Src& src, int64_t s) {
    __m512i w[4];
    src.Chunk(s, 0, w);
    return Header{w[0], w[1], HalfLow(w[0])};
  }

  // Sub-block j's 16 bytes at 8 + 16 j: word k's low nibbles are elements 32j + 4k .. + 3
  // (group k), its high nibbles 32j + 16 + 4k .. (group 4 + k).
  template <class Src, class Emit, class Done>
  [[gnu::always_inline]] static void ReadCodes(const Src& src, int64_t s, const Header&,
                                               Emit&& emit, Done&& done) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    // kIq4nlValues + 128, as unsigned bytes.
    const __m512i table = _mm512_broadcast_i32x4(_mm_setr_epi8(
        1, 24, 45, 63, 79, 93, 106, 118, static_cast<char>(129), static_cast<char>(141),
        static_cast<char>(153), static_cast<char>(166), static_cast<char>(181),
        static_cast<char>(197), static_cast<char>(217), static_cast<char>(241)));
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      __m512i q[4];
      src.Chunk(s, 8 + 16 * j, q);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        emit(j, k, _mm512_shuffle_epi8(table, _mm512_and_si512(q[k], low4)));
        emit(j, 4 + k,
             _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(q[k], 4), low4)));
      }
      done(j);
    }
  }
};

// ---- Arithmetic ---------------------------------------------------------------------------

// The activation bytes of elements e .. e + 3 of a token's super-block, in every lane.
[[gnu::always_inline]] inline __m512i Bcast4(const ActBlockQ8K* a, int e) {
  int32_t v;
  std::memcpy(&v, a->qs + e, 4);
  return _mm512_set1_epi32(v);
}

// S += sc[j] * D (the header's schedule of each format).
template <class F>
[[gnu::always_inline]] inline __m512i AddScaled(const __m512i& sc, __m512i d, __m512i s) {
  if constexpr (F::kMulScale) return _mm512_add_epi32(s, _mm512_mullo_epi32(d, sc));
  return _mm512_dpwssd_epi32(s, d, sc);
}

// sum_p pairs[p] * (the token's bsum pairs), by vpdpwssd, added to c.
template <class F>
[[gnu::always_inline]] inline __m512i AddPairs(const __m512i* pairs, const ActBlockQ8K* a,
                                               __m512i c) {
  const int16_t* sums = F::kBsum32 ? a->bsum32 : a->bsum;
#pragma unroll
  for (int p = 0; p < F::kPairs; ++p) {
    int32_t pair;
    std::memcpy(&pair, sums + 2 * p, 4);
    c = _mm512_dpwssd_epi32(c, pairs[p], _mm512_set1_epi32(pair));
  }
  return c;
}

// The float steps of a super-block for one token (the header).
template <class F>
[[gnu::always_inline]] inline __m512 Fold(const typename F::Header& h, __m512i s, __m512i m,
                                          float da, __m512 f) {
  const __m512 vda = _mm512_set1_ps(da);
  f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(h.d, vda), f);
  if constexpr (F::kSeparateMin) {
    f = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(m), _mm512_mul_ps(h.dmin, vda), f);
  }
  return f;
}

// ---- Fused schedule (few tokens) ----------------------------------------------------------

template <class F, class Src, int T>
[[gnu::noinline]] void FusedPanel(const Src& src, const Panel& p, const Panel* next,
                                  const ActView& a, float* y, int64_t y_stride) {
  const int64_t n_sb = a.cols / 256;
  __m512 f[T];
  for (int t = 0; t < T; ++t) f[t] = _mm512_setzero_ps();
  for (int64_t s = 0; s < n_sb; ++s) {
    const ActBlockQ8K* at[T];
    for (int t = 0; t < T; ++t) {
      at[t] = reinterpret_cast<const ActBlockQ8K*>(a.data + t * a.token_stride) + s;
    }
    const typename F::Header h = F::ReadHeader(src, s);
    __m512i acc[2][T], d[T], m[T];
    for (int t = 0; t < T; ++t) acc[0][t] = acc[1][t] = m[t] = _mm512_setzero_si512();
    F::ReadCodes(
        src, s, h,
        [&](int j, int g, __m512i codes) {
#pragma unroll
          for (int t = 0; t < T; ++t) {
            const __m512i start = g == 0 ? _mm512_setzero_si512() : d[t];
            d[t] = _mm512_dpbusd_epi32(start, codes, Bcast4(at[t], F::kSub * j + 4 * g));
          }
        },
        [&](int j) {
          const __m512i sc = h.Scale(j);
#pragma unroll
          for (int t = 0; t < T; ++t) acc[j % 2][t] = AddScaled<F>(sc, d[t], acc[j % 2][t]);
        });
    __m512i pairs[F::kPairs];
    h.Pairs(pairs);
    for (int t = 0; t < T; ++t) {
      __m512i s_sum = _mm512_add_epi32(acc[0][t], acc[1][t]);
      if constexpr (F::kSeparateMin) {
        m[t] = AddPairs<F>(pairs, at[t], m[t]);
      } else {
        s_sum = AddPairs<F>(pairs, at[t], s_sum);
      }
      f[t] = Fold<F>(h, s_sum, m[t], at[t]->d, f[t]);
    }
    if (next != nullptr) PrefetchPart(*next, s, n_sb);
  }
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + t * y_stride, p.mask, f[t]);
}

// ---- Buffered schedule (more tokens) ------------------------------------------------------

// One super-block of a panel, unpacked: the code vectors in emission order, the scales and
// pairs, the header.
template <class F>
struct alignas(64) Unpacked {
  static constexpr int kGroups = F::kSub / 4;
  __m512i q[64];
  __m512i sc[F::kNumSub];
  __m512i pairs[F::kPairs];
  typename F::Header h;
};

// Tokens [0, T) of a register tile over super-block s (unpacked in u); y holds f between
// super-blocks.
template <class F, int T>
[[gnu::noinline]] void Tile(const Unpacked<F>& u, int64_t s, const uint8_t* tok, int64_t tok_stride,
                            float* y, int64_t y_stride, __mmask16 mask) {
  constexpr int kGroups = Unpacked<F>::kGroups;
  const ActBlockQ8K* at[T];
  __m512i acc[T];
  for (int t = 0; t < T; ++t) {
    at[t] = reinterpret_cast<const ActBlockQ8K*>(tok + t * tok_stride) + s;
    acc[t] = _mm512_setzero_si512();
  }
#pragma unroll
  for (int j = 0; j < F::kNumSub; ++j) {
    __m512i d[T];
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      const __m512i w = _mm512_load_si512(&u.q[kGroups * j + g]);
#pragma unroll
      for (int t = 0; t < T; ++t) {
        const __m512i start = g == 0 ? _mm512_setzero_si512() : d[t];
        d[t] = _mm512_dpbusd_epi32(start, w, Bcast4(at[t], F::kSub * j + 4 * g));
      }
    }
    const __m512i sc = _mm512_load_si512(&u.sc[j]);
    for (int t = 0; t < T; ++t) acc[t] = AddScaled<F>(sc, d[t], acc[t]);
  }
  for (int t = 0; t < T; ++t) {
    __m512i m = _mm512_setzero_si512();
    if constexpr (F::kSeparateMin) {
      m = AddPairs<F>(u.pairs, at[t], m);
    } else {
      acc[t] = AddPairs<F>(u.pairs, at[t], acc[t]);
    }
    const __m512 f0 = s == 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask, y + t * y_stride);
    _mm512_mask_storeu_ps(y + t * y_stride, mask, Fold<F>(u.h, acc[t], m, at[t]->d, f0));
  }
}

template <class F, class Src>
void BufferedPanel(const Src& src, const Panel& p, const Panel* next, const ActView& a, float* y,
                   int64_t y_stride) {
  constexpr int kGroups = Unpacked<F>::kGroups;
  alignas(64) Unpacked<F> u;
  const int64_t n_sb = a.cols / 256;
  for (int64_t s = 0; s < n_sb; ++s) {
    u.h = F::ReadHeader(src, s);
    F::ReadCodes(
        src, s, u.h, [&](int j, int g, __m512i codes) { u.q[kGroups * j + g] = codes; },
        [&](int j) { u.sc[j] = u.h.Scale(j); });
    u.h.Pairs(u.pairs);
    if (next != nullptr) PrefetchPart(*next, s, n_sb);
    for (int64_t t0 = 0; t0 < a.n_tok; t0 += kMaxToks) {
      const uint8_t* tok = a.data + t0 * a.token_stride;
      float* yt = y + t0 * y_stride;
      const int64_t n = a.n_tok - t0 < kMaxToks ? a.n_tok - t0 : kMaxToks;
      switch (n) {
        case 1:
          Tile<F, 1>(u, s, tok, a.token_stride, yt, y_stride, p.mask);
          break;
        case 2:
          Tile<F, 2>(u, s, tok, a.token_stride, yt, y_stride, p.mask);
          break;
        case 3:
          Tile<F, 3>(u, s, tok, a.token_stride, yt, y_stride, p.mask);
          break;
        case 4:
          Tile<F, 4>(u, s, tok, a.token_stride, yt, y_stride, p.mask);
          break;
        case 5:
          Tile<F, 5>(u, s, tok, a.token_stride, yt, y_stride, p.mask);
          break;
        case 6:
          Tile<F, 6>(u, s, tok, a.token_stride, yt, y_stride, p.mask);
          break;
        case 7:
          Tile<F, 7>(u, s, tok, a.token_stride, yt, y_stride, p.mask);
          break;
        default:
          Tile<F, 8>(u, s, tok, a.token_stride, yt, y_stride, p.mask);
          break;
      }
    }
  }
}

template <class F, class Src>
void RunPanel(const Src& src, const Panel& p, const Panel* next, const ActView& a, float* y,
              int64_t y_stride) {
  switch (a.n_tok <= kFusedMaxToks ? a.n_tok : 0) {
    case 1:
      return FusedPanel<F, Src, 1>(src, p, next, a, y, y_stride);
    case 2:
      return FusedPanel<F, Src, 2>(src, p, next, a, y, y_stride);
    case 3:
      return FusedPanel<F, Src, 3>(src, p, next, a, y, y_stride);
    case 4:
      return FusedPanel<F, Src, 4>(src, p, next, a, y, y_stride);
    default:
      return BufferedPanel<F, Src>(src, p, next, a, y, y_stride);
  }
}

// Rows [r0, r1) in panels of 16, prefetching the next panel while one computes.
template <class F>
void RunPanels(const WeightView& w, const ActView& a, float* y, int64_t y_stride, int64_t r0,
               int64_t r1) {
  for (int64_t r = r0; r < r1; r += kPanelRows) {
    const Panel p = MakePanel(w, r, r1);
    const bool has_next = r + kPanelRows < r1;
    const Panel next = MakePanel(w, has_next ? r + kPanelRows : r, r1);
    const Panel* pn = has_next ? &next : nullptr;
    if (w.panels) {
      RunPanel<F>(PackedSource{p.base, F::kBytes}, p, pn, a, y + r, y_stride);
    } else {
      RunPanel<F>(RowSource{p, F::kBytes}, p, pn, a, y + r, y_stride);
    }
  }
}

}  // namespace

bool MatMulLowBitAvx512(const WeightView& w, const ActView& a, float* y, int64_t y_stride,
                        int64_t r0, int64_t r1) {
  switch (w.type) {
    case GgmlType::kQ2_K:
      RunPanels<Q2K>(w, a, y, y_stride, r0, r1);
      return true;
    case GgmlType::kQ3_K:
      RunPanels<Q3K>(w, a, y, y_stride, r0, r1);
      return true;
    case GgmlType::kIQ4_XS:
      RunPanels<IQ4XS>(w, a, y, y_stride, r0, r1);
      return true;
    default:
      return false;
  }
}

}  // namespace mt::kernels
