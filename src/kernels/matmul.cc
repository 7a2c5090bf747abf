#include "kernels/matmul.h"

#include <vector>

#include "quant/dequant.h"

namespace mt {

bool MatMulSupports(GgmlType type) { return CanDequantize(type); }

float DotF32(const float* a, const float* b, int64_t n) {
  // 16 independent partial sums (vectorisable), combined in a fixed tree order.
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) acc[j] += a[i + j] * b[i + j];
  }
  for (int j = 0; i < n; ++i, ++j) acc[j] += a[i] * b[i];
  for (int w = 8; w >= 1; w /= 2) {
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  }
  return acc[0];
}

void MatMulRows(const WeightMatrix& w, const float* x, int64_t x_stride, int64_t n_tok, float* y,
                int64_t y_stride, int64_t row_begin, int64_t row_end) {
  thread_local std::vector<float> row_buf;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* wr;
    if (w.type == GgmlType::kF32) {
      wr = reinterpret_cast<const float*>(w.row(r));
    } else {
      row_buf.resize(w.cols);
      DequantizeRow(w.type, w.row(r), row_buf.data(), w.cols);
      wr = row_buf.data();
    }
    for (int64_t t = 0; t < n_tok; ++t) y[t * y_stride + r] = DotF32(wr, x + t * x_stride, w.cols);
  }
}

}  // namespace mt
