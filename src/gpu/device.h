// The Vulkan backend's foundation: one instance and logical device, device buffers with
// upload/download through a staging buffer, compute pipelines built from the embedded SPIR-V
// (gpu/shaders.h) with push constants, and command submission that waits on a fence.
//
// No Vulkan type appears here, so callers build the same with MT_VULKAN=OFF; there every
// call fails with kUnimplemented ("this build has no Vulkan") and nothing else can be made.
// Errors are one line naming what failed and the VkResult ("vkAllocateMemory: 268435456
// bytes: VK_ERROR_OUT_OF_DEVICE_MEMORY"); no device found is a kNotFound status, never a
// crash. No validation layers are enabled.
//
// Thread-safety: a Device and everything made from it are used by one thread at a time
// (one queue, one command buffer, one staging buffer). Objects made from a Device must be
// destroyed before it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace mt::gpu {

// True when this build has the Vulkan backend (MT_VULKAN=ON).
bool HaveVulkan();

struct DeviceInfo {
  int index = 0;                    // the N of --device vulkan:N (Vulkan's enumeration order)
  std::string name;                 // "llvmpipe (LLVM 15.0.6, 256 bits)", "NVIDIA GeForce ..."
  std::string type;                 // "discrete", "integrated", "virtual", "cpu", "other"
  std::string driver;               // driver name and info: "llvmpipe Mesa 22.3.6 (LLVM 15.0.6)"
  std::string api_version;          // "1.3.230"
  uint64_t device_local_bytes = 0;  // sum of the device-local memory heaps
};

// The Vulkan devices of this machine, in enumeration order; an empty list when the loader
// finds no driver or no device. kUnimplemented without MT_VULKAN; other failures name the
// Vulkan call.
Result<std::vector<DeviceInfo>> ListDevices();

// Why there is no device `index` to open, or "" when there is (tests skip saying so).
inline std::string NoDeviceReason(int index = 0) {
  Result<std::vector<DeviceInfo>> devices = ListDevices();
  if (!devices.ok()) return std::string(devices.status().message());
  if (devices->empty()) return "no Vulkan device";
  if (index >= static_cast<int>(devices->size())) {
    return "no Vulkan device " + std::to_string(index) + " (" + std::to_string(devices->size()) +
           " found)";
  }
  return "";
}

class Device;

// A device-local storage buffer of `size` bytes (rounded up to whole 16-byte units in
// memory; reads and writes stay within `size`). Move-only; frees its memory when destroyed.
class Buffer {
 public:
  Buffer();
  Buffer(Buffer&&) noexcept;
  Buffer& operator=(Buffer&&) noexcept;
  ~Buffer();

  uint64_t size() const { return size_; }  // bytes
  // The host's view of a buffer from Device::CreateHostBuffer (coherent: no flush needed,
  // but read results only after the Wait of the submission that wrote them); null for a
  // device-local buffer.
  uint8_t* host_data() const;

  struct Impl;
  Impl* impl() const { return impl_.get(); }

 private:
  friend class Device;
  std::unique_ptr<Impl> impl_;
  uint64_t size_ = 0;
};

// A byte range of a buffer, as a shader binding sees it (offset 0 of the binding is
// `offset` of the buffer).
struct BufferRange {
  const Buffer* buffer = nullptr;
  uint64_t offset = 0;  // bytes
  uint64_t size = 0;    // bytes
};

// A compute pipeline: one SPIR-V module with entry point "main", `n_buffers` storage buffers
// at bindings 0..n_buffers-1 of set 0, and `push_constant_bytes` of push constants.
class Pipeline {
 public:
  Pipeline();
  Pipeline(Pipeline&&) noexcept;
  Pipeline& operator=(Pipeline&&) noexcept;
  ~Pipeline();

  struct Impl;
  Impl* impl() const { return impl_.get(); }

 private:
  friend class Device;
  std::unique_ptr<Impl> impl_;
};

