// The blocking driver shared by the per-ISA matmul files (all formats on AVX2; all but the
// K-quants on AVX-512, see matmul_kquant_avx512.cc). Include it ONLY from a per-ISA
// file (matmul_avx2.cc, matmul_avx512.cc, matmul_iq_avx2.cc, matmul_iq_avx512.cc,
// matmul_lowbit_avx2.cc), after
// <immintrin.h>: everything here is in an anonymous namespace, so each file gets its own copy
// compiled with its own flags (see the ODR note in matmul_internal.h).
//
// A format's traits class F provides:
//   using Acc = the vector type of one float accumulator (__m256 / __m512);
//   static Acc Zero();  static float Reduce(Acc);   fixed-order horizontal sum
//                       (inherit Acc256 / Acc512, defined below)
//   kStep                 columns per step (a run of columns with one set of weight scales)
//   kRows, kToks          register tile: rows x tokens
//   kDirectRows           rows interleaved in the few-token path
//   kPrefetchAhead        bytes ahead of a step that the few-token path prefetches (0: none)
//   Unpacked              one row's step, unpacked (codes in element order, scale vectors)
//   Unpack(RowRef, s, Unpacked*)
//   Step<R, T>(u[R], Toks, s, f[R][T])   accumulate step s of R rows x T tokens
// (kDirectRows and kPrefetchAhead were chosen by measurement on DRAM-resident weights: 1 row
// for the quantized formats, 4 rows with prefetch for the float ones, whose single FMA chain
// per row would otherwise be latency-bound; a prefetch stream for those quantized formats
// whose unpack is long enough to starve the hardware prefetcher: AVX2 Q6_K.)
//
// Loop structure, per call (rows [r0, r1), all tokens):
//  - n_tok <= kDirectMaxTok (decode): kDirectRows rows at a time, each step unpacked into
//    registers and used at once by all tokens (Direct).
//  - otherwise: panels of kRows rows; for each block of kTokBlock tokens, as many steps of
//    the panel as fit in kPanelBytes are unpacked into an L1-resident buffer and register
//    tiles of kRows x kToks (then 1-token tiles for the rest) run over them (Tile). A token
//    block's accumulators live in a small array between panels of steps.
// Either way each (row, token) gets one accumulator and the same Step ops in the same order,
// so its result does not depend on n_tok, on the other tokens, or on [r0, r1).
#pragma once

#include <cstdint>

#include "kernels/lane_sum.h"
#include "kernels/matmul_internal.h"

