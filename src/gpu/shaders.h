// The compute shaders of src/gpu/shaders/, compiled to SPIR-V by glslc at build time and built
// into the binary (cmake/embed_spirv.cmake writes the table).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace mt::gpu {

// The SPIR-V words of shader `name` (its file name without ".comp"); empty when there is no
// such shader or the build has no Vulkan.
std::span<const uint32_t> ShaderSpirv(std::string_view name);

}  // namespace mt::gpu
