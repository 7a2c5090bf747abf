#include "base/aligned_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "base/check.h"

namespace mt {

namespace {
constexpr size_t kHugePage = size_t{2} << 20;
}

Result<AlignedBuffer> AlignedBuffer::Allocate(size_t bytes) {
  AlignedBuffer b;
  if (bytes == 0) return b;
  // Large buffers (weights, caches) are 2 MiB aligned and ask for transparent huge pages:
  // streaming through gigabytes of 4 KiB pages costs a TLB miss every 4 KiB.
  const bool huge = bytes >= kHugePage;
  const size_t map_bytes = huge ? bytes + kHugePage : bytes;
  void* p = ::mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return Status(StatusCode::kResourceExhausted,
                  fmt::format("cannot allocate {} bytes: {}", bytes, std::strerror(errno)));
  }
  uint8_t* base = static_cast<uint8_t*>(p);
  if (huge) {
    // Trim to a 2 MiB aligned range of `bytes`, unmapping the slack on both sides.
    uint8_t* aligned = reinterpret_cast<uint8_t*>(
        (reinterpret_cast<uintptr_t>(base) + kHugePage - 1) & ~(uintptr_t{kHugePage} - 1));
    if (aligned > base) ::munmap(base, aligned - base);
    uint8_t* end = aligned + bytes;
    uint8_t* map_end = base + map_bytes;
    if (map_end > end) ::munmap(end, map_end - end);
    base = aligned;
    ::madvise(base, bytes, MADV_HUGEPAGE);
  }
  b.data_ = base;
  b.size_ = bytes;
  return b;
}

Status AlignedBuffer::Populate(size_t offset, size_t bytes) {
  MT_CHECK(offset % 4096 == 0 && offset <= size_ && bytes <= size_ - offset);
  if (bytes == 0) return Status::Ok();
  uint8_t* begin = data_ + offset;
#ifdef MADV_POPULATE_WRITE
  if (::madvise(begin, bytes, MADV_POPULATE_WRITE) == 0) return Status::Ok();
  if (errno != EINVAL) {  // EINVAL: a kernel older than 5.14; touch the pages instead
    return Status(StatusCode::kResourceExhausted,
                  fmt::format("cannot populate {} bytes: {}", bytes, std::strerror(errno)));
  }
#endif
  volatile uint8_t* p = begin;
  for (size_t i = 0; i < bytes; i += 4096) p[i] = p[i];
  return Status::Ok();
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
