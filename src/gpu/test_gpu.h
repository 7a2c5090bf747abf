// For gpu tests: one Device and one MatMul for the whole test binary (pipelines are built
// once per type), torn down before the process exits; without a device, why not (the tests
// skip, saying so).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "gpu/device.h"
#include "gpu/matmul.h"

namespace mt::gpu {

struct TestGpu {
  std::unique_ptr<Device> device;
  std::unique_ptr<MatMul> matmul;
  std::string skip;  // why there is no device
};

inline TestGpu& TheGpu() {
  static TestGpu* gpu = [] {
    auto* g = new TestGpu;
    Result<std::unique_ptr<Device>> device = Device::Create(0);
    if (device.ok()) {
      g->device = std::move(*device);
      Result<std::unique_ptr<MatMul>> matmul = MatMul::Create(g->device.get());
      if (matmul.ok()) {
        g->matmul = std::move(*matmul);
      } else {
        ADD_FAILURE() << matmul.status().message();
        g->device.reset();
        g->skip = matmul.status().message();
      }
    } else if (device.status().code() == StatusCode::kNotFound) {
      g->skip = device.status().message();
    } else {
      ADD_FAILURE() << device.status().message();
      g->skip = device.status().message();
    }
    return g;
  }();
  return *gpu;
}

class TestGpuEnvironment : public ::testing::Environment {
 public:
  void TearDown() override {
    TestGpu& gpu = TheGpu();
    gpu.matmul.reset();
    gpu.device.reset();
  }
};
inline const auto* const kTestGpuEnvironment =
    ::testing::AddGlobalTestEnvironment(new TestGpuEnvironment);

}  // namespace mt::gpu
