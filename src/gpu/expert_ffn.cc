#include "gpu/expert_ffn.h"

#include <algorithm>
#include <cstring>

#include "gpu/shaders.h"

namespace mt::gpu {
namespace {

// The push constants of shaders/ffn_act.comp.
struct ActPush {
  uint32_t n_ff, m, gate_offset, up_offset, stride, activation, has_bias, gate_bias_offset,
      up_bias_offset;
};

constexpr uint32_t kActGroup = 64;  // ffn_act.comp's local_size_x

}  // namespace

Result<std::unique_ptr<ExpertFfn>> ExpertFfn::Create(Device* device, MatMul* matmul) {
  Pipeline act =
      MT_TRY(device->CreatePipeline("ffn_act", ShaderSpirv("ffn_act"), 2, sizeof(ActPush)));
  return std::unique_ptr<ExpertFfn>(new ExpertFfn(device, matmul, std::move(act)));
}

Status ExpertFfn::Record(CommandRecorder& rec, const ExpertFfnArgs& a) {
  const uint64_t m = static_cast<uint64_t>(a.m), f = static_cast<uint64_t>(a.n_ff);
  if (a.hidden == nullptr || (a.hidden_offset + 2 * m * f) * 4 > a.hidden->size()) {
    return InvalidArgument(
        "gpu expert ffn: the hidden rows ({} tokens x {}) reach past their buffer", a.m, a.n_ff);
  }
  if (a.bias != nullptr &&
      (std::max(a.gate_bias_offset, a.up_bias_offset) + f) * 4 > a.bias->size()) {
    return InvalidArgument("gpu expert ffn: a bias of {} floats reaches past its buffer", f);
  }
  if (2 * m * f + 64 >= (uint64_t{1} << 32) ||
      (a.bias != nullptr && a.bias->size() / 4 >= (uint64_t{1} << 32))) {
    return InvalidArgument("gpu expert ffn: the hidden or bias binding is past 16 GiB");
  }
  const uint64_t gate_rows = a.hidden_offset, up_rows = a.hidden_offset + m * f;
  MatMulArgs gate{a.gate_type, a.weights, a.gate_offset, a.x,      a.x_offset,
                  a.hidden,    gate_rows, a.n_ff,        a.n_embd, a.m};
  MatMulArgs up = gate;
  up.type = a.up_type;
  up.w_offset = a.up_offset;
  up.y_offset = up_rows;
  MT_RETURN_IF_ERROR(matmul_->Record(rec, gate));
  MT_RETURN_IF_ERROR(matmul_->Record(rec, up));
  rec.Barrier();
  // The activation binds only this expert's rows (a whole hidden buffer may pass the
  // device's maxStorageBufferRange); its offsets count from the binding's start.
  const uint64_t align = device_->storage_offset_alignment();
  const uint64_t start = gate_rows * 4 / align * align;  // bytes
  const uint64_t skip = (gate_rows * 4 - start) / 4;     // floats
  const ActPush push = {
      static_cast<uint32_t>(f),
      static_cast<uint32_t>(m),
      static_cast<uint32_t>(skip),
      static_cast<uint32_t>(skip + m * f),
      static_cast<uint32_t>(f),
      static_cast<uint32_t>(a.activation),
      a.bias != nullptr ? 1u : 0u,
      static_cast<uint32_t>(a.gate_bias_offset),
      static_cast<uint32_t>(a.up_bias_offset),
  };
  uint8_t push_bytes[sizeof(ActPush)];
  std::memcpy(push_bytes, &push, sizeof(push));
  // Without biases the shader reads none: the hidden rows stand in for the binding.
  const BufferRange hidden{a.hidden, start, (skip + 2 * m * f) * 4};
  const BufferRange ranges[2] = {
      hidden, a.bias != nullptr ? BufferRange{a.bias, 0, a.bias->size()} : hidden};
  rec.Dispatch(act_, ranges, push_bytes, static_cast<uint32_t>((f + kActGroup - 1) / kActGroup),
               static_cast<uint32_t>(m), 1);
  MT_RETURN_IF_ERROR(rec.status());
  rec.Barrier();
  MatMulArgs down{a.down_type, a.weights,  a.down_offset, a.hidden, gate_rows,
                  a.y,         a.y_offset, a.n_embd,      a.n_ff,   a.m};
  return matmul_->Record(rec, down);
}

}  // namespace mt::gpu
