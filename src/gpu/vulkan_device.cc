// gpu/device.h over Vulkan 1.1 (MT_VULKAN=ON). One instance per Device, one compute queue,
// one primary command buffer, one fence, one descriptor pool reset per submission and one
// host-visible staging buffer for uploads and downloads.
#include <vulkan/vulkan.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "base/check.h"
#include "gpu/device.h"

namespace mt::gpu {
namespace {

constexpr uint64_t kStagingBytes = 32ull << 20;  // upload/download chunk
constexpr uint32_t kMaxSetsPerSubmit = 4096;     // dispatches per Execute
constexpr uint32_t kMaxBuffersPerSet = 8;
constexpr uint64_t kFenceTimeoutNs = 600ull * 1000 * 1000 * 1000;  // a hung device, not a slow one
constexpr uint64_t kBufferGranule = 16;  // bytes: shaders may read whole words past the end

const char* VkResultName(VkResult r) {
  switch (r) {
    case VK_SUCCESS:
      return "VK_SUCCESS";
    case VK_NOT_READY:
      return "VK_NOT_READY";
    case VK_TIMEOUT:
      return "VK_TIMEOUT";
    case VK_INCOMPLETE:
      return "VK_INCOMPLETE";
    case VK_ERROR_OUT_OF_HOST_MEMORY:
      return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
      return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED:
      return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST:
      return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED:
      return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_LAYER_NOT_PRESENT:
      return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT:
      return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT:
      return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER:
      return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS:
      return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_FORMAT_NOT_SUPPORTED:
      return "VK_ERROR_FORMAT_NOT_SUPPORTED";
    case VK_ERROR_FRAGMENTED_POOL:
      return "VK_ERROR_FRAGMENTED_POOL";
    case VK_ERROR_OUT_OF_POOL_MEMORY:
      return "VK_ERROR_OUT_OF_POOL_MEMORY";
    case VK_ERROR_INVALID_EXTERNAL_HANDLE:
      return "VK_ERROR_INVALID_EXTERNAL_HANDLE";
    case VK_ERROR_FRAGMENTATION:
      return "VK_ERROR_FRAGMENTATION";
    case VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS:
      return "VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS";
    case VK_ERROR_UNKNOWN:
      return "VK_ERROR_UNKNOWN";
    default:
      return "VK_RESULT_UNKNOWN";
  }
}

// A failed Vulkan call as a one-line status: "<call>: <what>: VK_ERROR_...". Out-of-memory
// results are kResourceExhausted, a missing driver kNotFound, the rest kIoError.
Status VkError(VkResult r, std::string_view call, std::string_view what = {}) {
  StatusCode code = StatusCode::kIoError;
  if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY ||
      r == VK_ERROR_OUT_OF_POOL_MEMORY || r == VK_ERROR_TOO_MANY_OBJECTS) {
    code = StatusCode::kResourceExhausted;
  } else if (r == VK_ERROR_INCOMPATIBLE_DRIVER) {
    code = StatusCode::kNotFound;
  }
  std::string message(call);
  if (!what.empty()) message += fmt::format(": {}", what);
  return Status(code, fmt::format("{}: {}", message, VkResultName(r)));
}

std::string VersionString(uint32_t v) {
  return fmt::format("{}.{}.{}", VK_API_VERSION_MAJOR(v), VK_API_VERSION_MINOR(v),
                     VK_API_VERSION_PATCH(v));
}

const char* DeviceTypeName(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
      return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
      return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
      return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
      return "cpu";
    default:
      return "other";
  }
}

// An instance with no layers and no extensions. *instance stays VK_NULL_HANDLE on failure;
// a machine without any Vulkan driver gives VK_ERROR_INCOMPATIBLE_DRIVER.
VkResult CreateInstance(VkInstance* instance) {
  VkApplicationInfo app{};
  app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
  app.pApplicationName = "moetier";
  app.pEngineName = "moetier";
  app.apiVersion = VK_API_VERSION_1_1;
  VkInstanceCreateInfo ci{};
  ci.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
  ci.pApplicationInfo = &app;
  *instance = VK_NULL_HANDLE;
  return vkCreateInstance(&ci, nullptr, instance);
}

