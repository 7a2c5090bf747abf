#include "base/thread_pool.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <new>
#include <thread>
#include <vector>

#include "base/sanitizer.h"

// Counts heap allocations while g_count_news is set (the ParallelFor test below). TSan's
// runtime defines operator new itself (a second definition does not link), so not there.
#if !defined(MT_TSAN)
namespace {
std::atomic<bool> g_count_news{false};
std::atomic<int> g_news{0};
}  // namespace

void* operator new(size_t n) {
  if (g_count_news.load(std::memory_order_relaxed)) ++g_news;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
#endif

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
  pool.ParallelFor(
      100,
      [&](int64_t b, int64_t e, int t) {
        ranges[t] = {b, e};
      },
      16);
  for (auto [b, e] : ranges) {
    if (b < 0) continue;
    EXPECT_EQ(b % 16, 0);
    EXPECT_TRUE(e == 100 || e % 16 == 0);
  }
}

TEST(ThreadPoolTest, DynamicChunksCoverEveryItemOnceOnChunkBoundaries) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 15, 16, 17, 100, 1000}) {
      std::vector<std::atomic<int>> hits(n);
      std::atomic<bool> misaligned{false};
      pool.ParallelForDynamic(
          n,
          [&](int64_t b, int64_t e, int t) {
            if (b % 16 != 0 || (e != n && e - b != 16) || t < 0 || t >= threads) misaligned = true;
            for (int64_t i = b; i < e; ++i) hits[i]++;
          },
          16);
      EXPECT_FALSE(misaligned.load()) << threads << " " << n;
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << threads << " " << n;
    }
  }
}

// A thread that stalls does not hold back the chunks: the other threads take them.
TEST(ThreadPoolTest, DynamicChunksGoToTheThreadsThatAreFree) {
  ThreadPool pool(2);
  std::atomic<int> by_caller{0}, by_worker{0};
  pool.ParallelForDynamic(
      64,
      [&](int64_t, int64_t, int t) {
        if (t == 1) {
          ++by_worker;
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
        } else {
          ++by_caller;
        }
      },
      1);
  EXPECT_EQ(by_caller + by_worker, 64);
  // A fixed split would give the worker 32. It sleeps through each chunk it takes while the
  // caller runs on: 1 or 2 here, with room for a caller the host delays.
  EXPECT_LE(by_worker.load(), 8);
}

// --pin: every thread, the caller included, runs on exactly one CPU, thread i on the i-th
// CPU the process may use (wrapping around).
TEST(ThreadPoolTest, PinnedThreadsRunOnTheirOwnCpu) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  }
  const int threads = 3;
  std::vector<int> pinned_to(threads, -2);
  std::thread caller([&] {  // a fresh thread: pinning must not stick to the test's thread
    // A second pool made by a caller that the first one pinned still spreads over all the
    // CPUs (affinity is per thread: the set must not be re-read from the pinned caller).
    ThreadPool first(threads, true);
    first.ParallelFor(threads, [](int64_t, int64_t, int) {});
    ThreadPool pool(threads, true);
    pool.ParallelFor(threads, [&](int64_t b, int64_t e, int t) {
      cpu_set_t mine;
      CPU_ZERO(&mine);
      pthread_getaffinity_np(pthread_self(), sizeof(mine), &mine);
      int only = -1;
      for (int c = 0; c < CPU_SETSIZE; ++c) {
        if (CPU_ISSET(c, &mine)) only = only == -1 ? c : -3;  // -3: more than one CPU
      }
      for (int64_t i = b; i < e; ++i) pinned_to[i] = t == i ? only : -4;
    });
  });
  caller.join();
  for (int t = 0; t < threads; ++t) {
    EXPECT_EQ(pinned_to[t], cpus[t % cpus.size()]) << "thread " << t;
  }
}

TEST(ThreadPoolTest, UnpinnedThreadsKeepTheProcessCpus) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  ThreadPool pool(2);
  std::atomic<int> same{0};
  pool.ParallelFor(2, [&](int64_t, int64_t, int) {
    cpu_set_t mine;
    CPU_ZERO(&mine);
    pthread_getaffinity_np(pthread_self(), sizeof(mine), &mine);
    same += CPU_EQUAL(&mine, &allowed) ? 1 : 0;
  });
  EXPECT_EQ(same.load(), 2);
}

// A parallel region allocates nothing, even for a lambda that captures a lot (std::function
// would put such a closure on the heap on every call).
TEST(ThreadPoolTest, ParallelForDoesNotAllocate) {
#if defined(MT_TSAN)
  GTEST_SKIP() << "TSan owns operator new: allocations cannot be counted";
#else
  ThreadPool pool(2);
  std::vector<int64_t> sums(2, 0);
  int64_t a = 1, b = 2, c = 3, d = 4, e = 5;
  pool.ParallelFor(8, [&](int64_t, int64_t, int) {});  // workers started and spinning
  g_news = 0;
  g_count_news = true;
  for (int rep = 0; rep < 100; ++rep) {
    pool.ParallelFor(64, [&](int64_t begin, int64_t end, int t) {
      sums[t] += (end - begin) * (a + b + c + d + e);
    });
  }
  g_count_news = false;
  EXPECT_EQ(g_news.load(), 0);
  EXPECT_EQ(sums[0] + sums[1], 100 * 64 * 15);
#endif
}

// Waits up to 5 s for the pool's one worker to fall asleep.
bool WorkerFallsAsleep(const ThreadPool& pool) {
  for (int i = 0; i < 5000 && pool.sleeping_workers() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return pool.sleeping_workers() == 1;
}

TEST(ThreadPoolTest, KeepAwakeAndLetSleepDecideWhetherIdleWorkersSleep) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  auto count = [&](int64_t b, int64_t e, int) { sum += e - b; };
  pool.ParallelFor(10, count);
  ASSERT_TRUE(WorkerFallsAsleep(pool));  // idle without a scope: sleeps after kSpinNanos
  {
    ThreadPool::KeepAwake awake(pool);
    pool.ParallelFor(10, count);  // wakes it; from now on it must keep spinning
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // 250x the spin window
    EXPECT_EQ(pool.sleeping_workers(), 0);
    {
      ThreadPool::LetSleep idle(pool);
      EXPECT_TRUE(WorkerFallsAsleep(pool));
    }
    pool.ParallelFor(10, count);  // awake again, and held so
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(pool.sleeping_workers(), 0);
  }
  EXPECT_TRUE(WorkerFallsAsleep(pool));  // the scope is gone: it sleeps again
  pool.ParallelFor(10, count);
  EXPECT_EQ(sum.load(), 40);  // 4 regions of 10
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
