// Dense matrix products of the forward pass: y = x . W^T for a batch of tokens, W's rows
// split over the thread pool in chunks (each output row is one kernel call on one thread,
// so the bits do not depend on the split or the thread count).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>

#include "base/thread_pool.h"
#include "kernels/matmul.h"

namespace mt {

// One input of several products (e.g. the normed hidden state read by q, k and v),
// quantized once per activation format, on first use.
class QuantizedInput {
 public:
  // Memory Reserve takes.
  static uint64_t ReserveBytes(int64_t max_tok, int64_t max_cols);
  void Reserve(int64_t max_tok, int64_t max_cols);
  // x: n_tok rows of `cols` floats, row t at x + t * stride; kept until the next Set.
  void Set(const float* x, int64_t stride, int64_t n_tok, int64_t cols);
  // The input in `weight_type`'s activation format. `pool` null: quantized on the calling
  // thread (inside a parallel region).
  const Activations& For(GgmlType weight_type, ThreadPool* pool);

 private:
  const float* x_ = nullptr;
  int64_t stride_ = 0, n_tok_ = 0, cols_ = 0;
  std::array<Activations, 3> acts_;  // indexed by ActFormat
  std::array<bool, 3> ready_{};
};

// y (n_tok rows, stride y_stride) = in . W^T, chunks of W's rows taken by the threads in turn.
void Project(ThreadPool& pool, const WeightMatrix& w, QuantizedInput& in, float* y,
             int64_t y_stride);

// The same on the calling thread only.
void ProjectSerial(const WeightMatrix& w, QuantizedInput& in, float* y, int64_t y_stride);

// Several products of one input in one parallel region: one hand-off to the workers instead
// of one per matrix (decode issues ~100 a token).
struct Product {
  const WeightMatrix* w;
  float* y;
  int64_t y_stride;
};
void ProjectAll(ThreadPool& pool, std::initializer_list<Product> products, QuantizedInput& in);

}  // namespace mt
