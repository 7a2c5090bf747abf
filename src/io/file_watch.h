// Notices when files in use change under a running process: truncated, rewritten in place
// (size or modification time), or replaced by another file at the same path. Cheap enough
// to call once per decoded token (two stat calls per file).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "base/status.h"

namespace mt {

class FileWatch {
 public:
  // Records the identity, size and modification time of each path. Errors name the path.
  static Result<FileWatch> Open(const std::vector<std::string>& paths);

  FileWatch() = default;
  FileWatch(FileWatch&& o) noexcept;
  FileWatch& operator=(FileWatch&& o) noexcept;
  FileWatch(const FileWatch&) = delete;
  FileWatch& operator=(const FileWatch&) = delete;
  ~FileWatch();

  // Ok while every file is as it was; otherwise an I/O error naming the file and the change.
  Status Check() const;

 private:
  struct Entry {
    std::string path;
    int fd = -1;  // keeps the original inode open, to stat it even after a replace
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = 0;
    int64_t mtime_ns = 0;
  };
  std::vector<Entry> files_;
};

}  // namespace mt