Result<std::vector<VkPhysicalDevice>> PhysicalDevices(VkInstance instance) {
  uint32_t n = 0;
  VkResult r = vkEnumeratePhysicalDevices(instance, &n, nullptr);
  if (r != VK_SUCCESS) return VkError(r, "vkEnumeratePhysicalDevices");
  std::vector<VkPhysicalDevice> devices(n);
  r = vkEnumeratePhysicalDevices(instance, &n, devices.data());
  if (r != VK_SUCCESS && r != VK_INCOMPLETE) return VkError(r, "vkEnumeratePhysicalDevices");
  devices.resize(n);
  return devices;
}

DeviceInfo Describe(VkPhysicalDevice phys, int index) {
  VkPhysicalDeviceProperties props;
  vkGetPhysicalDeviceProperties(phys, &props);
  DeviceInfo info;
  info.index = index;
  info.name = props.deviceName;
  info.type = DeviceTypeName(props.deviceType);
  info.api_version = VersionString(props.apiVersion);
  info.driver = fmt::format("driver version {:#x}", props.driverVersion);
  if (props.apiVersion >= VK_API_VERSION_1_2) {
    VkPhysicalDeviceDriverProperties driver{};
    driver.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES;
    VkPhysicalDeviceProperties2 props2{};
    props2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
    props2.pNext = &driver;
    vkGetPhysicalDeviceProperties2(phys, &props2);
    info.driver = std::string(driver.driverName);
    if (driver.driverInfo[0] != '\0') info.driver += fmt::format(" {}", driver.driverInfo);
  }
  VkPhysicalDeviceMemoryProperties mem;
  vkGetPhysicalDeviceMemoryProperties(phys, &mem);
  for (uint32_t h = 0; h < mem.memoryHeapCount; ++h) {
    if (mem.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) {
      info.device_local_bytes += mem.memoryHeaps[h].size;
    }
  }
  return info;
}

// The first memory type allowed by `type_bits` that has all of `want`; -1 if none.
int FindMemoryType(const VkPhysicalDeviceMemoryProperties& mem, uint32_t type_bits,
                   VkMemoryPropertyFlags want) {
  for (uint32_t i = 0; i < mem.memoryTypeCount; ++i) {
    if ((type_bits & (1u << i)) && (mem.memoryTypes[i].propertyFlags & want) == want) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

// A full memory barrier between everything before and after it on the queue: earlier
// submissions' writes become visible to this one's reads, and (with the host bits) to the
// host after the fence.
void FullBarrier(VkCommandBuffer cmd) {
  VkMemoryBarrier barrier{};
  barrier.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
  barrier.srcAccessMask =
      VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_HOST_WRITE_BIT;
  barrier.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                          VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT |
                          VK_ACCESS_HOST_READ_BIT;
  vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
                       VK_PIPELINE_STAGE_ALL_COMMANDS_BIT | VK_PIPELINE_STAGE_HOST_BIT, 0, 1,
                       &barrier, 0, nullptr, 0, nullptr);
}

}  // namespace

bool HaveVulkan() { return true; }

Result<std::vector<DeviceInfo>> ListDevices() {
  VkInstance instance;
  VkResult r = CreateInstance(&instance);
  if (r == VK_ERROR_INCOMPATIBLE_DRIVER) return std::vector<DeviceInfo>{};  // no driver
  if (r != VK_SUCCESS) return VkError(r, "vkCreateInstance");
  Result<std::vector<VkPhysicalDevice>> devices = PhysicalDevices(instance);
  std::vector<DeviceInfo> infos;
  if (devices.ok()) {
    for (size_t i = 0; i < devices->size(); ++i) {
      infos.push_back(Describe((*devices)[i], static_cast<int>(i)));
    }
  }
  vkDestroyInstance(instance, nullptr);
  if (!devices.ok()) return devices.status();
  return infos;
}

// ---- Buffer ----

struct Buffer::Impl {
  VkDevice device = VK_NULL_HANDLE;
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  void* mapped = nullptr;  // host-visible buffers only (the staging buffer)

  ~Impl() {
    if (buffer != VK_NULL_HANDLE) vkDestroyBuffer(device, buffer, nullptr);
    if (memory != VK_NULL_HANDLE) vkFreeMemory(device, memory, nullptr);
  }
};

