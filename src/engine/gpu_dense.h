// The dense part's products on the device besides attention (--device vulkan, issue 42): the
// output head, and the SwiGLU blocks (shared experts, dense layers' FFN). Their matrices are
// uploaded once; each call moves its rows to the device and the results back. Like every
// device product they sum in an order of their own (gpu/matmul.h), so results agree with the
// CPU's within rounding, and a token's do not depend on the batch.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/gpu_backend.h"
#include "engine/model.h"

namespace mt {

// The head: the normed rows of the tokens that want logits, in chunks, and their logits back.
class GpuOutputHead {
 public:
  // Why the device cannot take the head (its type has no shader), or "".
  static std::string Unsupported(const Model& model);
  // kUnimplemented, in one line, where Unsupported says so.
  static Result<std::unique_ptr<GpuOutputHead>> Create(const Model& model, GpuBackend& gpu,
                                                       uint32_t n_batch);
  // logits (n, n_vocab) = the head of xn (n, n_embd; under the output norm).
  Status Run(const float* xn, int64_t n, float* logits);

  uint64_t weight_bytes() const { return weight_bytes_; }
  uint64_t scratch_bytes() const { return scratch_bytes_; }

 private:
  GpuOutputHead(GpuBackend& gpu, const WeightMatrix& w) : gpu_(gpu), w_(w) {}

  GpuBackend& gpu_;
  const WeightMatrix& w_;  // (n_vocab rows of n_embd) the model's
  int64_t chunk_ = 0;      // tokens per submission
  int64_t part_rows_ = 0;  // vocabulary rows per product (one binding's worth)
  gpu::Buffer weights_;    // w_'s rows
  gpu::Buffer in_;         // host-visible (chunk_, n_embd)
  gpu::Buffer x_;          // (chunk_, n_embd)
  gpu::Buffer y_;          // (chunk_, n_vocab)
  gpu::Buffer out_;        // host-visible (chunk_, n_vocab)
  uint64_t weight_bytes_ = 0;
  uint64_t scratch_bytes_ = 0;
};

// The SwiGLU blocks, engine/swiglu_ffn.h's work: each MoE layer's shared experts and each
// dense layer's FFN (the shared experts' sigmoid gate stays with MoeStep).
class GpuSwiGluBlocks {
 public:
  // Layer il's block (gate, up, down): its dense FFN or its shared experts; none for a MoE
  // layer without shared experts.
  static std::optional<std::array<const WeightMatrix*, 3>> LayerMatrices(const Model& model,
                                                                         uint32_t il);
  // Why the device cannot take the blocks (the first of their types without a shader), or "".
  // The device takes all of them or none.
  static std::string Unsupported(const Model& model);
  // None when the model has no such block; kUnimplemented, in one line, where Unsupported says
  // so.
  static Result<std::unique_ptr<GpuSwiGluBlocks>> Create(const Model& model, GpuBackend& gpu,
                                                         uint32_t n_batch);
  ~GpuSwiGluBlocks();

  // out (n, n_embd) = down(silu(gate xn) * up xn) with layer il's block; xn (n, n_embd).
  Status Run(int il, const float* xn, int n, float* out);

  int n_layers() const { return n_layers_; }
  uint64_t weight_bytes() const { return weight_bytes_; }
  uint64_t scratch_bytes() const { return scratch_bytes_; }

 private:
  struct Block {
    gpu::Buffer weights;  // gate, up, down
    GgmlType gate_type = GgmlType::kF32, up_type = GgmlType::kF32, down_type = GgmlType::kF32;
    uint64_t gate = 0, up = 0, down = 0;  // bytes
    int64_t n_ff = 0;                     // 0: the layer has none
  };
  explicit GpuSwiGluBlocks(GpuBackend& gpu) : gpu_(gpu) {}

  GpuBackend& gpu_;
  int64_t n_embd_ = 0;
  std::vector<Block> blocks_;  // (n_layer)
  gpu::Buffer in_;             // host-visible (n_batch, n_embd)
  gpu::Buffer x_;              // (n_batch, n_embd)
  gpu::Buffer hidden_;         // (2, n_batch, widest n_ff) gate and up rows
  gpu::Buffer y_;              // (n_batch, n_embd)
  gpu::Buffer out_;            // host-visible (n_batch, n_embd)
  int n_layers_ = 0;
  uint64_t weight_bytes_ = 0;
  uint64_t scratch_bytes_ = 0;
};

}  // namespace mt