namespace mt::kernels {
namespace {

// The accumulator part of a traits class (F::Acc, F::Zero, F::Reduce): one float vector
// per (row, token), its lanes summed in lane_sum.h's fixed order.
struct Acc256 {
  using Acc = __m256;
  static __m256 Zero() { return _mm256_setzero_ps(); }
  static float Reduce(__m256 v) { return Reduce8(v); }
};

#ifdef __AVX512F__
struct Acc512 {
  using Acc = __m512;
  static __m512 Zero() { return _mm512_setzero_ps(); }
  static float Reduce(__m512 v) { return Reduce16(v); }
};
#endif

// Where a row's bytes are and what they hold.
struct RowRef {
  const uint8_t* row;
  int64_t cols;
  GgmlType type;
};

// The tokens of a tile: token t's row at base + t * stride; for kQ8_0 rows the block scales
// start at d_off and the scaled block sums at s_off (matmul_internal.h).
struct Toks {
  const uint8_t* base;
  int64_t stride;
  int64_t d_off;
  int64_t s_off;
  const uint8_t* row(int t) const { return base + t * stride; }
  const ActBlockQ8K* q8k(int t, int64_t s) const {
    return reinterpret_cast<const ActBlockQ8K*>(row(t)) + s;
  }
  const float* f32(int t) const { return reinterpret_cast<const float*>(row(t)); }
  const float* scales(int t) const { return reinterpret_cast<const float*>(row(t) + d_off); }
  const float* sums(int t) const { return reinterpret_cast<const float*>(row(t) + s_off); }
};

constexpr int64_t kPanelBytes = 24 * 1024;  // unpacked weights of a panel: half of L1
constexpr int kTokBlock = 16;               // tokens whose accumulators live at once
constexpr int kDirectMaxTok = 4;

// Steps [0, n) of R rows (row i at panel + i * panel_stride) x T tokens.
// acc[i * kTokBlock + t] holds the accumulator of (row i, token t).
template <class F, int R, int T>
[[gnu::noinline]] void Tile(const typename F::Unpacked* panel, int64_t panel_stride, int64_t n,
                            const Toks& k, int64_t s0, typename F::Acc* acc) {
  typename F::Acc f[R][T];
  for (int i = 0; i < R; ++i) {
    for (int t = 0; t < T; ++t) f[i][t] = acc[i * kTokBlock + t];
  }
  for (int64_t s = 0; s < n; ++s) {
    const typename F::Unpacked* u[R];
    for (int i = 0; i < R; ++i) u[i] = panel + i * panel_stride + s;
    F::template Step<R, T>(u, k, s0 + s, f);
  }
  for (int i = 0; i < R; ++i) {
    for (int t = 0; t < T; ++t) acc[i * kTokBlock + t] = f[i][t];
  }
}

// nt tokens: tiles of F::kToks tokens, then single tokens.
template <class F, int R>
void Tokens(const typename F::Unpacked* panel, int64_t panel_stride, int64_t n, const Toks& k,
            int nt, int64_t s0, typename F::Acc* acc) {
  constexpr int T = F::kToks;
  int t = 0;
  for (; t + T <= nt; t += T) {
    Tile<F, R, T>(panel, panel_stride, n, Toks{k.row(t), k.stride, k.d_off, k.s_off}, s0, acc + t);
  }
  for (; t < nt; ++t) {
    Tile<F, R, 1>(panel, panel_stride, n, Toks{k.row(t), k.stride, k.d_off, k.s_off}, s0, acc + t);
  }
}

// Few tokens: each row's step is unpacked into registers and used at once by all T tokens.
// R rows at a time (independent accumulator chains for the out-of-order core).
template <class F, int R, int T>
void DirectRows(const WeightView& w, const Toks& k, float* y, int64_t y_stride, int64_t r) {
  const int64_t steps = (w.cols + F::kStep - 1) / F::kStep;
  RowRef rr[R];
  for (int i = 0; i < R; ++i) rr[i] = RowRef{w.data + (r + i) * w.row_bytes, w.cols, w.type};
  typename F::Acc f[R][T];
  for (int i = 0; i < R; ++i) {
    for (int t = 0; t < T; ++t) f[i][t] = F::Zero();
  }
  // Weight bytes per step (exact: a step is whole blocks; F32 has row_bytes = 4 * cols).
  const int64_t step_bytes = static_cast<int64_t>(w.row_bytes) * F::kStep / w.cols;
  for (int64_t s = 0; s < steps; ++s) {
    typename F::Unpacked u[R];
    const typename F::Unpacked* up[R];
    for (int i = 0; i < R; ++i) {
      if constexpr (F::kPrefetchAhead > 0) {
        // Every cache line of the step, kPrefetchAhead bytes ahead (rows are contiguous, so
        // past a row's end it is the next row's).
        const char* ahead =
            reinterpret_cast<const char*>(rr[i].row + s * step_bytes + F::kPrefetchAhead);
        _mm_prefetch(ahead, _MM_HINT_T0);
        for (int64_t o = 64; o < step_bytes; o += 64) _mm_prefetch(ahead + o, _MM_HINT_T0);
      }
      F::Unpack(rr[i], s, &u[i]);
      up[i] = &u[i];
    }
    F::template Step<R, T>(up, k, s, f);
  }
  for (int i = 0; i < R; ++i) {
    for (int t = 0; t < T; ++t) y[t * y_stride + r + i] = F::Reduce(f[i][t]);
  }
}

template <class F, int T>
[[gnu::noinline]] void Direct(const WeightView& w, const Toks& k, float* y, int64_t y_stride,
                              int64_t r0, int64_t r1) {
  constexpr int R = F::kDirectRows;
  int64_t r = r0;
  for (; r + R <= r1; r += R) DirectRows<F, R, T>(w, k, y, y_stride, r);
  for (; r < r1; ++r) DirectRows<F, 1, T>(w, k, y, y_stride, r);
}

// Prefetches (into L2) the bytes of steps [s0, s0 + ks) of rows [r, r + kRows) that exist.
template <class F>
void PrefetchPanel(const WeightView& w, int64_t r, int64_t s0, int64_t ks) {
  const int64_t step_bytes = static_cast<int64_t>(w.row_bytes) * F::kStep / w.cols;
  const int64_t r_end = r + F::kRows < w.rows ? r + F::kRows : w.rows;
  for (; r < r_end; ++r) {
    const uint8_t* p = w.data + r * w.row_bytes + s0 * step_bytes;
    for (int64_t b = 0; b < ks * step_bytes; b += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(p + b), _MM_HINT_T1);
    }
  }
}

template <class F>
void Run(const WeightView& w, const ActView& a, float* y, int64_t y_stride, int64_t r0,
         int64_t r1) {
  const int64_t nbp = Q8_0PaddedBlocks(w.cols);
  const int64_t d_off = Q8_0ScaleOffset(nbp), s_off = Q8_0SumOffset(nbp);
  if (a.n_tok <= kDirectMaxTok) {
    const Toks k{a.data, a.token_stride, d_off, s_off};
    switch (a.n_tok) {
      case 1:
        return Direct<F, 1>(w, k, y, y_stride, r0, r1);
      case 2:
        return Direct<F, 2>(w, k, y, y_stride, r0, r1);
      case 3:
        return Direct<F, 3>(w, k, y, y_stride, r0, r1);
      default:
        return Direct<F, 4>(w, k, y, y_stride, r0, r1);
    }
  }
  using U = typename F::Unpacked;
  constexpr int R = F::kRows;
  constexpr int64_t KS = kPanelBytes / (R * sizeof(U)) > 0 ? kPanelBytes / (R * sizeof(U)) : 1;
  const int64_t steps = (w.cols + F::kStep - 1) / F::kStep;
  alignas(64) U panel[R * KS];
  typename F::Acc acc[R * kTokBlock];
  for (int64_t r = r0; r < r1; r += R) {
    const int nr = static_cast<int>(r1 - r < R ? r1 - r : R);
    for (int64_t t0 = 0; t0 < a.n_tok; t0 += kTokBlock) {
      const int nt = static_cast<int>(a.n_tok - t0 < kTokBlock ? a.n_tok - t0 : kTokBlock);
      for (int i = 0; i < nr; ++i) {
        for (int t = 0; t < nt; ++t) acc[i * kTokBlock + t] = F::Zero();
      }
      const Toks k{a.data + t0 * a.token_stride, a.token_stride, d_off, s_off};
      for (int64_t s0 = 0; s0 < steps; s0 += KS) {
        const int64_t ks = steps - s0 < KS ? steps - s0 : KS;
        for (int i = 0; i < nr; ++i) {
          const RowRef rr{w.data + (r + i) * w.row_bytes, w.cols, w.type};
          for (int64_t s = 0; s < ks; ++s) F::Unpack(rr, s0 + s, &panel[i * KS + s]);
        }
        // The weights come from DRAM and the unpack stalls on them: fetch the next panel's
        // bytes for these steps into L2 while the tiles below compute.
        if (t0 == 0) PrefetchPanel<F>(w, r + R, s0, ks);
        if (nr == R) {
          Tokens<F, R>(panel, KS, ks, k, nt, s0, acc);
        } else {
          for (int i = 0; i < nr; ++i) {
            Tokens<F, 1>(panel + i * KS, KS, ks, k, nt, s0, acc + i * kTokBlock);
          }
        }
      }
      for (int i = 0; i < nr; ++i) {
        for (int t = 0; t < nt; ++t) {
          y[(t0 + t) * y_stride + r + i] = F::Reduce(acc[i * kTokBlock + t]);
        }
      }
    }
  }
}

}  // namespace
}  // namespace mt::kernels