Buffer::Buffer() = default;
Buffer::Buffer(Buffer&&) noexcept = default;
Buffer& Buffer::operator=(Buffer&&) noexcept = default;
Buffer::~Buffer() = default;
uint8_t* Buffer::host_data() const {
  return impl_ == nullptr ? nullptr : static_cast<uint8_t*>(impl_->mapped);
}

// ---- Pipeline ----

struct Pipeline::Impl {
  VkDevice device = VK_NULL_HANDLE;
  std::string name;
  uint32_t n_buffers = 0;
  uint32_t push_constant_bytes = 0;
  VkShaderModule module = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkPipeline pipeline = VK_NULL_HANDLE;

  ~Impl() {
    if (pipeline != VK_NULL_HANDLE) vkDestroyPipeline(device, pipeline, nullptr);
    if (layout != VK_NULL_HANDLE) vkDestroyPipelineLayout(device, layout, nullptr);
    if (set_layout != VK_NULL_HANDLE) vkDestroyDescriptorSetLayout(device, set_layout, nullptr);
    if (module != VK_NULL_HANDLE) vkDestroyShaderModule(device, module, nullptr);
  }
};

Pipeline::Pipeline() = default;
Pipeline::Pipeline(Pipeline&&) noexcept = default;
Pipeline& Pipeline::operator=(Pipeline&&) noexcept = default;
Pipeline::~Pipeline() = default;

// ---- CommandRecorder ----

struct CommandRecorder::Impl {
  VkDevice device = VK_NULL_HANDLE;
  VkCommandBuffer cmd = VK_NULL_HANDLE;
  VkDescriptorPool pool = VK_NULL_HANDLE;
  uint64_t offset_alignment = 1;
  uint64_t max_range = 0;
};

void CommandRecorder::Dispatch(const Pipeline& pipeline, std::span<const BufferRange> buffers,
                               std::span<const uint8_t> push, uint32_t x, uint32_t y, uint32_t z) {
  if (!status_.ok()) return;
  const Pipeline::Impl* p = pipeline.impl();
  MT_CHECK_MSG(p != nullptr, "Dispatch: an empty Pipeline");
  MT_CHECK_MSG(buffers.size() == p->n_buffers, "Dispatch: wrong number of buffers");
  MT_CHECK_MSG(push.size() == p->push_constant_bytes, "Dispatch: wrong push constant size");
  VkDescriptorBufferInfo infos[kMaxBuffersPerSet];
  VkWriteDescriptorSet writes[kMaxBuffersPerSet];
  for (size_t i = 0; i < buffers.size(); ++i) {
    const BufferRange& b = buffers[i];
    MT_CHECK_MSG(b.buffer != nullptr && b.buffer->impl() != nullptr, "Dispatch: no buffer");
    if (b.offset % impl_->offset_alignment != 0 || b.size == 0 ||
        b.offset + b.size > RoundUp(b.buffer->size(), kBufferGranule) ||
        b.size > impl_->max_range) {
      status_ = OutOfRange(
          "{}: binding {}: bytes [{}, {}) of a {}-byte buffer (offset alignment {}, largest "
          "range {})",
          p->name, i, b.offset, b.offset + b.size, b.buffer->size(), impl_->offset_alignment,
          impl_->max_range);
      return;
    }
    infos[i] = {b.buffer->impl()->buffer, b.offset, b.size};
  }
  VkDescriptorSetAllocateInfo ai{};
  ai.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO;
  ai.descriptorPool = impl_->pool;
  ai.descriptorSetCount = 1;
  ai.pSetLayouts = &p->set_layout;
  VkDescriptorSet set;
  VkResult r = vkAllocateDescriptorSets(impl_->device, &ai, &set);
  if (r != VK_SUCCESS) {
    status_ = VkError(
        r, "vkAllocateDescriptorSets",
        fmt::format("{}: more than {} dispatches in one submission?", p->name, kMaxSetsPerSubmit));
    return;
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    writes[i] = {};
    writes[i].sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
    writes[i].dstSet = set;
    writes[i].dstBinding = static_cast<uint32_t>(i);
    writes[i].descriptorCount = 1;
    writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[i].pBufferInfo = &infos[i];
  }
  vkUpdateDescriptorSets(impl_->device, static_cast<uint32_t>(buffers.size()), writes, 0, nullptr);
  vkCmdBindPipeline(impl_->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p->pipeline);
  vkCmdBindDescriptorSets(impl_->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p->layout, 0, 1, &set, 0,
                          nullptr);
  if (!push.empty()) {
    vkCmdPushConstants(impl_->cmd, p->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0,
                       static_cast<uint32_t>(push.size()), push.data());
  }
  vkCmdDispatch(impl_->cmd, x, y, z);
}

