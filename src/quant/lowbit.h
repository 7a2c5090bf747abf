// Q2_K, Q3_K, IQ4_NL and IQ4_XS: the reference dequantizers and the quantizers behind
// quant/dequant.h and quant/quantize.h (which check the arguments and dispatch here). Blocks
// are read and written with memcpy (rows may sit at any byte offset). Pure functions,
// thread-safe. The block layouts are in quant/blocks.h.
#pragma once

#include <cstdint>

namespace mt::lowbit {

// n floats from RowBytes(type, n) bytes; n a multiple of the block size (256; IQ4_NL 32).
// Bit-identical to ggml's dequantize_row_* (the same float operations in the same order).
void DequantQ2_K(const uint8_t* src, float* dst, int64_t n);
void DequantQ3_K(const uint8_t* src, float* dst, int64_t n);
void DequantIQ4_NL(const uint8_t* src, float* dst, int64_t n);
void DequantIQ4_XS(const uint8_t* src, float* dst, int64_t n);

// n floats into RowBytes(type, n) bytes, as llama-quantize writes the type without an
// importance matrix: ggml's quantize_row_q2_K_ref and quantize_row_q3_K_ref, and
// quantize_iq4_nl / quantize_iq4_xs with no weights (7 scale tries per block; note that
// ggml's quantize_row_iq4_nl_ref, which llama-quantize does not use, makes no tries). The
// same bytes as those for finite input (checked against ggml; quant/lowbit_test.cc holds
// blocks it wrote); non-finite input gives valid blocks of unspecified content.
void QuantizeQ2_K(const float* src, uint8_t* dst, int64_t n);
void QuantizeQ3_K(const float* src, uint8_t* dst, int64_t n);
void QuantizeIQ4_NL(const float* src, uint8_t* dst, int64_t n);
void QuantizeIQ4_XS(const float* src, uint8_t* dst, int64_t n);

}  // namespace mt::lowbit
