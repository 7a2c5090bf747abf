// Sizing scratch memory once per context: the same list of buffers gives the memory plan's
// figure (count only, before anything exists) and the allocation, so the two cannot drift
// apart (a plan that undercounts lets the expert cache take memory the scratch then needs).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/projection.h"

namespace mt {

class ScratchSizer {
 public:
  enum Mode { kCount, kAllocate };
  explicit ScratchSizer(Mode mode) : allocate_(mode == kAllocate) {}

  // v gets n elements.
  template <class T>
  void Resize(std::vector<T>& v, size_t n) {
    if (allocate_) v.assign(n, T{});
    bytes_ += n * sizeof(T);
  }
  // v gets room for n elements (filled later without allocating).
  template <class T>
  void Reserve(std::vector<T>& v, size_t n) {
    if (allocate_) v.reserve(n);
    bytes_ += n * sizeof(T);
  }
  void Reserve(QuantizedInput& in, int64_t max_tok, int64_t max_cols) {
    if (allocate_) in.Reserve(max_tok, max_cols);
    bytes_ += QuantizedInput::ReserveBytes(max_tok, max_cols);
  }

  uint64_t bytes() const { return bytes_; }

 private:
  bool allocate_;
  uint64_t bytes_ = 0;
};

}  // namespace mt
