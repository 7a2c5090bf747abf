// How much memory this process may really use: MemAvailable and the cgroup memory limit
// (v1 or v2, the smallest limit on the path from the process's cgroup to the root); and how
// many CPUs' worth of time its cgroup CPU quota allows.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"

namespace mt {

struct MemoryInfo {
  uint64_t mem_total = 0;                // bytes, /proc/meminfo MemTotal
  uint64_t mem_available = 0;            // bytes, /proc/meminfo MemAvailable
  std::optional<uint64_t> cgroup_limit;  // bytes; nullopt when unlimited
  std::string cgroup_limit_file;         // the file the limit came from, for messages

  // The bytes available to this process: min(MemAvailable, cgroup limit).
  uint64_t available() const {
    return cgroup_limit ? std::min(mem_available, *cgroup_limit) : mem_available;
  }
};

// Reads /proc/meminfo, /proc/self/cgroup and the cgroup files. The roots are parameters so
// tests can point them at fake trees. Errors name the file that could not be read.
Result<MemoryInfo> ReadMemoryInfo(const std::string& proc_root = "/proc",
                                  const std::string& cgroup_root = "/sys/fs/cgroup");

// Parses a cgroup limit file's content: "max" (v2) or a number; v1's "unlimited" is a
// huge number near 2^63, treated as no limit. nullopt for no limit.
Result<std::optional<uint64_t>> ParseCgroupLimit(const std::string& text);

// The CPUs a cgroup CPU quota allows (docker --cpus, Kubernetes limits): ceil(quota / period)
// from cpu.max (v2: "QUOTA PERIOD" or "max PERIOD") or cpu.cfs_quota_us / cpu.cfs_period_us
// (v1, quota -1: none), the smallest on the path from the process's cgroup to the root.
// nullopt without a quota, or when the files cannot be read or parsed.
std::optional<int> CgroupCpuLimit(const std::string& proc_root = "/proc",
                                  const std::string& cgroup_root = "/sys/fs/cgroup");

// The transparent huge page mode: the bracketed word of
// SYS_ROOT/kernel/mm/transparent_hugepage/enabled ("always", "madvise" or "never"); nullopt
// when that file cannot be read or holds no bracketed word (a kernel without THP).
std::optional<std::string> TransparentHugePageMode(const std::string& sys_root = "/sys");

}  // namespace mt

namespace mt {

// Bytes this process has caused to be fetched from storage (/proc/self/io read_bytes),
// including page faults on file mappings; 0 if unavailable.
uint64_t ProcessStorageReadBytes();

}  // namespace mt
