// Scalar reference dequantizers of the IQ lattice types (quant/blocks_iq.h), called by
// DequantizeRow (quant/dequant.h), which checks the arguments. Each writes n floats (n a
// multiple of 256) from RowBytes(type, n) bytes at src, with ggml's float operations in ggml's
// order (dequantize_row_iq*), so the results are bit-identical to ggml's. Pure, thread-safe.
// Every grid index a block can hold is inside its grid (the fields are exactly as wide as the
// grid is long), so any bytes are safe to read.
#pragma once

#include <cstdint>

namespace mt {

void DequantIq2Xxs(const uint8_t* src, float* dst, int64_t n);
void DequantIq2Xs(const uint8_t* src, float* dst, int64_t n);
void DequantIq2S(const uint8_t* src, float* dst, int64_t n);
void DequantIq3Xxs(const uint8_t* src, float* dst, int64_t n);
void DequantIq3S(const uint8_t* src, float* dst, int64_t n);
void DequantIq1S(const uint8_t* src, float* dst, int64_t n);
void DequantIq1M(const uint8_t* src, float* dst, int64_t n);

}  // namespace mt
