// RecordChecksum is XXH3-64 with seed 0, and RecordHasher computes the same piecewise.
#include "experts/record_checksum.h"

#include <gtest/gtest.h>

#include <vector>

namespace mt {
namespace {

// xxHash's own sanity buffer (xxhsum's self-test): byte i is the top byte of
// 2654435761 * 0x9E3779B185EBCA8D^i (mod 2^64).
std::vector<uint8_t> SanityBuffer(size_t n) {
  std::vector<uint8_t> b(n);
  uint64_t gen = 2654435761u;
  for (size_t i = 0; i < n; ++i) {
    b[i] = static_cast<uint8_t>(gen >> 56);
    gen *= 0x9E3779B185EBCA8Dull;
  }
  return b;
}

// XXH3_64bits (seed 0) of prefixes of the sanity buffer, from the xxHash test vectors: one
// length per size class of the algorithm, up to the long path that records take.
struct Vector {
  size_t length;
  uint64_t xxh3;
};
constexpr Vector kVectors[] = {
    {0, 0x2D06800538D394C2ull},    {1, 0xC44BDFF4074EECDBull},    {6, 0x27B56A84CD2D7325ull},
    {12, 0xA713DAF0DFBB77E7ull},   {24, 0xA3FE70BF9D3510EBull},   {48, 0x397DA259ECBA1F11ull},
    {80, 0xBCDEFBBB2C47C90Aull},   {195, 0xCD94217EE362EC3Aull},  {403, 0xCDEB804D65C6DEA4ull},
    {512, 0x617E49599013CB6Bull},  {2048, 0xDD59E2C3A5F038E0ull}, {2240, 0x6E73A90539CF2948ull},
    {2367, 0xCB37AEB9E5D361EDull},
};

TEST(RecordChecksumTest, IsXxh3Of64BitsWithSeedZero) {
  EXPECT_EQ(RecordChecksum(nullptr, 0), 0x2D06800538D394C2ull);  // the empty input
  const std::vector<uint8_t> buf = SanityBuffer(2367);
  for (const Vector& v : kVectors) {
    EXPECT_EQ(RecordChecksum(buf.data(), v.length), v.xxh3) << v.length;
  }
}

TEST(RecordChecksumTest, TheAvx2BuildGivesTheLibrarysValues) {
  EXPECT_EQ(RecordChecksumBaseline(nullptr, 0), 0x2D06800538D394C2ull);
  const std::vector<uint8_t> buf = SanityBuffer(2367);
  for (const Vector& v : kVectors) {
    EXPECT_EQ(RecordChecksumBaseline(buf.data(), v.length), v.xxh3) << v.length;
  }
  // Long inputs take the vector loops (stripes of 64 bytes, blocks of 1 KiB) in both builds.
  std::vector<uint8_t> big(3 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  for (uint64_t n : {uint64_t{4096}, uint64_t{1} << 20, uint64_t{(3 << 20) - 17}}) {
    EXPECT_EQ(RecordChecksum(big.data(), n), RecordChecksumBaseline(big.data(), n)) << n;
  }
}

TEST(RecordChecksumTest, PiecewiseMatchesTheKnownValues) {
  const std::vector<uint8_t> buf = SanityBuffer(2367);
  RecordHasher h;
  for (const Vector& v : kVectors) {
    // Split in three uneven pieces (one may be empty).
    const size_t a = v.length / 3, b = v.length - v.length / 7;
    h.Reset();
    h.Update({buf.data(), a});
    h.Update({buf.data() + a, b - a});
    h.Update({buf.data() + b, v.length - b});
    EXPECT_EQ(h.Digest(), v.xxh3) << v.length;
  }
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
