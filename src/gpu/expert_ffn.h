// One routed expert's FFN on the device, over the tokens routed to it:
//   Y (m, n_embd) = down(act(gate(X) + b_gate, up(X) + b_up)),
// with gate, up and down in their GGUF block layout (gpu/matmul.h) and act SwiGLU or
// gpt-oss's clamped SwiGLU (shaders/ffn_act.comp). The down bias, the router weight and the
// sum over a token's experts stay with the caller (engine/gpu_experts.h), which adds them in
// the same order as for an expert the CPU ran.
#pragma once

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "gpu/device.h"
#include "gpu/matmul.h"
#include "quant/ggml_type.h"

namespace mt::gpu {

enum class GluActivation { kSwiglu = 0, kSwigluOai = 1 };

struct ExpertFfnArgs {
  GgmlType gate_type = GgmlType::kF32;
  GgmlType up_type = GgmlType::kF32;
  GgmlType down_type = GgmlType::kF32;
  const Buffer* weights = nullptr;  // holds the three matrices
  uint64_t gate_offset = 0;         // bytes: gate (n_ff, n_embd) in *weights
  uint64_t up_offset = 0;           // bytes: up (n_ff, n_embd)
  uint64_t down_offset = 0;         // bytes: down (n_embd, n_ff)
  int64_t n_embd = 0;
  int64_t n_ff = 0;
  int64_t m = 0;                  // tokens
  const Buffer* x = nullptr;      // (m, n_embd) f32 inputs
  uint64_t x_offset = 0;          // floats
  Buffer* hidden = nullptr;       // (2, m, n_ff) f32 scratch: gate rows, then up rows
  uint64_t hidden_offset = 0;     // floats
  Buffer* y = nullptr;            // (m, n_embd) f32 outputs
  uint64_t y_offset = 0;          // floats
  const Buffer* bias = nullptr;   // the expert's gate and up biases (n_ff each), or none
  uint64_t gate_bias_offset = 0;  // floats
  uint64_t up_bias_offset = 0;    // floats
  GluActivation activation = GluActivation::kSwiglu;
};

// The activation pipeline of one Device, and the MatMul it records the products with. Used
// by one thread at a time; destroyed before the Device and the MatMul.
class ExpertFfn {
 public:
  static Result<std::unique_ptr<ExpertFfn>> Create(Device* device, MatMul* matmul);

  // Records gate and up, a barrier, the activation, a barrier and down into `rec` (no
  // barrier after: the caller orders the outputs' reads). Errors as MatMul::Record, and
  // kInvalidArgument for a hidden or bias range outside its buffer.
  Status Record(CommandRecorder& rec, const ExpertFfnArgs& args);

 private:
  ExpertFfn(Device* device, MatMul* matmul, Pipeline act)
      : device_(device), matmul_(matmul), act_(std::move(act)) {}
  Device* device_;
  MatMul* matmul_;
  Pipeline act_;  // shaders/ffn_act.comp
};

}  // namespace mt::gpu
