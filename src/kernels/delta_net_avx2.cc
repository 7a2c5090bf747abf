// AVX2 variant of DeltaRuleStep (kernels/delta_net.h). Per row: 8-lane FMA chains over the
// 8-float chunks of dim_k (a tail chunk zero-masked), Reduce8 of the lanes. Four rows go
// through the chunks together; each row's op sequence is the same as alone.
#include <immintrin.h>

#include "kernels/delta_net.h"
#include "kernels/lane_sum.h"

namespace mt::kernels {
namespace {

__m256i TailMask8(int left) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(left), idx);
}

// Rows j0 .. j0 + R - 1.
template <int R>
void Rows(const DeltaRuleArgs& a, int j0) {
  const int dk = a.dim_k;
  const __m256 decay = _mm256_set1_ps(a.decay);
  const float* in[R];
  float* row[R];
  __m256 acc[R];
  for (int r = 0; r < R; ++r) {
    in[r] = a.state_in ? a.state_in + int64_t{j0 + r} * dk : nullptr;
    row[r] = a.state_out + int64_t{j0 + r} * dk;
    acc[r] = _mm256_setzero_ps();
  }
  for (int i = 0; i < dk; i += 8) {
    const __m256i m = TailMask8(dk - i);
    const __m256 k = _mm256_maskload_ps(a.k + i, m);
    for (int r = 0; r < R; ++r) {
      const __m256 x =
          in[r] ? _mm256_mul_ps(decay, _mm256_maskload_ps(in[r] + i, m)) : _mm256_setzero_ps();
      _mm256_maskstore_ps(row[r] + i, m, x);
      acc[r] = _mm256_fmadd_ps(x, k, acc[r]);
    }
  }
  __m256 d[R];
  for (int r = 0; r < R; ++r) {
    d[r] = _mm256_set1_ps((a.v[j0 + r] - Reduce8(acc[r])) * a.beta);
    acc[r] = _mm256_setzero_ps();
  }
  for (int i = 0; i < dk; i += 8) {
    const __m256i m = TailMask8(dk - i);
    const __m256 k = _mm256_maskload_ps(a.k + i, m);
    const __m256 q = _mm256_maskload_ps(a.q + i, m);
    for (int r = 0; r < R; ++r) {
      const __m256 x = _mm256_fmadd_ps(d[r], k, _mm256_maskload_ps(row[r] + i, m));
      _mm256_maskstore_ps(row[r] + i, m, x);
      acc[r] = _mm256_fmadd_ps(x, q, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) a.out[j0 + r] = Reduce8(acc[r]) * a.scale;
}

}  // namespace

void DeltaRuleAvx2(const DeltaRuleArgs& a) {
  int j = 0;
  for (; j + 4 <= a.dim_v; j += 4) Rows<4>(a, j);
  for (; j < a.dim_v; ++j) Rows<1>(a, j);
}

}  // namespace mt::kernels
