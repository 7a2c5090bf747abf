// AVX-512 variant of DeltaRuleStep (kernels/delta_net.h). Per row: 16-lane FMA chains over
// the 16-float chunks of dim_k (a tail chunk masked to zero), Reduce16 of the lanes.
#include <immintrin.h>

#include "kernels/delta_net.h"
#include "kernels/lane_sum.h"

namespace mt::kernels {
namespace {

__mmask16 TailMask16(int left) {
  return left >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << left) - 1);
}

}  // namespace

void DeltaRuleAvx512(const DeltaRuleArgs& a) {
  const int dk = a.dim_k;
  const __m512 decay = _mm512_set1_ps(a.decay);
  for (int j = 0; j < a.dim_v; ++j) {
    const float* in = a.state_in ? a.state_in + int64_t{j} * dk : nullptr;
    float* row = a.state_out + int64_t{j} * dk;
    __m512 sk = _mm512_setzero_ps();
    for (int i = 0; i < dk; i += 16) {
      const __mmask16 m = TailMask16(dk - i);
      const __m512 x =
          in ? _mm512_mul_ps(decay, _mm512_maskz_loadu_ps(m, in + i)) : _mm512_setzero_ps();
      _mm512_mask_storeu_ps(row + i, m, x);
      sk = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(m, a.k + i), sk);
    }
    const __m512 d = _mm512_set1_ps((a.v[j] - Reduce16(sk)) * a.beta);
    __m512 sq = _mm512_setzero_ps();
    for (int i = 0; i < dk; i += 16) {
      const __mmask16 m = TailMask16(dk - i);
      const __m512 x =
          _mm512_fmadd_ps(d, _mm512_maskz_loadu_ps(m, a.k + i), _mm512_maskz_loadu_ps(m, row + i));
      _mm512_mask_storeu_ps(row + i, m, x);
      sq = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(m, a.q + i), sq);
    }
    a.out[j] = Reduce16(sq) * a.scale;
  }
}

}  // namespace mt::kernels
