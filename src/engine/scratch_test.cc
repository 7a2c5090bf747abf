// The memory plan counts exactly what the allocation takes: the same sizing list, run once
// counting (nothing allocated) and once allocating, gives the same bytes.
#include "engine/scratch.h"

#include <gtest/gtest.h>

namespace mt {
namespace {

struct Buffers {
  std::vector<float> a;
  std::vector<int32_t> b;
  QuantizedInput in;
  void Size(ScratchSizer& s) {
    s.Resize(a, 1000);
    s.Reserve(b, 77);
    s.Reserve(in, 8, 300);
  }
};

TEST(ScratchSizerTest, CountingAndAllocatingAgree) {
  Buffers counted, allocated;
  ScratchSizer count(ScratchSizer::kCount), allocate(ScratchSizer::kAllocate);
  counted.Size(count);
  allocated.Size(allocate);
  EXPECT_TRUE(counted.a.empty());
  EXPECT_EQ(counted.b.capacity(), 0u);
  EXPECT_EQ(allocated.a.size(), 1000u);
  EXPECT_GE(allocated.b.capacity(), 77u);
  EXPECT_TRUE(allocated.b.empty());
  // 4000 + 308 bytes of vectors and three activation buffers of 8 tokens x 512 columns (300
  // rounded up to whole 256-column blocks) of f32, the widest format.
  EXPECT_EQ(count.bytes(), 4000u + 308u + 3u * 8u * 512u * 4u);
  EXPECT_EQ(allocate.bytes(), count.bytes());
}

}  // namespace
}  // namespace mt
