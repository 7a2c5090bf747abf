// moetier devices (also `moetier --list-devices`, as llama.cpp spells it): the Vulkan devices
// this machine has, one line each with the N of --device vulkan:N, or one line saying that
// none was found or that this build has no Vulkan (both exit 0: nothing failed).
#include <cstdio>

#include "base/units.h"
#include "command.h"
#include "gpu/device.h"

namespace mt::cli {
namespace {

int Run() {
  if (!gpu::HaveVulkan()) {
    std::printf("no Vulkan devices: this build has no Vulkan (configure with -DMT_VULKAN=ON)\n");
    return kExitOk;
  }
  Result<std::vector<gpu::DeviceInfo>> devices = gpu::ListDevices();
  if (!devices.ok()) return ReportError(devices.status());
  if (devices->empty()) {
    std::printf("no Vulkan device found\n");
    return kExitOk;
  }
  std::printf("Vulkan devices:\n");
  for (const gpu::DeviceInfo& d : *devices) {
    std::printf("  vulkan:%d  %s  (%s; %s; Vulkan %s; %s device-local)\n", d.index, d.name.c_str(),
                d.type.c_str(), d.driver.c_str(), d.api_version.c_str(),
                HumanBytes(d.device_local_bytes).c_str());
  }
  return kExitOk;
}

}  // namespace

CommandMain SetupDevices(CLI::App& sub) {
  return [] { return Run(); };
}

}  // namespace mt::cli
