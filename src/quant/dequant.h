// Scalar reference dequantization: the definition of what each ggml block format means.
// Fast kernels are tested against these. Pure functions, thread-safe.
#pragma once

#include <cstdint>

#include "quant/ggml_type.h"

namespace mt {

// True for types with a reference dequantizer here (the type table's `dequantized`): F32,
// F16, BF16, Q8_0, Q4_0, Q4_1,
// Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, MXFP4, Q2_K, Q3_K, IQ4_NL, IQ4_XS, IQ2_XXS, IQ2_XS, IQ2_S,
// IQ3_XXS, IQ3_S, IQ1_S, IQ1_M.
bool CanDequantize(GgmlType type);

// Writes `n` floats to `dst` from RowBytes(type, n) bytes at `src`. `n` must be a multiple
// of the type's block size and the type must satisfy CanDequantize (checked).
void DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n);

}  // namespace mt
