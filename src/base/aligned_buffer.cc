#include "base/aligned_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

namespace mt {

Result<AlignedBuffer> AlignedBuffer::Allocate(size_t bytes) {
  AlignedBuffer b;
  if (bytes == 0) return b;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return Status(StatusCode::kResourceExhausted,
                  fmt::format("cannot allocate {} bytes: {}", bytes, std::strerror(errno)));
  }
  b.data_ = static_cast<uint8_t*>(p);
  b.size_ = bytes;
  return b;
}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  if (this != &o) {
    if (data_) ::munmap(data_, size_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

AlignedBuffer::~AlignedBuffer() {
  if (data_) ::munmap(data_, size_);
}

}  // namespace mt