void CommandRecorder::Barrier() {
  if (!status_.ok()) return;
  FullBarrier(impl_->cmd);
}

void CommandRecorder::Copy(const Buffer& src, uint64_t src_offset, const Buffer& dst,
                           uint64_t dst_offset, uint64_t bytes) {
  if (!status_.ok() || bytes == 0) return;
  if (src_offset + bytes > src.size() || dst_offset + bytes > dst.size()) {
    status_ = OutOfRange("copy of {} bytes: [{}, ...) of {} bytes to [{}, ...) of {} bytes", bytes,
                         src_offset, src.size(), dst_offset, dst.size());
    return;
  }
  VkBufferCopy region{src_offset, dst_offset, bytes};
  vkCmdCopyBuffer(impl_->cmd, src.impl()->buffer, dst.impl()->buffer, 1, &region);
}

// ---- Device ----

struct Device::Impl {
  VkInstance instance = VK_NULL_HANDLE;
  VkPhysicalDevice phys = VK_NULL_HANDLE;
  VkDevice device = VK_NULL_HANDLE;
  VkQueue queue = VK_NULL_HANDLE;
  VkCommandPool command_pool = VK_NULL_HANDLE;
  VkCommandBuffer cmd = VK_NULL_HANDLE;
  VkFence fence = VK_NULL_HANDLE;
  VkDescriptorPool descriptor_pool = VK_NULL_HANDLE;
  VkPhysicalDeviceMemoryProperties memory{};
  VkPhysicalDeviceLimits limits{};
  DeviceInfo info;
  Buffer staging;  // host-visible, kStagingBytes, made on the first upload or download
  CommandRecorder::Impl recorder;
  bool recording = false;
  bool in_flight = false;  // submitted, not waited for

  ~Impl() {
    if (device != VK_NULL_HANDLE) {
      vkDeviceWaitIdle(device);
      staging = Buffer();
      if (descriptor_pool != VK_NULL_HANDLE) {
        vkDestroyDescriptorPool(device, descriptor_pool, nullptr);
      }
      if (fence != VK_NULL_HANDLE) vkDestroyFence(device, fence, nullptr);
      if (command_pool != VK_NULL_HANDLE) vkDestroyCommandPool(device, command_pool, nullptr);
      vkDestroyDevice(device, nullptr);
    }
    if (instance != VK_NULL_HANDLE) vkDestroyInstance(instance, nullptr);
  }

  // A buffer of `bytes` in memory with `flags`; "what" labels errors.
  Result<Buffer> MakeBuffer(uint64_t bytes, VkBufferUsageFlags usage, VkMemoryPropertyFlags want,
                            VkMemoryPropertyFlags fallback, std::string_view what) {
    Buffer out;
    out.impl_ = std::make_unique<Buffer::Impl>();
    out.impl_->device = device;
    out.size_ = bytes;
    VkBufferCreateInfo bi{};
    bi.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
    bi.size = RoundUp(bytes, kBufferGranule);
    bi.usage = usage;
    bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
    const std::string label = fmt::format("{} of {} bytes", what, bytes);
    VkResult r = vkCreateBuffer(device, &bi, nullptr, &out.impl_->buffer);
    if (r != VK_SUCCESS) return VkError(r, "vkCreateBuffer", label);
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(device, out.impl_->buffer, &req);
    int type = FindMemoryType(memory, req.memoryTypeBits, want);
    if (type < 0) type = FindMemoryType(memory, req.memoryTypeBits, fallback);
    if (type < 0) return NotFound("{}: no suitable Vulkan memory type", label);
    VkMemoryAllocateInfo mi{};
    mi.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
    mi.allocationSize = req.size;
    mi.memoryTypeIndex = static_cast<uint32_t>(type);
    r = vkAllocateMemory(device, &mi, nullptr, &out.impl_->memory);
    if (r != VK_SUCCESS) return VkError(r, "vkAllocateMemory", label);
    r = vkBindBufferMemory(device, out.impl_->buffer, out.impl_->memory, 0);
    if (r != VK_SUCCESS) return VkError(r, "vkBindBufferMemory", label);
    if (memory.memoryTypes[type].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT &&
        (want & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT)) {
      r = vkMapMemory(device, out.impl_->memory, 0, VK_WHOLE_SIZE, 0, &out.impl_->mapped);
      if (r != VK_SUCCESS) return VkError(r, "vkMapMemory", label);
    }
    return out;
  }

