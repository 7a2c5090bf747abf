// The checksum of an expert record in an expert-major pack (model/expert_layout_gguf.h):
// XXH3-64 with seed 0 (libxxhash's XXH3_64bits) of the record's bytes. The pack writer
// stores one per record; `moetier pack --verify` and the stream tier recompute it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

namespace mt {

// XXH3-64 (seed 0) of `length` bytes at `data`, with AVX2 where the CPU has it. Thread-safe.
uint64_t RecordChecksum(const uint8_t* data, uint64_t length);
// The same through libxxhash's baseline build (tests compare the two).
uint64_t RecordChecksumBaseline(const uint8_t* data, uint64_t length);

// The same checksum computed piecewise, so a writer can hash a record part by part (and
// the zero padding between parts) without assembling it: Update calls in order give
// Digest() == RecordChecksum(concatenation). Not thread-safe; one per record at a time.
class RecordHasher {
 public:
  RecordHasher();
  ~RecordHasher();
  RecordHasher(const RecordHasher&) = delete;
  RecordHasher& operator=(const RecordHasher&) = delete;

  void Reset();
  void Update(std::span<const uint8_t> bytes);
  void UpdateZeros(uint64_t n);  // appends n zero bytes
  uint64_t Digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace mt
