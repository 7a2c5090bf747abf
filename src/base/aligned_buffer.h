// An owned, page-aligned (4 KiB) block of anonymous memory. Pages are populated lazily on
// first touch, so a large buffer costs nothing until used. Movable, not copyable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "base/status.h"

namespace mt {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // Errors (kResourceExhausted) name the size that could not be mapped.
  static Result<AlignedBuffer> Allocate(size_t bytes);

  AlignedBuffer(AlignedBuffer&& o) noexcept { *this = std::move(o); }
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer();

  // Makes every page resident and writable now, keeping the contents: the page faults are
  // paid here instead of at first use (a buffer that will be filled anyway, e.g. a
  // server's KV cache), and the memory is really there before work starts. Errors name the
  // size (ENOMEM: the memory is not available).
  Status Populate() { return Populate(0, size_); }
  // The same for bytes [offset, offset + bytes) (page-aligned offset, within the buffer).
  Status Populate(size_t offset, size_t bytes);

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace mt
