// Pieces shared by the IoEngine implementations (not part of the public interface): opening
// files for reading with or without O_DIRECT, and checking ops before they are issued.
#pragma once

#include <cstdint>
#include <deque>
#include <string>

#include "base/status.h"
#include "io/io_engine.h"

namespace mt::io_internal {

struct OpenFile {
  int fd = -1;
  bool direct = false;  // opened with O_DIRECT
  std::string path;
};

// Opens `path` read-only as IoEngine::AddFile describes. O_DIRECT support is probed by
// opening with O_DIRECT and reading one aligned block at offset 0 (tmpfs refuses the open
// with EINVAL; some filesystems accept the open and refuse the read).
Result<OpenFile> OpenForRead(const std::string& path, DirectMode mode);

// The files of one engine. Closes them when destroyed. Not thread-safe: the owning engine
// guards it with its own mutex. Pointers from Get stay valid while the table lives.
class FileTable {
 public:
  FileTable() = default;
  FileTable(const FileTable&) = delete;
  FileTable& operator=(const FileTable&) = delete;
  ~FileTable();

  Result<int> Add(const std::string& path, DirectMode mode);
  const OpenFile* Get(int file) const;  // nullptr for an unknown index

 private:
  std::deque<OpenFile> files_;  // deque: Add never moves earlier entries
};

// 0 when `op` may be issued on `file` (nullptr: unknown index), else the negative errno its
// completion carries: -EBADF, or -EINVAL for a length over kMaxReadLength or an op that
// breaks kDirectIoAlignment on a direct file.
int CheckOp(const OpenFile* file, const ReadOp& op);

}  // namespace mt::io_internal
