// AVX-512 K-quant products (Q4_K, Q5_K, Q6_K) on row panels: 16 weight rows are transposed so
// that lane i of every vector belongs to row i. One vpdpbusd then does 4 multiply-adds for
// each of 16 rows against 4 activation bytes broadcast from the token, so every instruction
// of the inner loop is useful work, and the result of a row ends in its own lane: no
// horizontal sums, no per-(row, token) scale shuffles.
//
// The transposed vectors come from one of two sources:
//  - GGUF rows (WeightLayout::kRows, e.g. mmap mode): transposed as they are read, 16 bytes
//    of 16 rows at a time (LoadChunk);
//  - a repacked panel (kPanels, made once by RepackKQuantAvx512 for the resident copies and
//    cache slots): the same vectors stored in order, read as one sequential stream.
// and go through one of two schedules, with the same arithmetic:
//  - few tokens (decode, small expert batches; n_tok <= the format's kFusedMaxToks, or in
//    kFusedPasses passes of that many): each super-block's codes go straight from the source
//    into the products, never leaving the registers, and each sub-block's sums are folded
//    into g as soon as they are complete;
//  - more tokens: each super-block of the panel is unpacked once into an L1 buffer, then
//    register tiles of up to 8 tokens run over it.
//
// The float op sequence per (row, token), the same for both schedules, every tile shape and
// every row split (so y(r, t) depends only on row r and token t):
//   per super-block, with the token's scale da and block sums bsum (ActBlockQ8K):
//     g = 0
//     Q4_K/Q5_K, for j = 0..7 (sub-blocks of 32):
//       S_j = sum of q * a over sub-block j                 (exact int32)
//       g = fma(float(S_j), d * sc[j], g)                   (d * sc[j] is exact in float)
//     Q4_K/Q5_K, then the minimum term of all 8 at once:
//       M = sum_j m[j] * (bsum[2j] + bsum[2j+1])            (exact int32, by vpdpwssd)
//       g = fnmadd(dmin, float(M), g)                       (|M| < 2^21: exact in float)
//     Q6_K, for j = 0..15 (sub-blocks of 16):
//       S_j = sum of q * a over j - 32 * bsum[j]           (exact int32; q = code 0..63)
//       g = fma(float(S_j), d * sc[j], g)
//     f = fma(g, da, f)
//   y = f
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

constexpr int kMaxToks = 8;  // tokens of a register tile

// ---- Formats ------------------------------------------------------------------------------
//
// A format reads super-block s of a panel: Read(src, s, emit, done) calls emit(j, g, codes)
// for each of its code vectors (lane i: the codes of row i for elements G .. G + 3 of the
// super-block, one byte each, G = kSub * j + 4 g; sub-blocks j of kSub elements) and
// done(j, scales) once all of sub-block j's are out, for j = 0, 1, ... in order; it returns
// the scales, from which Scale(j) and (K4 only) MinPairs are made. kFusedMaxToks: the most
// tokens the fused schedule takes (its live sums grow with the sub-blocks a format has open at
// once). Panels come from kernels/panel_source_avx512.h.

// Q4_K (kFifthBit false, 144 bytes) and Q5_K (true, 176 bytes): d, dmin (f16), 12 bytes of
// 6-bit scales and mins, [Q5_K: qh[32]], qs[128]. The 32 bytes of qs chunk c hold elements
// 64c + l (low nibble) and 64c + 32 + l (high nibble); Q5_K's bit 2c / 2c + 1 of qh[l] is
// their fifth bit. x = d * sc[j] * q - dmin * m[j].
template <bool kFifthBit>
struct K4 {
  static constexpr int64_t kBytes = kFifthBit ? 176 : 144;
  static constexpr int kSub = 32, kNumSub = 8;
  static constexpr int kFusedMaxToks = 4;  // two sub-blocks open at a time
  // Up to 8 tokens go as two fused passes: ~15-20 % faster than the buffered schedule
  // (kernels_bench gemm8 against gemm4, alternated).
  static constexpr int kFusedPasses = 2;

