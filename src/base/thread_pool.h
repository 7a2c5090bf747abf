// A persistent pool of worker threads for data-parallel loops. Threads are created once;
// each ParallelFor wakes them, splits [0, n) into one contiguous range per thread, and
// returns when all are done. The caller's thread takes the first range.
//
// Splitting is by range only, so a loop whose items are independent (e.g. output rows)
// gives bit-identical results for any thread count. ParallelFor is not reentrant and the
// pool is not thread-safe: one owner drives it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mt {

class ThreadPool {
 public:
  // n_threads <= 0: one per hardware thread.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(begin, end, thread_index) for contiguous ranges covering [0, n). Ranges are
  // aligned to `grain` items (except the last) so kernels can work in blocks.
  void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn,
                   int64_t grain = 1);

  static int DefaultThreads();

 private:
  void WorkerLoop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  const std::function<void(int64_t, int64_t, int)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_grain_ = 1;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace mt