// Records work into the command buffer of one Device::Execute. A failure while recording
// (descriptor pool exhausted, a bad binding) is kept and returned by Execute; later calls
// then record nothing.
class CommandRecorder {
 public:
  // Dispatches groups (x, y, z) of `pipeline` with `buffers` bound in order and the push
  // constants `push` (exactly the pipeline's push_constant_bytes). A range's offset must be
  // a multiple of Device::storage_offset_alignment().
  void Dispatch(const Pipeline& pipeline, std::span<const BufferRange> buffers,
                std::span<const uint8_t> push, uint32_t x, uint32_t y, uint32_t z);
  // Makes the writes of earlier dispatches visible to later ones (a compute -> compute
  // memory barrier).
  void Barrier();
  // Copies `bytes` from src at src_offset to dst at dst_offset.
  void Copy(const Buffer& src, uint64_t src_offset, const Buffer& dst, uint64_t dst_offset,
            uint64_t bytes);

  const Status& status() const { return status_; }

  struct Impl;

 private:
  friend class Device;
  explicit CommandRecorder(Impl* impl) : impl_(impl) {}
  Impl* impl_;
  Status status_;
};

class Device {
 public:
  // Opens device `index` of ListDevices() with one compute queue. kNotFound when there is
  // no device (or no index-th one); kUnimplemented without MT_VULKAN.
  static Result<std::unique_ptr<Device>> Create(int index = 0);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DeviceInfo& info() const;
  uint64_t storage_offset_alignment() const;  // bytes: minStorageBufferOffsetAlignment
  uint64_t max_storage_range() const;         // bytes: maxStorageBufferRange
  uint32_t max_group_count_x() const;         // maxComputeWorkGroupCount[0]

  // A device-local buffer of `bytes` (> 0). kResourceExhausted when the device has no memory
  // for it.
  Result<Buffer> CreateBuffer(uint64_t bytes);
  // A host-visible, mapped buffer of `bytes` (> 0) that shaders and copies use as any
  // other (Buffer::host_data()): for inputs and outputs that move every step, without the
  // staging buffer's extra copy and wait.
  Result<Buffer> CreateHostBuffer(uint64_t bytes);
  // Copies host bytes into `dst` at `offset` (through the staging buffer, in chunks; waits
  // until done) and back. The range must lie inside the buffer (kOutOfRange otherwise).
  Status Upload(const Buffer& dst, uint64_t offset, std::span<const uint8_t> bytes);
  Status Download(const Buffer& src, uint64_t offset, std::span<uint8_t> bytes);

  // A compute pipeline from SPIR-V words (see Pipeline). `name` only labels errors.
  Result<Pipeline> CreatePipeline(std::string_view name, std::span<const uint32_t> spirv,
                                  uint32_t n_buffers, uint32_t push_constant_bytes);

  // Records what `record` adds, submits it to the queue and waits on a fence until the
  // device has finished. Returns the first recording error or the submission's failure.
  template <typename F>
  Status Execute(F&& record) {
    MT_RETURN_IF_ERROR(Submit(record));
    return Wait();
  }

  // Execute in two halves, so the host works while the device does: Submit records and
  // submits without waiting; Wait blocks until that submission has finished (and is Ok when
  // nothing is in flight). Nothing else may use the Device between the two (Upload,
  // Download and Execute submit too: a CHECK says so).
  template <typename F>
  Status Submit(F&& record) {
    MT_RETURN_IF_ERROR(BeginCommands());
    CommandRecorder recorder(recorder_impl());
    record(recorder);
    return EndCommandsAndSubmit(recorder.status());
  }
  Status Wait();

  struct Impl;

 private:
  explicit Device(std::unique_ptr<Impl> impl);
  Status BeginCommands();
  Status EndCommandsAndSubmit(const Status& recorded);
  CommandRecorder::Impl* recorder_impl();
  std::unique_ptr<Impl> impl_;
};

}  // namespace mt::gpu
