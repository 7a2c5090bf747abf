// Matrix products of quantized weights with float activations.
//
// Semantics (the definition every variant must match within its tolerance):
//   y[t * y_stride + r] = sum_c W[r][c] * x[t * x_stride + c]
// for tokens t in [0, n_tok) and weight rows r in [row_begin, row_end). Each output is
// computed by one call with a fixed summation order, so splitting rows across threads never
// changes a bit.
#pragma once

#include <cstdint>

#include "quant/ggml_type.h"

namespace mt {

// A 2-D weight in GGUF layout: `rows` rows of `cols` elements of `type`; row r starts at
// data + r * row_bytes. Views into a mapping or a cache slot; owns nothing.
struct WeightMatrix {
  GgmlType type = GgmlType::kF32;
  const uint8_t* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  uint64_t row_bytes = 0;

  const uint8_t* row(int64_t r) const { return data + static_cast<uint64_t>(r) * row_bytes; }
};

// True if MatMulRows can read `type`.
bool MatMulSupports(GgmlType type);

void MatMulRows(const WeightMatrix& w, const float* x, int64_t x_stride, int64_t n_tok, float* y,
                int64_t y_stride, int64_t row_begin, int64_t row_end);

// Dot product of two float vectors with the fixed summation order MatMulRows uses.
float DotF32(const float* a, const float* b, int64_t n);

}  // namespace mt
