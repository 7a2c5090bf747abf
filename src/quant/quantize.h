// Reference quantizers: floats -> ggml blocks. Deterministic (same input, same bytes) and
// thread-safe. They aim at low error, not at matching llama.cpp's quantizer bit for bit;
// what must match ggml exactly is the block layout (checked by the dequantizers' tests).
#pragma once

#include <cstdint>

#include "quant/ggml_type.h"

namespace mt {

// True for types that QuantizeRow supports: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
// Q4_K, Q5_K, Q6_K, MXFP4.
bool CanQuantize(GgmlType type);

// Quantizes `n` floats from `src` into RowBytes(type, n) bytes at `dst`. `n` must be a
// multiple of the type's block size and the type must satisfy CanQuantize (checked).
void QuantizeRow(GgmlType type, const float* src, void* dst, int64_t n);

}  // namespace mt
