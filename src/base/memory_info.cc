#include "base/memory_info.h"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace mt {
namespace {

namespace fs = std::filesystem;

std::optional<std::string> Slurp(const fs::path& p) {
  std::ifstream in(p);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The smallest limit found in `file` of `dir` and each of its parents up to `root`.
Result<std::optional<uint64_t>> SmallestLimit(const fs::path& root, fs::path dir,
                                              const char* file, std::string* source) {
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

}  // namespace

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

  // /proc/self/cgroup: "0::/path" (v2) or "N:memory:/path" (v1, possibly "memory,x").
  std::optional<std::string> groups = Slurp(fs::path(proc_root) / "self/cgroup");
  if (!groups) return info;  // no cgroups: MemAvailable alone
  std::istringstream gl(*groups);
  std::string line;
  while (std::getline(gl, line)) {
    size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string controllers = line.substr(a + 1, b - a - 1);
    fs::path path = line.substr(b + 1);
    Result<std::optional<uint64_t>> limit = std::optional<uint64_t>();
    std::string source;
    if (controllers.empty()) {
      limit = SmallestLimit(cgroup_root, path, "memory.max", &source);
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      limit = SmallestLimit(fs::path(cgroup_root) / "memory", path, "memory.limit_in_bytes",
                            &source);
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
