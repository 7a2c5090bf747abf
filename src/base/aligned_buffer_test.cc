#include "base/aligned_buffer.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

namespace mt {
namespace {

// Pages of [p, p + bytes) that are resident now (mincore).
size_t ResidentPages(const uint8_t* p, size_t bytes) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in((bytes + page - 1) / page);
  EXPECT_EQ(::mincore(const_cast<uint8_t*>(p), bytes, in.data()), 0);
  size_t n = 0;
  for (unsigned char c : in) n += c & 1;
  return n;
}

TEST(AlignedBufferTest, LargeBuffersAreHugePageAligned) {
  Result<AlignedBuffer> b = AlignedBuffer::Allocate(size_t{5} << 20);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % (size_t{2} << 20), 0u);
  EXPECT_EQ(b->size(), size_t{5} << 20);
}

TEST(AlignedBufferTest, PopulateMakesEveryPageResidentAndKeepsTheBytes) {
  const size_t bytes = (size_t{6} << 20) + 4096 * 3;  // not a multiple of a huge page
  Result<AlignedBuffer> b = AlignedBuffer::Allocate(bytes);
  ASSERT_TRUE(b.ok());
  const size_t pages = bytes / static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  // Lazily populated: nothing was touched yet (a huge page may back the first write).
  EXPECT_LT(ResidentPages(b->data(), bytes), pages / 2);
  b->data()[12345] = 7;
  b->data()[bytes - 1] = 9;
  ASSERT_TRUE(b->Populate().ok());
  EXPECT_EQ(ResidentPages(b->data(), bytes), pages);
  EXPECT_EQ(b->data()[12345], 7);
  EXPECT_EQ(b->data()[bytes - 1], 9);
  EXPECT_EQ(b->data()[0], 0);
}

TEST(AlignedBufferTest, PopulateOfARangeTouchesOnlyThatRange) {
  const size_t bytes = size_t{8} << 20;  // four huge pages
  Result<AlignedBuffer> b = AlignedBuffer::Allocate(bytes);
  ASSERT_TRUE(b.ok());
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t off = size_t{4} << 20, len = size_t{2} << 20;
  b->data()[off + 100] = 5;
  ASSERT_TRUE(b->Populate(off, len).ok());
  EXPECT_EQ(ResidentPages(b->data() + off, len), len / page);
  EXPECT_EQ(ResidentPages(b->data(), off), 0u);  // the first two huge pages stay untouched
  EXPECT_EQ(b->data()[off + 100], 5);
}

TEST(AlignedBufferTest, PopulateOfAnEmptyBufferIsANoOp) {
  AlignedBuffer b;
  EXPECT_TRUE(b.Populate().ok());
}

}  // namespace
}  // namespace mt
