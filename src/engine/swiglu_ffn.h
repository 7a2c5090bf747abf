// A dense SwiGLU feed-forward block, out = down(silu(gate x) * up x): the FFN of a dense layer
// (DeepSeek's leading layers) and the shared experts of an MoE layer. Not thread-safe; the
// products split their rows over the pool (same bits for any thread count).
#pragma once

#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "engine/projection.h"
#include "engine/scratch.h"
#include "kernels/matmul.h"

namespace mt {

class SwiGluFfn {
 public:
  // For batches of up to n_batch tokens of n_embd, hidden widths up to max_ff.
  SwiGluFfn(ThreadPool& pool, uint32_t n_batch, int64_t n_embd, int64_t max_ff)
      : pool_(pool), n_batch_(n_batch), n_embd_(n_embd), max_ff_(max_ff) {}

  void SizeScratch(ScratchSizer& sizer);

  // out (n, n_embd) = down(silu(gate xn) * up xn) for xn (n, n_embd). gate, up: (F rows of
  // n_embd); down: (n_embd rows of F), F <= max_ff. out must not overlap xn.
  void Run(const WeightMatrix& gate, const WeightMatrix& up, const WeightMatrix& down,
           const float* xn, int n, float* out);

 private:
  ThreadPool& pool_;
  const uint32_t n_batch_;
  const int64_t n_embd_, max_ff_;
  std::vector<float> gate_;  // (n_batch, max_ff) gate projection, then the SwiGLU output
  std::vector<float> up_;    // (n_batch, max_ff)
  QuantizedInput in_;        // xn quantized
  QuantizedInput hid_;       // the SwiGLU output quantized
};

}  // namespace mt
