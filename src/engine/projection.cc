#include "engine/projection.h"

#include <algorithm>

namespace mt {
namespace {

// Rows per chunk of a projection split dynamically over the threads: about 8 chunks per
// thread (a thread that falls behind leaves at most a chunk to wait for), whole 16-row panels.
int64_t ChunkRows(const ThreadPool& pool, int64_t rows) {
  const int64_t per = rows / (8 * int64_t{pool.size()});
  return std::max<int64_t>(16, per / 16 * 16);
}

}  // namespace

uint64_t QuantizedInput::ReserveBytes(int64_t max_tok, int64_t max_cols) {
  return 3 * Activations::ReserveBytes(max_tok, max_cols);
}

void QuantizedInput::Reserve(int64_t max_tok, int64_t max_cols) {
  for (Activations& a : acts_) a.Reserve(max_tok, max_cols);
}

void QuantizedInput::Set(const float* x, int64_t stride, int64_t n_tok, int64_t cols) {
  x_ = x;
  stride_ = stride;
  n_tok_ = n_tok;
  cols_ = cols;
  ready_ = {false, false, false};
}

const Activations& QuantizedInput::For(GgmlType weight_type, ThreadPool* pool) {
  const ActFormat f = ActFormatFor(weight_type);
  const int i = static_cast<int>(f);
  if (!ready_[i]) {
    acts_[i].Prepare(f, n_tok_, cols_);
    if (pool != nullptr) {
      pool->ParallelFor(n_tok_, [&](int64_t t0, int64_t t1, int) {
        acts_[i].QuantizeTokens(x_, stride_, t0, t1);
      });
    } else {
      acts_[i].QuantizeTokens(x_, stride_, 0, n_tok_);
    }
    ready_[i] = true;
  }
  return acts_[i];
}

void Project(ThreadPool& pool, const WeightMatrix& w, QuantizedInput& in, float* y,
             int64_t y_stride) {
  const Activations& a = in.For(w.type, &pool);
  pool.ParallelForDynamic(
      w.rows, [&](int64_t r0, int64_t r1, int) { MatMul(w, a, y, y_stride, r0, r1); },
      ChunkRows(pool, w.rows));
}

void ProjectSerial(const WeightMatrix& w, QuantizedInput& in, float* y, int64_t y_stride) {
  MatMul(w, in.For(w.type, nullptr), y, y_stride, 0, w.rows);
}

void ProjectAll(ThreadPool& pool, std::initializer_list<Product> products, QuantizedInput& in) {
  int64_t total = 0;
  bool panels_aligned = true;  // every matrix's rows start on a 16-row boundary of the range
  for (const Product& p : products) {
    in.For(p.w->type, &pool);  // quantized once, before the parallel region
    panels_aligned = panels_aligned && total % 16 == 0;
    total += p.w->rows;
  }
  if (!panels_aligned) {
    for (const Product& p : products) Project(pool, *p.w, in, p.y, p.y_stride);
    return;
  }
  // The matrices' rows end to end, in chunks (a chunk may span two matrices).
  pool.ParallelForDynamic(
      total,
      [&](int64_t begin, int64_t end, int) {
        int64_t base = 0;
        for (const Product& p : products) {
          const int64_t r0 = std::max<int64_t>(begin - base, 0);
          const int64_t r1 = std::min<int64_t>(end - base, p.w->rows);
          if (r0 < r1) MatMul(*p.w, in.For(p.w->type, nullptr), p.y, p.y_stride, r0, r1);
          base += p.w->rows;
        }
      },
      ChunkRows(pool, total));
}

}  // namespace mt
