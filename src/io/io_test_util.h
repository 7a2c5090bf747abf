// Helpers shared by the io tests: temporary files with known content, aligned buffers, a
// directory where O_DIRECT works, collecting completions, and counting mapped pages. Test-only
// (header-only, not part of mt_io).
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "io/io_engine.h"

namespace mt::io_test {

// Bytes of a seeded random stream: the file content the reads are checked against.
inline std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng() >> 56);
  return v;
}

// A file written with `content` in `dir`, removed when destroyed.
class TempFile {
 public:
  TempFile(const std::string& dir, const std::vector<uint8_t>& content) {
    static int counter = 0;
    path_ = dir + "/mt_io_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
    int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    EXPECT_GE(fd, 0) << path_;
    size_t done = 0;
    while (fd >= 0 && done < content.size()) {
      ssize_t n = ::write(fd, content.data() + done, content.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    EXPECT_EQ(done, content.size()) << path_;
    if (fd >= 0) {
      ::fsync(fd);
      ::close(fd);
    }
  }
  ~TempFile() { ::unlink(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<uint8_t[], FreeDeleter>;

// `n` bytes (rounded up to the alignment) aligned to kDirectIoAlignment, filled with `fill`.
inline AlignedBuffer MakeAligned(size_t n, uint8_t fill = 0xCD) {
  size_t rounded = (n + kDirectIoAlignment - 1) / kDirectIoAlignment * kDirectIoAlignment;
  if (rounded == 0) rounded = kDirectIoAlignment;
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(kDirectIoAlignment, rounded));
  std::fill(p, p + rounded, fill);
  return AlignedBuffer(p);
}

// True when the file at `path` can be opened with O_DIRECT and read with an aligned pread.
inline bool DirectWorksOn(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0) return false;
  AlignedBuffer buf = MakeAligned(kDirectIoAlignment);
  ssize_t n = ::pread(fd, buf.get(), kDirectIoAlignment, 0);
  ::close(fd);
  return n >= 0;
}

// True when a new file in `dir` can be read with O_DIRECT.
inline bool DirectWorksIn(const std::string& dir) {
  std::vector<uint8_t> block(kDirectIoAlignment, 1);
  TempFile f(dir, block);
  return DirectWorksOn(f.path());
}

// A writable directory on a filesystem with O_DIRECT (the temp dir, else the test binary's
// directory, which sits in the build tree), or nullopt.
inline std::optional<std::string> DirectDir() {
  std::vector<std::string> candidates = {std::filesystem::temp_directory_path().string()};
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back(exe.parent_path().string());
  for (const std::string& dir : candidates) {
    if (DirectWorksIn(dir)) return dir;
  }
  return std::nullopt;
}

// A tmpfs directory (refuses O_DIRECT), or nullopt.
inline std::optional<std::string> TmpfsDir() {
  struct statfs st;
  constexpr long kTmpfsMagic = 0x01021994;
  if (::statfs("/dev/shm", &st) == 0 && st.f_type == kTmpfsMagic && ::access("/dev/shm", W_OK) == 0)
    return std::string("/dev/shm");
  return std::nullopt;
}

// Waits for `n` completions (10 s at most) and returns them by tag; a tag seen twice or a
// completion missing fails the test.
inline std::map<uint64_t, int64_t> CollectAll(IoEngine& engine, size_t n) {
  std::map<uint64_t, int64_t> results;
  std::vector<ReadCompletion> out(16);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (results.size() < n && std::chrono::steady_clock::now() < deadline) {
    size_t got = engine.Wait(out, 1, 1000);
    for (size_t i = 0; i < got; ++i) {
      EXPECT_TRUE(results.emplace(out[i].tag, out[i].result).second) << "tag " << out[i].tag;
    }
  }
  EXPECT_EQ(results.size(), n);
  return results;
}

// How many whole pages inside [data, data + bytes) are mapped into this process now
// (/proc/self/pagemap's "present" bit, readable without privileges).
inline uint64_t PresentPages(const uint8_t* data, uint64_t bytes) {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t first = (reinterpret_cast<uint64_t>(data) + page - 1) / page;
  const uint64_t end = (reinterpret_cast<uint64_t>(data) + bytes) / page;
  const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0);
  uint64_t present = 0;
  for (uint64_t p = first; fd >= 0 && p < end; ++p) {
    uint64_t entry = 0;
    EXPECT_EQ(::pread(fd, &entry, sizeof entry, static_cast<off_t>(p * sizeof entry)), 8);
    present += entry >> 63;
  }
  if (fd >= 0) ::close(fd);
  return present;
}

}  // namespace mt::io_test