  struct Scales {
    __m512 d, dmin;
    __m512i u0, u1, u2;  // the 12 scale bytes as dwords
    // Bytes 0-3 low 6 bits = sc[0..3], bytes 4-7 = m[0..3]; sc[4..7] = low nibbles of bytes
    // 8-11 with the top two bits of bytes 0-3 above; m[4..7] = high nibbles of 8-11 with the
    // top two bits of bytes 4-7. Both exact in float.
    __m512 Scale(int j) const { return _mm512_mul_ps(d, _mm512_cvtepi32_ps(Sc(j))); }
    // The mins as int16 pairs for vpdpwssd: out[i] lane r = m[2i] | m[2i + 1] << 16 of row r.
    void MinPairs(__m512i out[4]) const {
      const __m512i lo = _mm512_and_si512(u1, _mm512_set1_epi32(0x3F3F3F3F));  // m[0..3]
      const __m512i hi = _mm512_or_si512(                                      // m[4..7]
          _mm512_and_si512(_mm512_srli_epi32(u2, 4), _mm512_set1_epi32(0x0F0F0F0F)),
          _mm512_and_si512(_mm512_srli_epi32(u1, 2), _mm512_set1_epi32(0x30303030)));
      // Bytes 0, 1 (or 2, 3) of each dword to its two 16-bit halves (0x80: a zero byte).
      const __m512i idx01 =
          _mm512_set4_epi32(static_cast<int32_t>(0x800D800Cu), static_cast<int32_t>(0x80098008u),
                            static_cast<int32_t>(0x80058004u), static_cast<int32_t>(0x80018000u));
      const __m512i idx23 =
          _mm512_set4_epi32(static_cast<int32_t>(0x800F800Eu), static_cast<int32_t>(0x800B800Au),
                            static_cast<int32_t>(0x80078006u), static_cast<int32_t>(0x80038002u));
      out[0] = _mm512_shuffle_epi8(lo, idx01);
      out[1] = _mm512_shuffle_epi8(lo, idx23);
      out[2] = _mm512_shuffle_epi8(hi, idx01);
      out[3] = _mm512_shuffle_epi8(hi, idx23);
    }
    // sc[j] of each row, as int32.
    __m512i Sc(int j) const {
      const __m512i m6 = _mm512_set1_epi32(63), m4 = _mm512_set1_epi32(15);
      const __m512i m2 = _mm512_set1_epi32(3);
      if (j < 4) return _mm512_and_si512(_mm512_srli_epi32(u0, 8 * j), m6);
      const int k = j - 4;
      return _mm512_or_si512(
          _mm512_and_si512(_mm512_srli_epi32(u2, 8 * k), m4),
          _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u0, 8 * k + 6), m2), 4));
    }
  };

  template <class Src, class Emit, class Done>
  [[gnu::always_inline]] static Scales Read(const Src& src, int64_t s, Emit&& emit, Done&& done) {
    constexpr int64_t kQs = kFifthBit ? 48 : 16;
    const __m512i low4 = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1);
    __m512i hdr[4], qh[8];
    src.Chunk(s, 0, hdr);
    const Scales sc{HalfLow(hdr[0]), HalfHigh(hdr[0]), hdr[1], hdr[2], hdr[3]};
    if (kFifthBit) {
      src.Chunk(s, 16, qh);  // qh[g] lane i = qh dword g of row i
      src.Chunk(s, 32, qh + 4);
    }
#pragma unroll
    for (int cc = 0; cc < 8; ++cc) {
      __m512i m[4];
      src.Chunk(s, kQs + 16 * cc, m);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        // qs dword 4 cc + k: chunk c, unit g: elements 64c + 4g.. (low), 64c + 32 + 4g.. (high).
        const int c = cc / 2, g = 4 * (cc % 2) + k;
        __m512i lo = _mm512_and_si512(m[k], low4);
        __m512i hi = _mm512_and_si512(_mm512_srli_epi16(m[k], 4), low4);
        if (kFifthBit) {
          const __m512i b0 = _mm512_and_si512(_mm512_srli_epi16(qh[g], 2 * c), one);
          const __m512i b1 = _mm512_and_si512(_mm512_srli_epi16(qh[g], 2 * c + 1), one);
          lo = _mm512_or_si512(lo, _mm512_slli_epi16(b0, 4));
          hi = _mm512_or_si512(hi, _mm512_slli_epi16(b1, 4));
        }
        emit(2 * c, g, lo);
        emit(2 * c + 1, g, hi);
      }
      if (cc % 2 == 1) {  // chunks 2c and 2c + 1 complete sub-blocks 2c and 2c + 1
        done(cc - 1, sc);
        done(cc, sc);
      }
    }
    return sc;
  }
};

