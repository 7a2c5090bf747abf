#include "gpu/device.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <vector>

#include "gpu/shaders.h"
#include "gpu/test_no_driver.h"

namespace mt::gpu {
namespace {

// Device 0, or a skip when this machine has none (no driver, or no device).
std::unique_ptr<Device> OpenOrSkip(std::string* skip) {
  Result<std::unique_ptr<Device>> device = Device::Create(0);
  if (device.ok()) return std::move(*device);
  EXPECT_EQ(device.status().code(), StatusCode::kNotFound) << device.status().message();
  *skip = device.status().message();
  return nullptr;
}

TEST(Device, ListDevicesDescribesEachDevice) {
  ASSERT_TRUE(HaveVulkan());
  Result<std::vector<DeviceInfo>> devices = ListDevices();
  ASSERT_TRUE(devices.ok()) << devices.status().message();
  for (size_t i = 0; i < devices->size(); ++i) {
    const DeviceInfo& d = (*devices)[i];
    EXPECT_EQ(d.index, static_cast<int>(i));
    EXPECT_FALSE(d.name.empty());
    EXPECT_FALSE(d.driver.empty());
    EXPECT_FALSE(d.type.empty());
  }
}

TEST(Device, MissingDeviceIsNotFound) {
  Result<std::vector<DeviceInfo>> devices = ListDevices();
  ASSERT_TRUE(devices.ok()) << devices.status().message();
  Result<std::unique_ptr<Device>> device = Device::Create(static_cast<int>(devices->size()));
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().code(), StatusCode::kNotFound);
  EXPECT_NE(device.status().message().find("Vulkan device"), std::string::npos)
      << device.status().message();
  EXPECT_FALSE(Device::Create(-1).ok());
}

// A machine without any Vulkan driver (the loader finds no ICD): an empty list, and opening
// a device is kNotFound in one line, never a crash.
TEST(Device, NoDriverIsNotFound) {
  Result<std::vector<DeviceInfo>> devices = std::vector<DeviceInfo>{};
  Result<std::unique_ptr<Device>> device = NotFound("not tried");
  {
    ScopedNoVulkanDriver no_driver;
    devices = ListDevices();
    device = Device::Create(0);
  }
  ASSERT_TRUE(devices.ok()) << devices.status().message();
  EXPECT_TRUE(devices->empty());
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().code(), StatusCode::kNotFound) << device.status().message();
  EXPECT_NE(device.status().message().find("no Vulkan device found"), std::string::npos)
      << device.status().message();
}

TEST(Device, UploadDownloadRoundTripsAtAnyOffset) {
  std::string skip;
  std::unique_ptr<Device> device = OpenOrSkip(&skip);
  if (device == nullptr) GTEST_SKIP() << skip;
  Result<Buffer> buffer = device->CreateBuffer(1001);
  ASSERT_TRUE(buffer.ok()) << buffer.status().message();
  EXPECT_EQ(buffer->size(), 1001u);
  std::vector<uint8_t> bytes(1001);
  std::iota(bytes.begin(), bytes.end(), uint8_t{7});
  ASSERT_TRUE(device->Upload(*buffer, 0, bytes).ok());
  std::vector<uint8_t> patch = {1, 2, 3};
  ASSERT_TRUE(device->Upload(*buffer, 997, patch).ok());  // unaligned, to the last byte
  std::copy(patch.begin(), patch.end(), bytes.begin() + 997);
  std::vector<uint8_t> back(1001);
  ASSERT_TRUE(device->Download(*buffer, 0, back).ok());
  EXPECT_EQ(back, bytes);
  std::vector<uint8_t> middle(5);
  ASSERT_TRUE(device->Download(*buffer, 3, middle).ok());
  EXPECT_EQ(middle, std::vector<uint8_t>(bytes.begin() + 3, bytes.begin() + 8));
}

TEST(Device, HostBuffersMoveBytesBetweenSubmitAndWait) {
  std::string skip;
  std::unique_ptr<Device> device = OpenOrSkip(&skip);
  if (device == nullptr) GTEST_SKIP() << skip;
  Result<Buffer> in = device->CreateHostBuffer(64);
  Result<Buffer> mid = device->CreateBuffer(64);
  Result<Buffer> out = device->CreateHostBuffer(64);
  ASSERT_TRUE(in.ok() && mid.ok() && out.ok());
  ASSERT_NE(in->host_data(), nullptr);
  EXPECT_EQ(mid->host_data(), nullptr);
  std::iota(in->host_data(), in->host_data() + 64, uint8_t{3});
  std::fill(out->host_data(), out->host_data() + 64, uint8_t{0});
  ASSERT_TRUE(device
                  ->Submit([&](CommandRecorder& rec) {
                    rec.Copy(*in, 0, *mid, 0, 64);
                    rec.Barrier();
                    rec.Copy(*mid, 8, *out, 0, 56);
                  })
                  .ok());
  ASSERT_TRUE(device->Wait().ok());
  ASSERT_TRUE(device->Wait().ok());  // nothing in flight: Ok
  for (int i = 0; i < 56; ++i) EXPECT_EQ(out->host_data()[i], uint8_t(3 + 8 + i)) << i;
}

TEST(Device, OutOfRangeTransfersAreErrors) {
  std::string skip;
  std::unique_ptr<Device> device = OpenOrSkip(&skip);
  if (device == nullptr) GTEST_SKIP() << skip;
  Result<Buffer> buffer = device->CreateBuffer(64);
  ASSERT_TRUE(buffer.ok()) << buffer.status().message();
  std::vector<uint8_t> bytes(65);
  Status s = device->Upload(*buffer, 0, bytes);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.message();
  s = device->Download(*buffer, 60, std::span<uint8_t>(bytes.data(), 5));
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.message();
  s = device->Execute([&](CommandRecorder& rec) { rec.Copy(*buffer, 0, *buffer, 32, 33); });
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.message();
}

TEST(Device, PipelineNeedsSpirv) {
  std::string skip;
  std::unique_ptr<Device> device = OpenOrSkip(&skip);
  if (device == nullptr) GTEST_SKIP() << skip;
  Result<Pipeline> missing = device->CreatePipeline("no_such_shader", {}, 3, 36);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no_such_shader"), std::string::npos);
  EXPECT_TRUE(ShaderSpirv("no_such_shader").empty());
}

}  // namespace
}  // namespace mt::gpu
