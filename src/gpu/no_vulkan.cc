// gpu/device.h without Vulkan (MT_VULKAN=OFF): nothing can be made, every call says so.
#include "gpu/device.h"
#include "gpu/shaders.h"

namespace mt::gpu {
namespace {

Status NoVulkan() {
  return Unimplemented("this build has no Vulkan (configure with -DMT_VULKAN=ON)");
}

}  // namespace

bool HaveVulkan() { return false; }
Result<std::vector<DeviceInfo>> ListDevices() { return NoVulkan(); }
std::span<const uint32_t> ShaderSpirv(std::string_view) { return {}; }

struct Buffer::Impl {};
Buffer::Buffer() = default;
Buffer::Buffer(Buffer&&) noexcept = default;
Buffer& Buffer::operator=(Buffer&&) noexcept = default;
Buffer::~Buffer() = default;
uint8_t* Buffer::host_data() const { return nullptr; }

struct Pipeline::Impl {};
Pipeline::Pipeline() = default;
Pipeline::Pipeline(Pipeline&&) noexcept = default;
Pipeline& Pipeline::operator=(Pipeline&&) noexcept = default;
Pipeline::~Pipeline() = default;

struct CommandRecorder::Impl {};
void CommandRecorder::Dispatch(const Pipeline&, std::span<const BufferRange>,
                               std::span<const uint8_t>, uint32_t, uint32_t, uint32_t) {
  status_ = NoVulkan();
}
void CommandRecorder::Barrier() { static_cast<void>(impl_); }  // never made: no Device
void CommandRecorder::Copy(const Buffer&, uint64_t, const Buffer&, uint64_t, uint64_t) {
  status_ = NoVulkan();
}

// A Device cannot be made, so its members below are never reached; they exist to link.
struct Device::Impl {
  DeviceInfo info;
};
Device::Device(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Device::~Device() = default;
Result<std::unique_ptr<Device>> Device::Create(int) { return NoVulkan(); }
const DeviceInfo& Device::info() const { return impl_->info; }
uint64_t Device::storage_offset_alignment() const { return 1; }
uint64_t Device::max_storage_range() const { return 0; }
uint32_t Device::max_group_count_x() const { return 0; }
Result<Buffer> Device::CreateBuffer(uint64_t) { return NoVulkan(); }
Result<Buffer> Device::CreateHostBuffer(uint64_t) { return NoVulkan(); }
Status Device::Upload(const Buffer&, uint64_t, std::span<const uint8_t>) { return NoVulkan(); }
Status Device::Download(const Buffer&, uint64_t, std::span<uint8_t>) { return NoVulkan(); }
Result<Pipeline> Device::CreatePipeline(std::string_view, std::span<const uint32_t>, uint32_t,
                                        uint32_t) {
  return NoVulkan();
}
Status Device::BeginCommands() { return NoVulkan(); }
Status Device::EndCommandsAndSubmit(const Status&) { return NoVulkan(); }
Status Device::Wait() { return NoVulkan(); }
CommandRecorder::Impl* Device::recorder_impl() { return nullptr; }

}  // namespace mt::gpu