// Q6_K (210 bytes): ql[128], qh[64], sc[16] (int8), d (f16). ql byte 64h + l: low nibble =
// element 128h + l, high = 128h + 64 + l (l < 64); qh byte 32h + l, bits 2k and 2k + 1: the
// top two bits of element 128h + 32k + l (l < 32). x = d * sc[j] * (q - 32).
struct Q6K {
  static constexpr int64_t kBytes = 210;
  static constexpr int kSub = 16, kNumSub = 16;
  static constexpr int kFusedMaxToks = 2;  // all 16 sub-blocks open until the end
  static constexpr int kFusedPasses = 1;   // two passes for 3-4 tokens measured no faster

  struct Scales {
    __m512 d;
    __m512i sc4[4];  // the 16 scale bytes as dwords
    __m512 Scale(int j) const {
      const __m512i sc = _mm512_srai_epi32(_mm512_slli_epi32(sc4[j / 4], 24 - 8 * (j % 4)), 24);
      return _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc));
    }
  };

  template <class Src, class Emit, class Done>
  [[gnu::always_inline]] static Scales Read(const Src& src, int64_t s, Emit&& emit, Done&& done) {
    const __m512i low4 = _mm512_set1_epi8(0x0F), three = _mm512_set1_epi8(3);
    Scales sc;
    src.Chunk(s, 192, sc.sc4);
    sc.d = _mm512_cvtph_ps(src.Last2(s));
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      __m512i qh[8];  // qh dwords 8h .. 8h + 7
      src.Chunk(s, 128 + 32 * h, qh);
      src.Chunk(s, 144 + 32 * h, qh + 4);
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        __m512i ql[4];  // ql dwords 16h + 4c + k
        src.Chunk(s, 64 * h + 16 * c, ql);
        // Elements 128h + 4G' .. + 3 for G' = 4c + k (low nibbles) and G' + 16 (high); their
        // top bits: qh unit 8h + G' % 8, shift 2 (G' / 8).
#pragma unroll
        for (int k = 0; k < 4; ++k) {
#pragma unroll
          for (int high = 0; high < 2; ++high) {
            const int gp = 4 * c + k + 16 * high;
            const __m512i nib = high ? _mm512_and_si512(_mm512_srli_epi16(ql[k], 4), low4)
                                     : _mm512_and_si512(ql[k], low4);
            const __m512i top =
                _mm512_and_si512(_mm512_srli_epi16(qh[gp % 8], 2 * (gp / 8)), three);
            const int G = 32 * h + gp;  // group of the super-block
            emit(G / 4, G % 4, _mm512_or_si512(nib, _mm512_slli_epi16(top, 4)));
          }
        }
      }
    }
    // Each chunk feeds sub-blocks 8h + c and 8h + c + 4, so all are complete only now.
#pragma unroll
    for (int j = 0; j < kNumSub; ++j) done(j, sc);
    return sc;
  }
};

// ---- Arithmetic ---------------------------------------------------------------------------

// The activation bytes of elements e .. e + 3 of a token's super-block, in every lane.
[[gnu::always_inline]] inline __m512i Bcast4(const ActBlockQ8K* a, int e) {
  int32_t v;
  std::memcpy(&v, a->qs + e, 4);
  return _mm512_set1_epi32(v);
}

// The start of S_j: 0, or -32 * bsum[j] for Q6_K.
template <class F>
[[gnu::always_inline]] inline __m512i SumStart(const ActBlockQ8K* a, int j) {
  if constexpr (F::kSub == 16) return _mm512_set1_epi32(-32 * a->bsum[j]);
  return _mm512_setzero_si512();
}

