#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace mt {
namespace {

TEST(ThreadPoolTest, CoversEveryItemOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 7, 64, 1000}) {
      std::vector<std::atomic<int>> hits(n);
      pool.ParallelFor(n, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i) hits[i]++;
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << threads << " " << n;
    }
  }
}

TEST(ThreadPoolTest, RangesRespectGrain) {
  ThreadPool pool(3);
  std::vector<std::pair<int64_t, int64_t>> ranges(3, {-1, -1});
  pool.ParallelFor(100, [&](int64_t b, int64_t e, int t) { ranges[t] = {b, e}; }, 16);
  for (auto [b, e] : ranges) {
    if (b < 0) continue;
    EXPECT_EQ(b % 16, 0);
    EXPECT_TRUE(e == 100 || e % 16 == 0);
  }
}

TEST(ThreadPoolTest, ReusableManyTimes) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  for (int rep = 0; rep < 2000; ++rep) {
    pool.ParallelFor(10, [&](int64_t b, int64_t e, int) { sum += e - b; });
  }
  EXPECT_EQ(sum.load(), 20000);
}

}  // namespace
}  // namespace mt
