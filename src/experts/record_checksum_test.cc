// RecordChecksum is XXH3-64 with seed 0, and RecordHasher computes the same piecewise.
#include "experts/record_checksum.h"

#include <gtest/gtest.h>

#include <vector>

namespace mt {
namespace {

TEST(RecordChecksumTest, IsXxh3Of64Bits) {
  // XXH3_64bits of no bytes, from the xxHash specification's test vectors.
  EXPECT_EQ(RecordChecksum(nullptr, 0), 0x2D06800538D394C2ull);
  const uint8_t a[1] = {0};
  EXPECT_NE(RecordChecksum(a, 1), RecordChecksum(nullptr, 0));
}

TEST(RecordChecksumTest, PiecewiseEqualsWhole) {
  std::vector<uint8_t> record(3 * 4096 + 123, 0);
  for (size_t i = 0; i < 1000; ++i) record[i] = static_cast<uint8_t>(i * 7 + 1);
  for (size_t i = 8192; i < record.size(); ++i) record[i] = static_cast<uint8_t>(i * 13);
  RecordHasher h;
  h.Update({record.data(), 1000});
  h.UpdateZeros(8192 - 1000);  // the padding, never materialised
  h.Update({record.data() + 8192, record.size() - 8192});
  const uint64_t whole = RecordChecksum(record.data(), record.size());
  EXPECT_EQ(h.Digest(), whole);
  h.Reset();
  EXPECT_EQ(h.Digest(), RecordChecksum(nullptr, 0));
  record[5000] = 1;  // a bit flipped in the padding changes the checksum
  EXPECT_NE(RecordChecksum(record.data(), record.size()), whole);
}

}  // namespace
}  // namespace mt
