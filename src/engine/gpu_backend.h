// The device a Context computes on (--device vulkan[:N], issue 42), the pipelines every part
// on it shares, and the packing of host weights into one device buffer. Made once per Context
// before the parts that use it (engine/gpu_attention.h, engine/gpu_experts.h) and destroyed
// after them. Used by one thread at a time, as its Device.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "gpu/attention_ops.h"
#include "gpu/device.h"
#include "gpu/expert_ffn.h"
#include "gpu/matmul.h"
#include "kernels/matmul.h"

namespace mt {

class GgufModel;

struct GpuBackend {
  // Opens device `index` and builds the shared pipelines; `pool` is the Context's. kNotFound
  // without a device, kUnimplemented in a build without Vulkan.
  static Result<std::unique_ptr<GpuBackend>> Open(int index, ThreadPool& pool);

  // device->Execute and device->Wait with the pool's workers asleep meanwhile: spinning, they
  // would take a CPU from a device that is the CPU (lavapipe: 30 % of the samples went to
  // the spin) and burn one beside a GPU.
  template <typename F>
  Status Execute(F&& record) {
    ThreadPool::LetSleep idle(*pool);
    return device->Execute(record);
  }
  Status Wait() {
    ThreadPool::LetSleep idle(*pool);
    return device->Wait();
  }

  const std::string& name() const { return device->info().name; }
  // A CPU device (lavapipe) or an integrated GPU: its memory is the host's RAM, so the host's
  // memory plan counts what lives there.
  bool shares_host_memory() const;

  // Hands back the pages of `file`'s mapping that uploaded_from holds (GgufModel::ReleasePages:
  // the device owns those bytes now; host copies are not in the mapping and stay). Called once
  // every part has uploaded: a page released earlier would be mapped in again by the next
  // part's reads, since the kernel maps the cached pages around a fault too.
  void ReleaseUploadedPages(const GgufModel& file);

  ThreadPool* pool = nullptr;
  std::vector<std::span<const uint8_t>> uploaded_from;  // host bytes the parts uploaded
  // Declared first, destroyed last.
  std::unique_ptr<gpu::Device> device;
  std::unique_ptr<gpu::MatMul> matmul;
  std::unique_ptr<gpu::ExpertFfn> ffn;
  std::unique_ptr<gpu::AttentionOps> ops;
};

// Why layer `layer`'s matrices of these types cannot be multiplied on the device (the first
// type without a shader: "layer 3's attention is q4_K, which the device cannot compute with"),
// or "" when every one can. `what` names the matrices with their verb ("attention is",
// "experts are").
std::string NoShaderFor(std::span<const GgmlType> types, int layer, std::string_view what);

// Host weights laid out for one device buffer: each matrix's rows as the file has them (a
// panel copy turned back into rows: the shaders read rows), each vector as f32, each at an
// offset the device can bind.
class GpuWeightPack {
 public:
  static constexpr uint64_t kAlign = 256;  // bytes: minStorageBufferOffsetAlignment's bound

  // Where the item starts in the buffer, in bytes.
  uint64_t Add(const WeightMatrix& w);
  uint64_t Add(const std::vector<float>& v);
  uint64_t bytes() const { return bytes_.size(); }
  // One device-local buffer with everything added, uploaded; the matrices' host bytes are
  // noted in gpu.uploaded_from.
  Result<gpu::Buffer> Upload(GpuBackend& gpu) const;

 private:
  uint8_t* Reserve(uint64_t n);
  std::vector<uint8_t> bytes_;
  std::vector<std::span<const uint8_t>> sources_;  // the matrices' bytes where Add found them
};

}  // namespace mt
