#include "io/io_engine.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "base/log.h"
#include "io/io_engine_internal.h"

namespace mt {
namespace io_internal {
namespace {

constexpr int kNotRegular = -100000;  // OpenRegular's code for "not a regular file"

// Opens with `flags` added to O_RDONLY and checks that it is a regular file. Returns the fd,
// or -errno (or kNotRegular) with nothing left open.
int OpenRegular(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | flags);
  if (fd < 0) return -errno;
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return -err;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return kNotRegular;
  }
  return fd;
}

Status OpenError(const std::string& path, int neg_errno) {
  if (neg_errno == kNotRegular) return IoError("{}: not a regular file", path);
  if (neg_errno == -ENOENT) return NotFound("{}: no such file", path);
  return IoError("{}: cannot open: {}", path, std::strerror(-neg_errno));
}

// One aligned block read at offset 0 through a direct fd: 0 if the filesystem takes
// O_DIRECT reads, else -errno.
int ProbeDirectRead(int fd) {
  void* buf = std::aligned_alloc(kDirectIoAlignment, kDirectIoAlignment);
  if (buf == nullptr) return -ENOMEM;
  ssize_t n;
  do {
    n = ::pread(fd, buf, kDirectIoAlignment, 0);
  } while (n < 0 && errno == EINTR);
  int err = n < 0 ? -errno : 0;
  std::free(buf);
  return err;
}

}  // namespace

Result<OpenFile> OpenForRead(const std::string& path, DirectMode mode) {
  if (mode != DirectMode::kOff) {
    int fd = OpenRegular(path, O_DIRECT);
    int err = fd < 0 ? fd : ProbeDirectRead(fd);
    if (fd >= 0 && err == 0) return OpenFile{fd, true, path};
    if (fd >= 0) ::close(fd);
    if (err != -EINVAL) {
      if (fd < 0) return OpenError(path, err);
      return IoError("{}: O_DIRECT probe read at offset 0 failed: {}", path, std::strerror(-err));
    }
    // EINVAL: the filesystem does not do O_DIRECT (tmpfs refuses at open).
    if (mode == DirectMode::kOn) {
      return IoError(
          "{}: O_DIRECT is not supported by its filesystem (direct mode 'on'; use "
          "'auto' or 'off' for buffered reads)",
          path);
    }
    Log(LogLevel::kDebug, "{}: O_DIRECT not supported, using buffered reads", path);
  }
  int fd = OpenRegular(path, 0);
  if (fd < 0) return OpenError(path, fd);
  return OpenFile{fd, false, path};
}

FileTable::~FileTable() {
  for (const OpenFile& f : files_) ::close(f.fd);
}

Result<int> FileTable::Add(const std::string& path, DirectMode mode) {
  OpenFile file = MT_TRY(OpenForRead(path, mode));
  files_.push_back(std::move(file));
  return static_cast<int>(files_.size() - 1);
}

const OpenFile* FileTable::Get(int file) const {
  if (file < 0 || static_cast<size_t>(file) >= files_.size()) return nullptr;
  return &files_[static_cast<size_t>(file)];
}

int CheckOp(const OpenFile* file, const ReadOp& op) {
  if (file == nullptr) return -EBADF;
  if (op.length > kMaxReadLength) return -EINVAL;
  if (file->direct) {
    uint64_t bits = op.offset | op.length | reinterpret_cast<uintptr_t>(op.dst);
    if (bits % kDirectIoAlignment != 0) return -EINVAL;
  }
  return 0;
}

}  // namespace io_internal

Result<std::unique_ptr<IoEngine>> CreateIoEngine(IoBackend backend, int queue_depth) {
  switch (backend) {
    case IoBackend::kUring:
      return CreateUringEngine(queue_depth);
    case IoBackend::kPread:
      return CreatePreadEngine(queue_depth);
    case IoBackend::kAuto:
      break;
  }
  Result<std::unique_ptr<IoEngine>> uring = CreateUringEngine(queue_depth);
  if (uring.ok() || uring.status().code() == StatusCode::kInvalidArgument) return uring;
  Log(LogLevel::kWarn, "{}; using the pread thread pool instead", uring.status().message());
  return CreatePreadEngine(queue_depth);
}

}  // namespace mt
