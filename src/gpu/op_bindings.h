// What the small compute ops (attention_ops.cc, deltanet_ops.cc) share: word-offset bounds,
// bindings from an unaligned word offset, and a 1-D grid of workgroups split within the
// device's limits. Internal to src/gpu.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include "gpu/device.h"

namespace mt::gpu {

// The shaders index words and elements with uint32, adding small offsets and a group's 64:
// every count they index stays below 2^31.
inline constexpr uint64_t kIndexLimit = uint64_t{1} << 31;

// Whether `count` words from word `offset` lie inside a buffer of `bytes` (no overflow).
inline bool Inside(uint64_t offset, uint64_t count, uint64_t bytes) {
  const uint64_t words = bytes / 4;
  return offset <= words && count <= words - offset;
}

// A binding of a buffer from a word offset: the range starts at the offset rounded down to
// the device's alignment and `skip` words of it come first (the shader adds them).
struct Binding {
  BufferRange range;
  uint32_t skip = 0;  // words
};

// Words [offset, offset + count) of `buffer` (checked Inside by the caller). Any alignment
// (a power of two) rounds a multiple of 4 down to a multiple of 4.
inline Binding Bind(const Buffer* buffer, uint64_t offset, uint64_t count, uint64_t alignment) {
  const uint64_t start = offset * 4 / alignment * alignment;  // bytes
  const uint64_t skip = offset - start / 4;
  return {BufferRange{buffer, start, (skip + count) * 4}, static_cast<uint32_t>(skip)};
}

// Records `pipeline` over a 1-D grid of `groups` (>= 1) workgroups, split into (x, y)
// counts within the device's limits (the shaders' group index is y * count_x + x).
template <typename Push>
Status DispatchGroups(const Device& device, CommandRecorder& rec, std::string_view op,
                      const Pipeline& pipeline, std::span<const BufferRange> ranges,
                      const Push& push, uint64_t groups) {
  const uint64_t x = std::min<uint64_t>(groups, device.max_group_count_x());
  const uint64_t y = (groups + x - 1) / x;
  if (y > 65535) {  // Vulkan's least maxComputeWorkGroupCount[1]
    return InvalidArgument("gpu {}: {} workgroups are more than one dispatch holds", op, groups);
  }
  uint8_t bytes[sizeof(Push)];
  std::memcpy(bytes, &push, sizeof(push));
  rec.Dispatch(pipeline, ranges, bytes, static_cast<uint32_t>(x), static_cast<uint32_t>(y), 1);
  return rec.status();
}

}  // namespace mt::gpu