  Status EnsureStaging() {
    if (staging.impl() != nullptr) return Status::Ok();
    const VkMemoryPropertyFlags host =
        VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    staging = MT_TRY(MakeBuffer(
        kStagingBytes, VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
        host | VK_MEMORY_PROPERTY_HOST_CACHED_BIT, host, "the staging buffer"));
    return Status::Ok();
  }
};

Device::Device(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Device::~Device() = default;

const DeviceInfo& Device::info() const { return impl_->info; }
uint64_t Device::storage_offset_alignment() const {
  return impl_->limits.minStorageBufferOffsetAlignment;
}
uint64_t Device::max_storage_range() const { return impl_->limits.maxStorageBufferRange; }
uint32_t Device::max_group_count_x() const { return impl_->limits.maxComputeWorkGroupCount[0]; }

Result<std::unique_ptr<Device>> Device::Create(int index) {
  auto impl = std::make_unique<Impl>();
  VkResult r = CreateInstance(&impl->instance);
  if (r == VK_ERROR_INCOMPATIBLE_DRIVER) {
    return NotFound("no Vulkan device found (no Vulkan driver: vkCreateInstance: {})",
                    VkResultName(r));
  }
  if (r != VK_SUCCESS) return VkError(r, "vkCreateInstance");
  std::vector<VkPhysicalDevice> devices = MT_TRY(PhysicalDevices(impl->instance));
  if (devices.empty()) return NotFound("no Vulkan device found");
  if (index < 0 || static_cast<size_t>(index) >= devices.size()) {
    return NotFound("no Vulkan device {} (found {}: 0..{})", index, devices.size(),
                    devices.size() - 1);
  }
  impl->phys = devices[index];
  impl->info = Describe(impl->phys, index);
  VkPhysicalDeviceProperties props;
  vkGetPhysicalDeviceProperties(impl->phys, &props);
  impl->limits = props.limits;
  vkGetPhysicalDeviceMemoryProperties(impl->phys, &impl->memory);

  uint32_t n_families = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(impl->phys, &n_families, nullptr);
  std::vector<VkQueueFamilyProperties> families(n_families);
  vkGetPhysicalDeviceQueueFamilyProperties(impl->phys, &n_families, families.data());
  int family = -1;
  for (uint32_t i = 0; i < n_families && family < 0; ++i) {
    if (families[i].queueFlags & VK_QUEUE_COMPUTE_BIT) family = static_cast<int>(i);
  }
  const std::string& name = impl->info.name;
  if (family < 0) return NotFound("Vulkan device {} ({}): no compute queue", index, name);

  const float priority = 1.0f;
  VkDeviceQueueCreateInfo qi{};
  qi.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
  qi.queueFamilyIndex = static_cast<uint32_t>(family);
  qi.queueCount = 1;
  qi.pQueuePriorities = &priority;
  VkDeviceCreateInfo di{};
  di.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
  di.queueCreateInfoCount = 1;
  di.pQueueCreateInfos = &qi;
  r = vkCreateDevice(impl->phys, &di, nullptr, &impl->device);
  if (r != VK_SUCCESS) return VkError(r, "vkCreateDevice", name);
  vkGetDeviceQueue(impl->device, static_cast<uint32_t>(family), 0, &impl->queue);

  VkCommandPoolCreateInfo pi{};
  pi.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
  pi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pi.queueFamilyIndex = static_cast<uint32_t>(family);
  r = vkCreateCommandPool(impl->device, &pi, nullptr, &impl->command_pool);
  if (r != VK_SUCCESS) return VkError(r, "vkCreateCommandPool", name);
  VkCommandBufferAllocateInfo ci{};
  ci.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
  ci.commandPool = impl->command_pool;
  ci.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ci.commandBufferCount = 1;
  r = vkAllocateCommandBuffers(impl->device, &ci, &impl->cmd);
  if (r != VK_SUCCESS) return VkError(r, "vkAllocateCommandBuffers", name);
  VkFenceCreateInfo fi{};
  fi.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
  r = vkCreateFence(impl->device, &fi, nullptr, &impl->fence);
  if (r != VK_SUCCESS) return VkError(r, "vkCreateFence", name);
  VkDescriptorPoolSize pool_size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                 kMaxSetsPerSubmit * kMaxBuffersPerSet};
  VkDescriptorPoolCreateInfo dpi{};
  dpi.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO;
  dpi.maxSets = kMaxSetsPerSubmit;
  dpi.poolSizeCount = 1;
  dpi.pPoolSizes = &pool_size;
  r = vkCreateDescriptorPool(impl->device, &dpi, nullptr, &impl->descriptor_pool);
  if (r != VK_SUCCESS) return VkError(r, "vkCreateDescriptorPool", name);

  impl->recorder.device = impl->device;
  impl->recorder.cmd = impl->cmd;
  impl->recorder.pool = impl->descriptor_pool;
  impl->recorder.offset_alignment =
      std::max<uint64_t>(1, props.limits.minStorageBufferOffsetAlignment);
  impl->recorder.max_range = props.limits.maxStorageBufferRange;
  return std::unique_ptr<Device>(new Device(std::move(impl)));
}

