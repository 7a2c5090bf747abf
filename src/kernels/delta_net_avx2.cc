// AVX2 variant of DeltaRuleStep (kernels/delta_net.h). Per row: 8-lane FMA chains over the
// 8-float chunks of dim_k (a tail chunk zero-masked), Reduce8 of the lanes.
#include <immintrin.h>

#include "kernels/delta_net.h"
#include "kernels/lane_sum.h"

namespace mt::kernels {
namespace {

__m256i TailMask8(int left) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(left), idx);
}

}  // namespace

void DeltaRuleAvx2(const DeltaRuleArgs& a) {
  const int dk = a.dim_k;
  const __m256 decay = _mm256_set1_ps(a.decay);
  for (int j = 0; j < a.dim_v; ++j) {
    const float* in = a.state_in ? a.state_in + int64_t{j} * dk : nullptr;
    float* row = a.state_out + int64_t{j} * dk;
    __m256 sk = _mm256_setzero_ps();
    for (int i = 0; i < dk; i += 8) {
      const __m256i m = TailMask8(dk - i);
      const __m256 x =
          in ? _mm256_mul_ps(decay, _mm256_maskload_ps(in + i, m)) : _mm256_setzero_ps();
      _mm256_maskstore_ps(row + i, m, x);
      sk = _mm256_fmadd_ps(x, _mm256_maskload_ps(a.k + i, m), sk);
    }
    const __m256 d = _mm256_set1_ps((a.v[j] - Reduce8(sk)) * a.beta);
    __m256 sq = _mm256_setzero_ps();
    for (int i = 0; i < dk; i += 8) {
      const __m256i m = TailMask8(dk - i);
      const __m256 x =
          _mm256_fmadd_ps(d, _mm256_maskload_ps(a.k + i, m), _mm256_maskload_ps(row + i, m));
      _mm256_maskstore_ps(row + i, m, x);
      sq = _mm256_fmadd_ps(x, _mm256_maskload_ps(a.q + i, m), sq);
    }
    a.out[j] = Reduce8(sq) * a.scale;
  }
}

}  // namespace mt::kernels
