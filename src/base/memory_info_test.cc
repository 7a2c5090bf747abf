#include "base/memory_info.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace mt {
namespace {

namespace fs = std::filesystem;

class FakeTree {
 public:
  FakeTree() : root_(fs::temp_directory_path() / ("mt-meminfo-" + std::to_string(getpid()))) {
    fs::remove_all(root_);
  }
  ~FakeTree() { fs::remove_all(root_); }
  void Write(const std::string& rel, const std::string& text) {
    fs::path p = root_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  std::string proc() const { return (root_ / "proc").string(); }
  std::string cgroup() const { return (root_ / "cgroup").string(); }
  std::string sys() const { return (root_ / "sys").string(); }

 private:
  fs::path root_;
};

constexpr const char* kMeminfo =
    "MemTotal:       24000000 kB\nMemFree:         1000 kB\nMemAvailable:   20000000 kB\n";

TEST(TransparentHugePageTest, ReadsTheBracketedMode) {
  FakeTree t;
  const std::string sys = t.sys();
  EXPECT_EQ(TransparentHugePageMode(sys), std::nullopt);  // no file: no THP support
  t.Write("sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n");
  EXPECT_EQ(TransparentHugePageMode(sys), "madvise");
  t.Write("sys/kernel/mm/transparent_hugepage/enabled", "always madvise [never]\n");
  EXPECT_EQ(TransparentHugePageMode(sys), "never");
  t.Write("sys/kernel/mm/transparent_hugepage/enabled", "always madvise never\n");
  EXPECT_EQ(TransparentHugePageMode(sys), std::nullopt);
}

TEST(CpuLimitTest, CgroupV2TakesTheSmallestQuotaUpTheTree) {
  FakeTree t;
  t.Write("proc/self/cgroup", "0::/a/b\n");
  t.Write("cgroup/a/b/cpu.max", "max 100000\n");
  t.Write("cgroup/a/cpu.max", "150000 100000\n");  // 1.5 CPUs: 2 threads
  t.Write("cgroup/cpu.max", "400000 100000\n");
  EXPECT_EQ(CgroupCpuLimit(t.proc(), t.cgroup()), 2);
  t.Write("cgroup/a/cpu.max", "50000 100000\n");  // half a CPU: still one thread
  EXPECT_EQ(CgroupCpuLimit(t.proc(), t.cgroup()), 1);
}

TEST(CpuLimitTest, CgroupV1CpuController) {
  FakeTree t;
  t.Write("proc/self/cgroup", "5:memory:/x\n4:cpu,cpuacct:/docker/c1\n");
  t.Write("cgroup/cpu/docker/c1/cpu.cfs_quota_us", "300000\n");
  t.Write("cgroup/cpu/docker/c1/cpu.cfs_period_us", "100000\n");
  t.Write("cgroup/cpu/cpu.cfs_quota_us", "-1\n");
  t.Write("cgroup/cpu/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(CgroupCpuLimit(t.proc(), t.cgroup()), 3);
}

TEST(CpuLimitTest, NoQuotaOrUnreadableFilesMeanNoLimit) {
  FakeTree t;
  EXPECT_EQ(CgroupCpuLimit(t.proc(), t.cgroup()), std::nullopt);  // no /proc/self/cgroup
  t.Write("proc/self/cgroup", "0::/a\n");
  EXPECT_EQ(CgroupCpuLimit(t.proc(), t.cgroup()), std::nullopt);  // no cpu.max anywhere
  t.Write("cgroup/a/cpu.max", "max 100000\n");
  EXPECT_EQ(CgroupCpuLimit(t.proc(), t.cgroup()), std::nullopt);
  t.Write("cgroup/a/cpu.max", "lots of cpu\n");
  EXPECT_EQ(CgroupCpuLimit(t.proc(), t.cgroup()), std::nullopt);
  t.Write("cgroup/a/cpu.max", "-5 0\n");
  EXPECT_EQ(CgroupCpuLimit(t.proc(), t.cgroup()), std::nullopt);
}

TEST(MemoryInfoTest, ParsesLimits) {
  EXPECT_EQ(ParseCgroupLimit("max\n").value(), std::nullopt);
  EXPECT_EQ(ParseCgroupLimit("1073741824\n").value(), 1073741824u);
  EXPECT_EQ(ParseCgroupLimit("9223372036854771712").value(), std::nullopt);  // v1 unlimited
  EXPECT_FALSE(ParseCgroupLimit("lots").ok());
}

TEST(MemoryInfoTest, CgroupV2TakesTheSmallestLimitUpTheTree) {
  FakeTree t;
  t.Write("proc/meminfo", kMeminfo);
  t.Write("proc/self/cgroup", "0::/a/b\n");
  t.Write("cgroup/a/b/memory.max", "max\n");
  t.Write("cgroup/a/memory.max", "4294967296\n");
  t.Write("cgroup/memory.max", "8589934592\n");
  MemoryInfo m = ReadMemoryInfo(t.proc(), t.cgroup()).value();
  EXPECT_EQ(m.mem_total, 24000000ull * 1024);
  EXPECT_EQ(m.mem_available, 20000000ull * 1024);
  ASSERT_TRUE(m.cgroup_limit.has_value());
  EXPECT_EQ(*m.cgroup_limit, 4294967296u);
  EXPECT_NE(m.cgroup_limit_file.find("a/memory.max"), std::string::npos);
  EXPECT_EQ(m.available(), 4294967296u);
}

TEST(MemoryInfoTest, CgroupV1MemoryController) {
  FakeTree t;
  t.Write("proc/meminfo", kMeminfo);
  t.Write("proc/self/cgroup", "12:cpu,cpuacct:/x\n5:memory:/bench\n0::/\n");
  t.Write("cgroup/memory/bench/memory.limit_in_bytes", "2147483648\n");
  t.Write("cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  MemoryInfo m = ReadMemoryInfo(t.proc(), t.cgroup()).value();
  ASSERT_TRUE(m.cgroup_limit.has_value());
  EXPECT_EQ(*m.cgroup_limit, 2147483648u);
}

TEST(MemoryInfoTest, NoCgroupMeansMemAvailable) {
  FakeTree t;
  t.Write("proc/meminfo", kMeminfo);
  MemoryInfo m = ReadMemoryInfo(t.proc(), t.cgroup()).value();
  EXPECT_FALSE(m.cgroup_limit.has_value());
  EXPECT_EQ(m.available(), 20000000ull * 1024);
}

TEST(MemoryInfoTest, ErrorsNameTheFile) {
  FakeTree t;
  Result<MemoryInfo> r = ReadMemoryInfo(t.proc(), t.cgroup());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("meminfo: cannot read"), std::string::npos);
  t.Write("proc/meminfo", kMeminfo);
  t.Write("proc/self/cgroup", "0::/g\n");
  t.Write("cgroup/g/memory.max", "bogus\n");
  r = ReadMemoryInfo(t.proc(), t.cgroup());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("g/memory.max: not a memory limit"), std::string::npos);
}

TEST(MemoryInfoTest, ThisMachine) {
  Result<MemoryInfo> m = ReadMemoryInfo();
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_GT(m->mem_total, 0u);
  EXPECT_LE(m->available(), m->mem_total);
}

}  // namespace
}  // namespace mt