// g's steps for sub-block j (the sequence in the header).
template <class F>
[[gnu::always_inline]] inline __m512 FoldSub(const typename F::Scales& sc, int j, __m512i sum,
                                             __m512 g) {
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), sc.Scale(j), g);
}

// g's last step for a super-block: the minimum term of Q4_K/Q5_K (the header), T tokens.
template <class F, int T>
[[gnu::always_inline]] inline void FoldMins(const typename F::Scales& sc,
                                            const ActBlockQ8K* const* at, __m512* g) {
  if constexpr (F::kSub == 32) {
    __m512i mp[4];
    sc.MinPairs(mp);
#pragma unroll
    for (int t = 0; t < T; ++t) {
      __m512i m = _mm512_setzero_si512();
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        int32_t pair;
        std::memcpy(&pair, at[t]->bsum32 + 2 * i, 4);
        m = _mm512_dpwssd_epi32(m, mp[i], _mm512_set1_epi32(pair));
      }
      g[t] = _mm512_fnmadd_ps(sc.dmin, _mm512_cvtepi32_ps(m), g[t]);
    }
  }
}

// ---- Fused schedule (few tokens) ----------------------------------------------------------

// Rows of panel p, all super-blocks, T tokens: codes go from the transposition straight into
// the products.
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
    __m512i sum[F::kNumSub][T];  // S_j, open from its first group until done(j)
    __m512 g[T];
    for (int t = 0; t < T; ++t) g[t] = _mm512_setzero_ps();
    const typename F::Scales sc = F::Read(
        src, s,
        [&](int j, int gi, __m512i codes) {
#pragma unroll
          for (int t = 0; t < T; ++t) {
            const __m512i start = gi == 0 ? SumStart<F>(at[t], j) : sum[j][t];
            sum[j][t] = _mm512_dpbusd_epi32(start, codes, Bcast4(at[t], F::kSub * j + 4 * gi));
          }
        },
        [&](int j, const typename F::Scales& sc) {
#pragma unroll
          for (int t = 0; t < T; ++t) g[t] = FoldSub<F>(sc, j, sum[j][t], g[t]);
        });
    FoldMins<F, T>(sc, at, g);
    for (int t = 0; t < T; ++t) f[t] = _mm512_fmadd_ps(g[t], _mm512_set1_ps(at[t]->d), f[t]);
    if (next != nullptr) PrefetchPart(*next, s, n_sb);
  }
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + t * y_stride, p.mask, f[t]);
}

// ---- Buffered schedule (more tokens) ------------------------------------------------------

// One super-block of a panel, transposed: q[kGroups * j + g] as emitted, and the scales.
template <class F>
struct alignas(64) Unpacked {
  static constexpr int kGroups = F::kSub / 4;
  __m512i q[64];
  typename F::Scales sc;
};

// Tokens [0, T) of a register tile over super-block s (unpacked in u); f accumulates.
template <class F, int T>
[[gnu::noinline]] void Tile(const Unpacked<F>& u, int64_t s, const uint8_t* tok, int64_t tok_stride,
                            float* y, int64_t y_stride, __mmask16 mask) {
  constexpr int kGroups = Unpacked<F>::kGroups;
  constexpr int kChains = T >= 4 ? 1 : 4 / T;  // independent chains for few tokens
  const ActBlockQ8K* at[T];
  __m512 f[T], g[T];
  for (int t = 0; t < T; ++t) {
    at[t] = reinterpret_cast<const ActBlockQ8K*>(tok + t * tok_stride) + s;
    f[t] = s == 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask, y + t * y_stride);
    g[t] = _mm512_setzero_ps();
  }
