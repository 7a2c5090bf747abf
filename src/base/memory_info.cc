#include "base/memory_info.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <utility>
#include <vector>

#include "base/file_io.h"

namespace mt {
namespace {

namespace fs = std::filesystem;

std::optional<std::string> Slurp(const fs::path& p) {
  Result<std::string> text = ReadWholeFile(p.string());
  if (!text.ok()) return std::nullopt;
  return std::move(text.value());
}

// One line of /proc/self/cgroup: "0::/path" (v2: no controllers) or "N:cpu,cpuacct:/path"
// (v1).
struct CgroupLine {
  std::string controllers;
  fs::path path;
  bool v2() const { return controllers.empty(); }
  bool Has(std::string_view controller) const {
    return ("," + controllers + ",").find("," + std::string(controller) + ",") != std::string::npos;
  }
};

// This process's cgroups; none if /proc/self/cgroup cannot be read.
std::vector<CgroupLine> ProcessCgroups(const std::string& proc_root) {
  std::vector<CgroupLine> out;
  std::optional<std::string> groups = Slurp(fs::path(proc_root) / "self/cgroup");
  if (!groups) return out;
  std::istringstream gl(*groups);
  std::string line;
  while (std::getline(gl, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    out.push_back({line.substr(a + 1, b - a - 1), fs::path(line.substr(b + 1))});
  }
  return out;
}

// The smallest limit found in `file` of `dir` and each of its parents up to `root`.
Result<std::optional<uint64_t>> SmallestLimit(const fs::path& root, fs::path dir, const char* file,
                                              std::string* source) {
  std::optional<uint64_t> best;
  for (;;) {
    fs::path p = root / dir.relative_path() / file;
    if (std::optional<std::string> text = Slurp(p)) {
      Result<std::optional<uint64_t>> v = ParseCgroupLimit(*text);
      if (!v.ok()) return v.status().WithContext(p.string());
      if (v.value() && (!best || *v.value() < *best)) {
        best = v.value();
        *source = p.string();
      }
    }
    if (dir == dir.root_path() || dir.empty()) break;
    dir = dir.parent_path();
  }
  return best;
}

// ceil(quota / period) CPUs from a quota file's numbers; nullopt for "max", -1 or garbage.
std::optional<int> CpusOfQuota(const std::string& quota, const std::string& period) {
  try {
    size_t qu = 0, pu = 0;
    const long long q = std::stoll(quota, &qu), p = std::stoll(period, &pu);
    if (qu != quota.size() || pu != period.size() || q <= 0 || p <= 0) return std::nullopt;
    return static_cast<int>(std::max<long long>(1, (q + p - 1) / p));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// The trimmed first line of a file, or nullopt.
std::optional<std::string> FirstLine(const fs::path& p) {
  std::optional<std::string> text = Slurp(p);
  if (!text) return std::nullopt;
  std::string line = text->substr(0, text->find('\n'));
  while (!line.empty() && line.back() == ' ') line.pop_back();
  return line;
}

// The CPU quota of `dir` (relative to the cgroup hierarchy at `root`) or of its parents.
std::optional<int> SmallestCpuQuota(const fs::path& root, fs::path dir, bool v2) {
  std::optional<int> best;
  for (;;) {
    const fs::path d = root / dir.relative_path();
    std::optional<int> cpus;
    if (v2) {
      if (std::optional<std::string> max = FirstLine(d / "cpu.max")) {
        const size_t space = max->find(' ');
        if (space != std::string::npos) {
          cpus = CpusOfQuota(max->substr(0, space), max->substr(space + 1));
        }
      }
    } else {
      std::optional<std::string> quota = FirstLine(d / "cpu.cfs_quota_us");
      std::optional<std::string> period = FirstLine(d / "cpu.cfs_period_us");
      if (quota && period) cpus = CpusOfQuota(*quota, *period);
    }
    if (cpus && (!best || *cpus < *best)) best = cpus;
    if (dir == dir.root_path() || dir.empty()) break;
    dir = dir.parent_path();
  }
  return best;
}

}  // namespace

std::optional<int> CgroupCpuLimit(const std::string& proc_root, const std::string& cgroup_root) {
  std::optional<int> best;
  for (const CgroupLine& g : ProcessCgroups(proc_root)) {
    std::optional<int> cpus;
    if (g.v2()) {
      cpus = SmallestCpuQuota(cgroup_root, g.path, /*v2=*/true);
    } else if (g.Has("cpu")) {
      cpus = SmallestCpuQuota(fs::path(cgroup_root) / "cpu", g.path, /*v2=*/false);
    }
    if (cpus && (!best || *cpus < *best)) best = cpus;
  }
  return best;
}

Result<std::optional<uint64_t>> ParseCgroupLimit(const std::string& text) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  if (t == "max") return std::optional<uint64_t>();
  uint64_t v = 0;
  try {
    size_t used = 0;
    v = std::stoull(t, &used);
    if (used != t.size()) throw std::invalid_argument(t);
  } catch (const std::exception&) {
    return InvalidArgument("not a memory limit: '{}'", t);
  }
  // cgroup v1 reports "no limit" as PAGE_COUNTER_MAX pages, about 2^63.
  if (v >= (uint64_t{1} << 62)) return std::optional<uint64_t>();
  return std::optional<uint64_t>(v);
}

std::optional<std::string> TransparentHugePageMode(const std::string& sys_root) {
  std::optional<std::string> text =
      Slurp(fs::path(sys_root) / "kernel/mm/transparent_hugepage/enabled");
  if (!text) return std::nullopt;
  const size_t open = text->find('['), close = text->find(']');
  if (open == std::string::npos || close == std::string::npos || close <= open + 1) {
    return std::nullopt;
  }
  return text->substr(open + 1, close - open - 1);
}

Result<MemoryInfo> ReadMemoryInfo(const std::string& proc_root, const std::string& cgroup_root) {
  MemoryInfo info;
  const fs::path meminfo = fs::path(proc_root) / "meminfo";
  std::optional<std::string> text = Slurp(meminfo);
  if (!text) return IoError("{}: cannot read", meminfo.string());
  std::istringstream lines(*text);
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (lines >> key >> kb) {
    std::getline(lines, unit);
    if (key == "MemTotal:") info.mem_total = kb * 1024;
    if (key == "MemAvailable:") info.mem_available = kb * 1024;
  }
  if (info.mem_total == 0) return Corrupt("{}: no MemTotal line", meminfo.string());
  if (info.mem_available == 0) info.mem_available = info.mem_total;

  // No cgroups: MemAvailable alone.
  for (const CgroupLine& g : ProcessCgroups(proc_root)) {
    Result<std::optional<uint64_t>> limit = std::optional<uint64_t>();
    std::string source;
    if (g.v2()) {
      limit = SmallestLimit(cgroup_root, g.path, "memory.max", &source);
    } else if (g.Has("memory")) {
      limit =
          SmallestLimit(fs::path(cgroup_root) / "memory", g.path, "memory.limit_in_bytes", &source);
    } else {
      continue;
    }
    if (!limit.ok()) return limit.status();
    if (limit.value() && (!info.cgroup_limit || *limit.value() < *info.cgroup_limit)) {
      info.cgroup_limit = limit.value();
      info.cgroup_limit_file = source;
    }
  }
  return info;
}

}  // namespace mt

namespace mt {

uint64_t ProcessStorageReadBytes() {
  std::ifstream in("/proc/self/io");
  std::string key;
  uint64_t value = 0;
  while (in >> key >> value) {
    if (key == "read_bytes:") return value;
  }
  return 0;
}

}  // namespace mt
