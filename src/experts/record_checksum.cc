#include "experts/record_checksum.h"

#include <xxhash.h>

#include <algorithm>

#include "base/check.h"
#include "base/cpu_features.h"

namespace mt {
namespace internal {
uint64_t RecordChecksumAvx2(const uint8_t* data, uint64_t length);  // record_checksum_avx2.cc
}  // namespace internal

uint64_t RecordChecksum(const uint8_t* data, uint64_t length) {
  static const bool avx2 = GetCpuFeatures().avx2;
  if (avx2) return internal::RecordChecksumAvx2(data, length);
  return XXH3_64bits(data, static_cast<size_t>(length));
}

uint64_t RecordChecksumBaseline(const uint8_t* data, uint64_t length) {
  return XXH3_64bits(data, static_cast<size_t>(length));
}

struct RecordHasher::State {
  XXH3_state_t* xxh = nullptr;
};

RecordHasher::RecordHasher() : state_(std::make_unique<State>()) {
  state_->xxh = XXH3_createState();
  MT_CHECK(state_->xxh != nullptr);
  Reset();
}

RecordHasher::~RecordHasher() { XXH3_freeState(state_->xxh); }

void RecordHasher::Reset() { MT_CHECK(XXH3_64bits_reset(state_->xxh) == XXH_OK); }

void RecordHasher::Update(std::span<const uint8_t> bytes) {
  MT_CHECK(XXH3_64bits_update(state_->xxh, bytes.data(), bytes.size()) == XXH_OK);
}

void RecordHasher::UpdateZeros(uint64_t n) {
  static constexpr uint8_t kZeros[4096] = {};
  while (n > 0) {
    const size_t k = static_cast<size_t>(std::min<uint64_t>(n, sizeof(kZeros)));
    Update({kZeros, k});
    n -= k;
  }
}

uint64_t RecordHasher::Digest() const { return XXH3_64bits_digest(state_->xxh); }

}  // namespace mt
