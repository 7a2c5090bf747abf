// Y[n, m] = X[n, k] . W[m, k]^T on the device, with W in its GGUF block layout as uploaded
// (any type of GpuMatMulTypes()), X and Y f32. The weights stay as the file has them: a
// matrix is uploaded once, byte for byte, and read by the shader of its type.
//
// Each output is one f32 sum, in an order of its own (per row: chunks of 32 elements
// strided over 64 threads, then a tree), so results agree with the CPU's within float
// rounding, not bit for bit.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "gpu/device.h"
#include "quant/ggml_type.h"

namespace mt::gpu {

// The weight types the matrix product reads, in the order they were added.
const std::vector<GgmlType>& GpuMatMulTypes();
bool GpuCanMatMul(GgmlType type);

struct MatMulArgs {
  GgmlType type = GgmlType::kF32;
  const Buffer* w = nullptr;  // (m, k) of `type`: m rows of RowBytes(type, k) bytes
  uint64_t w_offset = 0;      // bytes: row 0 of W in *w
  const Buffer* x = nullptr;  // (n, x_stride) f32
  uint64_t x_offset = 0;      // floats: X[0, 0] in *x
  Buffer* y = nullptr;        // (n, y_stride) f32
  uint64_t y_offset = 0;      // floats: Y[0, 0] in *y
  int64_t m = 0;              // rows of W, columns of Y
  int64_t k = 0;              // columns of W and X; a multiple of the type's block size
  int64_t n = 0;              // rows of X and Y (tokens)
  int64_t x_stride = 0;       // floats between rows of X; 0 means k
  int64_t y_stride = 0;       // floats between rows of Y; 0 means m
  // Head batching: `heads` products of this shape in one dispatch (MLA's per-head slices of
  // attn_k_b and attn_v_b). Head h reads W from w_offset + h * w_head_bytes, X from
  // x_offset + h * x_head_floats and writes Y from y_offset + h * y_head_floats; rows and
  // strides as above. Each head's sums are those of a product of its own (the order depends
  // on k alone).
  int64_t heads = 1;
  uint64_t w_head_bytes = 0;
  uint64_t x_head_floats = 0;
  uint64_t y_head_floats = 0;
};

// The matrix-product pipelines of one Device, built on first use of each type, and the IQ
// types' grids in a device buffer. Used by one thread at a time, as its Device; must be
// destroyed before the Device.
class MatMul {
 public:
  // Uploads the IQ grids (34 KB; a submission of its own, so not inside Device::Execute).
  static Result<std::unique_ptr<MatMul>> Create(Device* device);

  // Records Y = X . W^T into `rec` (no barrier before or after: the caller orders it with
  // the work around it). kInvalidArgument for a type without a shader, a k that is not a
  // multiple of the block size, or ranges outside the buffers; errors building the pipeline
  // as CreatePipeline.
  Status Record(CommandRecorder& rec, const MatMulArgs& args);

  // Record, submitted alone; returns when Y is written.
  Status Run(const MatMulArgs& args);

 private:
  explicit MatMul(Device* device) : device_(device) {}
  Result<const Pipeline*> PipelineFor(GgmlType type);

  Device* device_;
  Buffer grids_;  // the IQ grids, laid out as shaders/mm_iq_grids.glsl reads them
  std::vector<std::unique_ptr<Pipeline>> pipelines_;  // by type id; null until first use
};

}  // namespace mt::gpu
