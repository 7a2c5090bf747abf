// Fixed-order sums of a float vector's lanes, shared by the per-ISA kernel files. Include it
// ONLY from a per-ISA file (*_avx2.cc, *_avx512.cc), after <immintrin.h>: everything here is
// in an anonymous namespace, so each file gets its own copy compiled with its own flags (see
// the ODR note in matmul_internal.h). The order is part of each variant's float op sequence
// (batch invariance): do not change it.
#pragma once

namespace mt::kernels {
namespace {

// The 8 lanes: halves, then pairs.
[[maybe_unused]] float Reduce8(__m256 v) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
  return _mm_cvtss_f32(s1);
}

#ifdef __AVX512F__
// The 16 lanes: halves, then the 8 as Reduce8 does.
[[maybe_unused]] float Reduce16(__m512 v) {
  return Reduce8(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}
#endif

}  // namespace
}  // namespace mt::kernels
