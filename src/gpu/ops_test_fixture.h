// For the tests of the small compute ops (AttentionOps, DeltaNetOps): a fixture with the ops
// built once on the test binary's device (test_gpu.h), skipping without one, buffers to and
// from the device, and one op recorded and run alone.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "base/check.h"
#include "gpu/test_gpu.h"

namespace mt::gpu {

inline constexpr double kU = 1.0 / (1 << 24);  // float's unit roundoff
inline constexpr float kSentinel = -1234.5f;   // fills every float a dispatch must not write

template <typename Ops>
class GpuOpsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (TheGpu().device == nullptr) return;
    Result<std::unique_ptr<Ops>> ops = Ops::Create(TheGpu().device.get());
    if (ops.ok()) {
      ops_ = std::move(*ops);
    } else {
      ADD_FAILURE() << ops.status().message();
    }
  }
  static void TearDownTestSuite() { ops_.reset(); }  // before the Device
  void SetUp() override {
    if (TheGpu().device == nullptr) GTEST_SKIP() << TheGpu().skip;
    if (ops_ == nullptr) GTEST_SKIP() << "the ops could not be built";
  }

  static Device& Dev() { return *TheGpu().device; }

  // A device buffer holding `values`' bytes.
  template <typename T>
  static Buffer ToDevice(const std::vector<T>& values) {
    const size_t bytes = std::max<size_t>(values.size() * sizeof(T), 4);
    Result<Buffer> b = Dev().CreateBuffer(bytes);
    MT_CHECK(b.ok());
    MT_CHECK(
        Dev()
            .Upload(*b, 0,
                    {reinterpret_cast<const uint8_t*>(values.data()), values.size() * sizeof(T)})
            .ok());
    return std::move(*b);
  }
  template <typename T>
  static std::vector<T> FromDevice(const Buffer& b, size_t n) {
    std::vector<T> values(n);
    MT_CHECK(Dev().Download(b, 0, {reinterpret_cast<uint8_t*>(values.data()), n * sizeof(T)}).ok());
    return values;
  }

  // Records one op alone and runs it: the recording's error first.
  template <typename Args>
  static Status Run(const Args& args) {
    Status recorded;
    const Status executed =
        Dev().Execute([&](CommandRecorder& rec) { recorded = ops_->Record(rec, args); });
    return recorded.ok() ? executed : recorded;
  }

  static inline std::unique_ptr<Ops> ops_;
};

inline std::vector<float> Gaussian(size_t n, float sigma, std::mt19937& rng) {
  std::normal_distribution<float> gauss(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = gauss(rng);
  return v;
}

inline uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace mt::gpu