Result<Buffer> Device::CreateBuffer(uint64_t bytes) {
  MT_CHECK_MSG(bytes > 0, "CreateBuffer: zero bytes");
  return impl_->MakeBuffer(bytes,
                           VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                               VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                           VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0, "a device buffer");
}

Result<Buffer> Device::CreateHostBuffer(uint64_t bytes) {
  const VkMemoryPropertyFlags host =
      VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  return impl_->MakeBuffer(bytes,
                           VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                               VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                           host | VK_MEMORY_PROPERTY_HOST_CACHED_BIT, host, "a host buffer");
}

Status Device::BeginCommands() {
  MT_CHECK_MSG(!impl_->recording, "Device: Execute inside Execute");
  MT_CHECK_MSG(!impl_->in_flight, "Device: a submission before the last one's Wait");
  VkResult r = vkResetDescriptorPool(impl_->device, impl_->descriptor_pool, 0);
  if (r != VK_SUCCESS) return VkError(r, "vkResetDescriptorPool");
  r = vkResetCommandBuffer(impl_->cmd, 0);
  if (r != VK_SUCCESS) return VkError(r, "vkResetCommandBuffer");
  VkCommandBufferBeginInfo bi{};
  bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  r = vkBeginCommandBuffer(impl_->cmd, &bi);
  if (r != VK_SUCCESS) return VkError(r, "vkBeginCommandBuffer");
  impl_->recording = true;
  FullBarrier(impl_->cmd);  // earlier submissions' writes -> this one's reads
  return Status::Ok();
}

Status Device::EndCommandsAndSubmit(const Status& recorded) {
  impl_->recording = false;
  FullBarrier(impl_->cmd);  // this submission's writes -> the host, after the fence
  VkResult r = vkEndCommandBuffer(impl_->cmd);
  if (!recorded.ok()) return recorded;
  if (r != VK_SUCCESS) return VkError(r, "vkEndCommandBuffer");
  VkSubmitInfo si{};
  si.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
  si.commandBufferCount = 1;
  si.pCommandBuffers = &impl_->cmd;
  r = vkResetFences(impl_->device, 1, &impl_->fence);
  if (r != VK_SUCCESS) return VkError(r, "vkResetFences");
  r = vkQueueSubmit(impl_->queue, 1, &si, impl_->fence);
  if (r != VK_SUCCESS) return VkError(r, "vkQueueSubmit", impl_->info.name);
  impl_->in_flight = true;
  return Status::Ok();
}

Status Device::Wait() {
  if (!impl_->in_flight) return Status::Ok();
  impl_->in_flight = false;
  VkResult r = vkWaitForFences(impl_->device, 1, &impl_->fence, VK_TRUE, kFenceTimeoutNs);
  if (r != VK_SUCCESS) return VkError(r, "vkWaitForFences", impl_->info.name);
  return Status::Ok();
}

CommandRecorder::Impl* Device::recorder_impl() { return &impl_->recorder; }

