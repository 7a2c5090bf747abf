#include "io/file_watch.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace mt {
namespace {
int64_t MtimeNs(const struct stat& st) {
  return int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
}
}  // namespace

Result<FileWatch> FileWatch::Open(const std::vector<std::string>& paths) {
  FileWatch w;
  for (const std::string& p : paths) {
    Entry e;
    e.path = p;
    e.fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (e.fd < 0) return IoError("{}: cannot open: {}", p, std::strerror(errno));
    struct stat st;
    if (::fstat(e.fd, &st) != 0) {
      int err = errno;
      ::close(e.fd);
      return IoError("{}: cannot stat: {}", p, std::strerror(err));
    }
    e.dev = st.st_dev;
    e.ino = st.st_ino;
    e.size = st.st_size;
    e.mtime_ns = MtimeNs(st);
    w.files_.push_back(std::move(e));
  }
  return w;
}

FileWatch::FileWatch(FileWatch&& o) noexcept { *this = std::move(o); }

FileWatch& FileWatch::operator=(FileWatch&& o) noexcept {
  if (this != &o) {
    for (Entry& e : files_) ::close(e.fd);
    files_ = std::exchange(o.files_, {});
  }
  return *this;
}

FileWatch::~FileWatch() {
  for (Entry& e : files_) ::close(e.fd);
}

Status FileWatch::Check() const {
  for (const Entry& e : files_) {
    struct stat st;
    if (::fstat(e.fd, &st) != 0)
      return IoError("{}: cannot stat: {}", e.path, std::strerror(errno));
    if (st.st_size != e.size) {
      return IoError("{}: the model file changed size from {} to {} bytes while in use", e.path,
                     e.size, st.st_size);
    }
    if (MtimeNs(st) != e.mtime_ns) {
      return IoError("{}: the model file was modified while in use", e.path);
    }
    struct stat now;
    if (::stat(e.path.c_str(), &now) != 0) {
      return IoError("{}: the model file was removed while in use", e.path);
    }
    if (now.st_dev != e.dev || now.st_ino != e.ino) {
      return IoError("{}: the model file was replaced while in use", e.path);
    }
  }
  return Status::Ok();
}

}  // namespace mt
