#include "base/cpu_features.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

namespace mt {
namespace {

// Cross-checks cpuid against the kernel's view in /proc/cpuinfo.
TEST(CpuFeaturesTest, AgreesWithProcCpuinfo) {
  std::ifstream in("/proc/cpuinfo");
  std::string line, flags;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) == 0) {
      flags = line + " ";
      break;
    }
  }
  if (flags.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags";
  auto has = [&](const char* f) {
    return flags.find(std::string(" ") + f + " ") != std::string::npos;
  };
  const CpuFeatures& c = GetCpuFeatures();
  EXPECT_EQ(c.avx2, has("avx2"));
  EXPECT_EQ(c.fma, has("fma"));
  EXPECT_EQ(c.avx512f, has("avx512f"));
  EXPECT_EQ(c.avx512bw, has("avx512bw"));
  EXPECT_EQ(c.avx512vnni, has("avx512_vnni"));
  EXPECT_EQ(c.avx512bf16, has("avx512_bf16"));
  EXPECT_EQ(c.avx_vnni, has("avx_vnni"));
  EXPECT_FALSE(c.ToString().empty());
}

}  // namespace
}  // namespace mt
