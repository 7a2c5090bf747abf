// A persistent pool of worker threads for data-parallel loops. Threads are created once;
// each ParallelFor hands every thread one contiguous range of [0, n) and returns when all
// are done. The caller's thread takes the first range.
//
// A forward pass issues hundreds of ParallelFor calls per token, so waking workers must be
// cheap: workers spin on an atomic for a short while (kSpinNanos) before sleeping on a
// condition variable, and the caller spins for the last workers to finish.
//
// Splitting is by range only, so a loop whose items are independent (e.g. output rows)
// gives bit-identical results for any thread count. ParallelFor is not reentrant and the
// pool is not thread-safe: one owner drives it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mt {

class ThreadPool {
 public:
  // n_threads <= 0: one per hardware thread. pin: thread i runs only on the i-th CPU this
  // process may use (sched_getaffinity when the first pool is made, so taskset and cgroup
  // cpusets are respected; i wraps around when there are more threads than CPUs). The
  // caller's thread is thread 0: it is pinned when it first calls ParallelFor (again if
  // another thread takes over), and stays pinned after the pool is gone.
  explicit ThreadPool(int n_threads, bool pin = false);
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
  static constexpr int64_t kSpinNanos = 200000;  // 0.2 ms of spinning before sleeping

  void WorkerLoop(int index);
  // Pins the calling thread to cpus_[index % size] (pin_ only; failures are ignored: pinning
  // is a hint for speed, never needed for correctness).
  void PinCurrentThread(int index) const;

  int n_threads_;
  bool pin_ = false;
  std::vector<int> cpus_;                 // pin_: the CPUs this process may use, in order
  std::thread::id pinned_caller_;         // pin_: the caller thread pinned as thread 0
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_cv_;
  // The current job; published by bumping generation_ (release), read after acquiring it.
  const std::function<void(int64_t, int64_t, int)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_grain_ = 1;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> sleeping_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace mt
