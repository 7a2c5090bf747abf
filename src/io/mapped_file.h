// A read-only memory mapping of a whole file. The mapping lives as long as the object;
// moving transfers it. Thread-safe for concurrent reads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace mt {

class MappedFile {
 public:
  // Maps `path` read-only (MAP_SHARED, so pages come from the page cache and are never
  // copied into anonymous memory). An empty file maps to data() == nullptr, size() == 0.
  static Result<MappedFile> Open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // True when [data, data + bytes) lies inside this mapping.
  bool Holds(const uint8_t* data, uint64_t bytes) const {
    return data >= data_ && data <= data_ + size_ && bytes <= size_ - (data - data_);
  }
  // Hands the whole pages inside [data, data + bytes), which must lie inside this mapping, back
  // to the kernel: unmapped from this process (its RSS drops; the page cache keeps them clean
  // and reclaimable). A later read faults them in again. For bytes another tier (a device) now
  // holds. Best effort: errors are ignored.
  void Release(const uint8_t* data, uint64_t bytes) const;

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace mt
