#include "base/read_bandwidth.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "base/aligned_buffer.h"

namespace mt {
namespace {

// The probe must read every word: if it skipped any (a stream ending early, a tail left
// out), flipping that word would not change its result, and the GB/s would be inflated.
TEST(ReadBandwidth, ReadAllBytesDependsOnEveryWord) {
  for (uint64_t bytes : {uint64_t{64}, uint64_t{256}, uint64_t{64 * 37 + 24}, uint64_t{8192}}) {
    AlignedBuffer buf = AlignedBuffer::Allocate(bytes).value();
    auto* w = reinterpret_cast<uint64_t*>(buf.data());
    for (uint64_t i = 0; i < bytes / 8; ++i) w[i] = i * 0x9E3779B97F4A7C15ull;
    const uint64_t base = ReadAllBytes(buf.data(), bytes);
    for (uint64_t i = 0; i < bytes / 8; ++i) {
      w[i] ^= 1;
      EXPECT_NE(ReadAllBytes(buf.data(), bytes), base) << bytes << " bytes, word " << i;
      w[i] ^= 1;
    }
  }
}

TEST(ReadBandwidth, MeasuresSomethingPositive) {
  ThreadPool pool(2);
  const double gbs = MeasureReadBandwidth(pool, 8 << 20, 2);
  EXPECT_GT(gbs, 0.0);
  EXPECT_EQ(MeasureReadBandwidth(pool, 0, 1), 0.0);
}

}  // namespace
}  // namespace mt
