// Internal interface between the attention dispatcher (attention.cc) and the per-ISA files
// (attention_scalar.cc, attention_avx2.cc, attention_avx512.cc). The same ODR rules as
// matmul_internal.h: the per-ISA files use only plain declarations from here and keep their
// own code in anonymous namespaces. The tile size is kAttendTile (kernels/attention.h).
#pragma once

#include <cstdint>
#include <limits>

#include "kernels/attention.h"
#include "quant/blocks.h"

namespace mt::kernels {

// One AttendHead call (kernels/attention.h), already checked by the dispatcher.
struct AttendArgs {
  const float* q;    // (d_k)
  const void* k;     // position j at k + j * k_stride elements, d_k elements
  const void* v;     // position j at v + j * v_stride elements, d_v elements
  KvTypes types;     // element types of k and v
  int64_t k_stride;  // elements (a q8_0 K: whole blocks, as d_k)
  int64_t v_stride;  // elements (a q8_0 V: whole blocks, as d_v)
  int64_t n_pos;     // >= 1
  int d_k;           // >= 1
  int d_v;           // >= 1
  float scale;
  float* out;      // (d_v)
  float* scratch;  // (min(n_pos, kAttendTile))
  // (d_k / 32) q rounded to q8_0 blocks, the scores' query for a q8_0 K; else null.
  const BlockQ8_0* q8 = nullptr;
  float sink = -std::numeric_limits<float>::infinity();  // the head's sink logit
                                                         // (AttendQueries::sinks); -inf: none
};

// 1 / the softmax's denominator at the end of a query: l = sum_j exp(s_j - m), plus the
// sink's exp(sink - m) (kernels/attention.h). No sink (-inf) adds nothing, so the result is
// the same bits as 1 / l. Defined in attention.cc (baseline flags: one scalar std::exp for
// every variant, and no per-ISA copy for the linker to pick).
float InverseDenominator(const AttendArgs& a, float m, float l);

// StoreKv (kernels/attention.h) for f16: n floats to n halves, Fp32ToFp16's bits.
void StoreF16Scalar(const float* src, int64_t n, uint16_t* dst);
void StoreF16Avx2(const float* src, int64_t n, uint16_t* dst);    // only in x86 builds
void StoreF16Avx512(const float* src, int64_t n, uint16_t* dst);  // only in x86 builds

void AttendScalar(const AttendArgs& a);
// n_q queries over the same rows (a[i] differ only in q, out and scratch), each with
// AttendAvx512's float ops for it: the K and V chunks are loaded and widened once per group.
void AttendGroupAvx512(const AttendArgs* a, int n_q);  // only in x86 builds
// n_q queries over the same rows (a[i] differ only in q, out, scratch and n_pos), each with
// AttendAvx512's float ops for it: the tiles whole for all of them go 4 queries at a time.
void AttendManyAvx512(const AttendArgs* a, int n_q);  // only in x86 builds
// n_q queries over the same rows (a[i] differ only in q, out, scratch and n_pos), each with
// AttendAvx2's float ops for it: K and V chunks are loaded and widened once per 4 queries,
// and a tile's rows once (into L1/L2) for all n_q <= kAttendGroupMax.
void AttendManyAvx2(const AttendArgs* a, int n_q);  // only in x86 builds
void AttendAvx2(const AttendArgs& a);               // only in x86 builds
void AttendAvx512(const AttendArgs& a);             // only in x86 builds

}  // namespace mt::kernels