#pragma unroll
  for (int j = 0; j < F::kNumSub; ++j) {
    __m512i acc[kChains][T];
    for (int t = 0; t < T; ++t) {
      acc[0][t] = SumStart<F>(at[t], j);
      for (int c = 1; c < kChains; ++c) acc[c][t] = _mm512_setzero_si512();
    }
#pragma unroll
    for (int gi = 0; gi < kGroups; ++gi) {
      const __m512i w = _mm512_load_si512(&u.q[kGroups * j + gi]);
#pragma unroll
      for (int t = 0; t < T; ++t) {
        acc[gi % kChains][t] =
            _mm512_dpbusd_epi32(acc[gi % kChains][t], w, Bcast4(at[t], F::kSub * j + 4 * gi));
      }
    }
    for (int t = 0; t < T; ++t) {
      for (int c = 1; c < kChains; ++c) acc[0][t] = _mm512_add_epi32(acc[0][t], acc[c][t]);
      g[t] = FoldSub<F>(u.sc, j, acc[0][t], g[t]);
    }
  }
  FoldMins<F, T>(u.sc, at, g);
  for (int t = 0; t < T; ++t) {
    f[t] = _mm512_fmadd_ps(g[t], _mm512_set1_ps(at[t]->d), f[t]);
    _mm512_mask_storeu_ps(y + t * y_stride, mask, f[t]);  // y holds f between super-blocks
  }
}

template <class F, class Src>
void BufferedPanel(const Src& src, const Panel& p, const Panel* next, const ActView& a, float* y,
                   int64_t y_stride) {
  constexpr int kGroups = Unpacked<F>::kGroups;
  alignas(64) Unpacked<F> u;
  const int64_t n_sb = a.cols / 256;
  for (int64_t s = 0; s < n_sb; ++s) {
    u.sc = F::Read(
        src, s, [&](int j, int g, __m512i codes) { u.q[kGroups * j + g] = codes; },
        [](int, const typename F::Scales&) {});
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
  static_assert(F::kFusedMaxToks == 2 || F::kFusedMaxToks == 4);
  if (a.n_tok > F::kFusedMaxToks && a.n_tok <= F::kFusedMaxToks * F::kFusedPasses) {
    // Tokens in groups of kFusedMaxToks, each a fused pass over the panel (after the first
    // pass it is in L1/L2); same op sequence per (row, token).
    FusedPanel<F, Src, F::kFusedMaxToks>(src, p, next, a, y, y_stride);
    ActView rest = a;
    rest.data += F::kFusedMaxToks * a.token_stride;
    rest.n_tok -= F::kFusedMaxToks;
    return RunPanel<F, Src>(src, p, nullptr, rest, y + F::kFusedMaxToks * y_stride, y_stride);
  }
  switch (a.n_tok <= F::kFusedMaxToks ? a.n_tok : 0) {
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

bool MatMulKQuantAvx512(const WeightView& w, const ActView& a, float* y, int64_t y_stride,
                        int64_t r0, int64_t r1) {
  switch (w.type) {
    case GgmlType::kQ4_K:
      RunPanels<K4<false>>(w, a, y, y_stride, r0, r1);
      return true;
    case GgmlType::kQ5_K:
      RunPanels<K4<true>>(w, a, y, y_stride, r0, r1);
      return true;
    case GgmlType::kQ6_K:
      RunPanels<Q6K>(w, a, y, y_stride, r0, r1);
      return true;
    default:
      return false;
  }
}

void RepackKQuantAvx512(GgmlType type, int64_t rows, int64_t cols, uint64_t row_bytes,
                        const uint8_t* src, uint8_t* dst, uint8_t* scratch) {
  // Every panel type has 256-element blocks; the layout depends only on their bytes.
  const int64_t n_sb = cols / 256, block_bytes = static_cast<int64_t>(row_bytes) / n_sb;
  const int64_t panel_bytes = kPanelRows * static_cast<int64_t>(row_bytes);
  for (int64_t r = 0; r < rows; r += kPanelRows) {
    // Through the scratch copy, so that dst may be src.
    std::memcpy(scratch, src + r * static_cast<int64_t>(row_bytes),
                static_cast<size_t>(panel_bytes));
    const Panel p{scratch, static_cast<int64_t>(row_bytes), kPanelRows, 0xFFFF};
    RepackPanel(p, block_bytes, n_sb, dst + r * static_cast<int64_t>(row_bytes));
  }
}

}  // namespace mt::kernels