Status Device::Upload(const Buffer& dst, uint64_t offset, std::span<const uint8_t> bytes) {
  if (offset > dst.size() || bytes.size() > dst.size() - offset) {
    return OutOfRange("upload of {} bytes at offset {} into a {}-byte buffer", bytes.size(), offset,
                      dst.size());
  }
  MT_RETURN_IF_ERROR(impl_->EnsureStaging());
  for (uint64_t done = 0; done < bytes.size();) {
    const uint64_t n = std::min<uint64_t>(kStagingBytes, bytes.size() - done);
    std::memcpy(impl_->staging.impl()->mapped, bytes.data() + done, n);
    MT_RETURN_IF_ERROR(
        Execute([&](CommandRecorder& rec) { rec.Copy(impl_->staging, 0, dst, offset + done, n); }));
    done += n;
  }
  return Status::Ok();
}

Status Device::Download(const Buffer& src, uint64_t offset, std::span<uint8_t> bytes) {
  if (offset > src.size() || bytes.size() > src.size() - offset) {
    return OutOfRange("download of {} bytes at offset {} from a {}-byte buffer", bytes.size(),
                      offset, src.size());
  }
  MT_RETURN_IF_ERROR(impl_->EnsureStaging());
  for (uint64_t done = 0; done < bytes.size();) {
    const uint64_t n = std::min<uint64_t>(kStagingBytes, bytes.size() - done);
    MT_RETURN_IF_ERROR(
        Execute([&](CommandRecorder& rec) { rec.Copy(src, offset + done, impl_->staging, 0, n); }));
    std::memcpy(bytes.data() + done, impl_->staging.impl()->mapped, n);
    done += n;
  }
  return Status::Ok();
}

Result<Pipeline> Device::CreatePipeline(std::string_view name, std::span<const uint32_t> spirv,
                                        uint32_t n_buffers, uint32_t push_constant_bytes) {
  MT_CHECK_MSG(n_buffers <= kMaxBuffersPerSet, "CreatePipeline: too many buffers");
  if (spirv.empty()) return NotFound("shader {}: no SPIR-V built into this binary", name);
  Pipeline out;
  out.impl_ = std::make_unique<Pipeline::Impl>();
  Pipeline::Impl& p = *out.impl_;
  p.device = impl_->device;
  p.name = std::string(name);
  p.n_buffers = n_buffers;
  p.push_constant_bytes = push_constant_bytes;

  VkShaderModuleCreateInfo mi{};
  mi.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
  mi.codeSize = spirv.size_bytes();
  mi.pCode = spirv.data();
  VkResult r = vkCreateShaderModule(p.device, &mi, nullptr, &p.module);
  if (r != VK_SUCCESS) return VkError(r, "vkCreateShaderModule", name);

  VkDescriptorSetLayoutBinding bindings[kMaxBuffersPerSet];
  for (uint32_t i = 0; i < n_buffers; ++i) {
    bindings[i] = {};
    bindings[i].binding = i;
    bindings[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    bindings[i].descriptorCount = 1;
    bindings[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  VkDescriptorSetLayoutCreateInfo li{};
  li.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO;
  li.bindingCount = n_buffers;
  li.pBindings = bindings;
  r = vkCreateDescriptorSetLayout(p.device, &li, nullptr, &p.set_layout);
  if (r != VK_SUCCESS) return VkError(r, "vkCreateDescriptorSetLayout", name);

  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, push_constant_bytes};
  VkPipelineLayoutCreateInfo pli{};
  pli.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
  pli.setLayoutCount = 1;
  pli.pSetLayouts = &p.set_layout;
  pli.pushConstantRangeCount = push_constant_bytes > 0 ? 1 : 0;
  pli.pPushConstantRanges = &range;
  r = vkCreatePipelineLayout(p.device, &pli, nullptr, &p.layout);
  if (r != VK_SUCCESS) return VkError(r, "vkCreatePipelineLayout", name);

  VkComputePipelineCreateInfo ci{};
  ci.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
  ci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  ci.stage.module = p.module;
  ci.stage.pName = "main";
  ci.layout = p.layout;
  r = vkCreateComputePipelines(p.device, VK_NULL_HANDLE, 1, &ci, nullptr, &p.pipeline);
  if (r != VK_SUCCESS) return VkError(r, "vkCreateComputePipelines", name);
  return out;
}

}  // namespace mt::gpu
