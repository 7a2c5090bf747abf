// For tests: while one lives, the Vulkan loader finds no driver (VK_ICD_FILENAMES and
// VK_DRIVER_FILES point at a file that is not there), as on a machine without Vulkan; the
// variables are restored when it goes.
#pragma once

#include <cstdlib>
#include <string>

namespace mt::gpu {

class ScopedNoVulkanDriver {
 public:
  ScopedNoVulkanDriver() {
    for (int i = 0; i < 2; ++i) {
      const char* v = std::getenv(kVars[i]);
      had_[i] = v != nullptr;
      if (had_[i]) saved_[i] = v;
      setenv(kVars[i], "/nonexistent/no_such_icd.json", 1);
    }
  }
  ~ScopedNoVulkanDriver() {
    for (int i = 0; i < 2; ++i) {
      if (had_[i]) {
        setenv(kVars[i], saved_[i].c_str(), 1);
      } else {
        unsetenv(kVars[i]);
      }
    }
  }
  ScopedNoVulkanDriver(const ScopedNoVulkanDriver&) = delete;
  ScopedNoVulkanDriver& operator=(const ScopedNoVulkanDriver&) = delete;

 private:
  static constexpr const char* kVars[2] = {"VK_ICD_FILENAMES", "VK_DRIVER_FILES"};
  std::string saved_[2];
  bool had_[2] = {false, false};
};

}  // namespace mt::gpu
