// AVX-512 BF16 products for BF16 weights (vdpbf16ps), on CPUs with AVX512_BF16 (Zen 4,
// Sapphire Rapids and later; the AVX-512 variant calls MatMulBf16Avx512 only there).
// Compiled with the AVX-512 flags plus -mavx512bf16; keeps the rules of matmul_internal.h.
//
// A step is 32 columns: 32 weights (64 bytes, as stored) against the token's f32 activations
// rounded to bf16 (round to nearest even, as llama.cpp does for bf16 weights), one
// vdpbf16ps per (row, token): lane i adds w[2i] x[2i] + w[2i + 1] x[2i + 1] to the running
// value (the instruction's own rounding; denormals are flushed). The 16 lanes are summed
// with Reduce16. So y(r, t) depends on row r and token t only (batch invariance), and
// differs from the f32 path by the activation rounding: |err| <= 2^-8 sum |w x| about.
#include <immintrin.h>

#include <cstdint>

#include "kernels/lane_sum.h"
#include "kernels/matmul_driver.h"
#include "kernels/matmul_internal.h"

namespace mt::kernels {
namespace {

struct alignas(64) UnpackedBf16 {
  __m512i w;  // 32 bf16 weights
};

struct Bf16DotTraits : Acc512 {
  static constexpr int64_t kStep = 32;
  static constexpr int kRows = 4, kToks = 4;
  static constexpr int kDirectRows = 4;
  static constexpr int64_t kPrefetchAhead = 512;
  using Unpacked = UnpackedBf16;

  static void Unpack(const RowRef& rr, int64_t s, Unpacked* u) {
    const int64_t left = rr.cols - 32 * s;
    const __mmask32 m = left >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << left) - 1);
    u->w = _mm512_maskz_loadu_epi16(m, rr.row + 64 * s);
  }

  // The activation rows are padded with zeros to 32 columns (matmul_internal.h), so a step
  // never reads past its token's row; weights past the row's end are 0.
  template <int R, int T>
  [[gnu::always_inline]] static void Step(const Unpacked* const* u, const Toks& k, int64_t s,
                                          __m512 (&f)[R][T]) {
    __m512bh x[T];
    for (int t = 0; t < T; ++t) {
      const float* p = k.f32(t) + 32 * s;
      x[t] = _mm512_cvtne2ps_pbh(_mm512_load_ps(p + 16), _mm512_load_ps(p));
    }
    for (int i = 0; i < R; ++i) {
      const __m512bh w = (__m512bh)u[i]->w;
      for (int t = 0; t < T; ++t) f[i][t] = _mm512_dpbf16_ps(f[i][t], w, x[t]);
    }
  }
};

}  // namespace

void MatMulBf16Avx512(const WeightView& w, const ActView& a, float* y, int64_t y_stride, int64_t r0,
                      int64_t r1) {
  Run<Bf16DotTraits>(w, a, y, y_stride, r0, r1);
}

}  // namespace mt::kernels
