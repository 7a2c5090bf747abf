// AVX-512 variant of DeltaRuleStep (kernels/delta_net.h). Per row: 16-lane FMA chains over
// the 16-float chunks of dim_k (a tail chunk masked to zero), Reduce16 of the lanes. Four
// rows go through the chunks together (their chains are independent, so the FMA latency
// overlaps); each row's op sequence is the same as alone.
#include <immintrin.h>

#include "kernels/delta_net.h"
#include "kernels/lane_sum.h"

namespace mt::kernels {
namespace {

__mmask16 TailMask16(int left) {
  return left >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << left) - 1);
}

// Rows j0 .. j0 + R - 1.
template <int R>
void Rows(const DeltaRuleArgs& a, int j0) {
  const int dk = a.dim_k;
  const __m512 decay = _mm512_set1_ps(a.decay);
  const float* in[R];
  float* row[R];
  __m512 acc[R];
  for (int r = 0; r < R; ++r) {
    in[r] = a.state_in ? a.state_in + int64_t{j0 + r} * dk : nullptr;
    row[r] = a.state_out + int64_t{j0 + r} * dk;
    acc[r] = _mm512_setzero_ps();
  }
  for (int i = 0; i < dk; i += 16) {
    const __mmask16 m = TailMask16(dk - i);
    const __m512 k = _mm512_maskz_loadu_ps(m, a.k + i);
    for (int r = 0; r < R; ++r) {
      const __m512 x =
          in[r] ? _mm512_mul_ps(decay, _mm512_maskz_loadu_ps(m, in[r] + i)) : _mm512_setzero_ps();
      _mm512_mask_storeu_ps(row[r] + i, m, x);
      acc[r] = _mm512_fmadd_ps(x, k, acc[r]);
    }
  }
  __m512 d[R];
  for (int r = 0; r < R; ++r) {
    d[r] = _mm512_set1_ps((a.v[j0 + r] - Reduce16(acc[r])) * a.beta);
    acc[r] = _mm512_setzero_ps();
  }
  for (int i = 0; i < dk; i += 16) {
    const __mmask16 m = TailMask16(dk - i);
    const __m512 k = _mm512_maskz_loadu_ps(m, a.k + i);
    const __m512 q = _mm512_maskz_loadu_ps(m, a.q + i);
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_fmadd_ps(d[r], k, _mm512_maskz_loadu_ps(m, row[r] + i));
      _mm512_mask_storeu_ps(row[r] + i, m, x);
      acc[r] = _mm512_fmadd_ps(x, q, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) a.out[j0 + r] = Reduce16(acc[r]) * a.scale;
}

}  // namespace

void DeltaRuleAvx512(const DeltaRuleArgs& a) {
  int j = 0;
  for (; j + 4 <= a.dim_v; j += 4) Rows<4>(a, j);
  for (; j < a.dim_v; ++j) Rows<1>(a, j);
}

}  // namespace mt::kernels
