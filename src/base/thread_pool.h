// A persistent pool of worker threads for data-parallel loops. Threads are created once;
// each ParallelFor hands every thread one contiguous range of [0, n) and returns when all
// are done. The caller's thread takes the first range.
//
// A forward pass issues hundreds of ParallelFor calls per token, so waking workers must be
// cheap: workers spin on an atomic for a short while (kSpinNanos) before sleeping on a
// condition variable, and the caller spins for the last workers to finish. A forward pass
// holds a KeepAwake so they keep spinning between its regions, and a LetSleep while it waits
// on the disk.
//
// Splitting is by range only (fixed ranges, or chunks taken in turn: ParallelForDynamic), so
// a loop whose items are independent (e.g. output rows) gives bit-identical results for any
// thread count. ParallelFor is not reentrant and the pool is not thread-safe: one owner
// drives it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace mt {

// What ParallelFor runs: a non-owning reference to a callable fn(begin, end, thread). Unlike
// std::function it never allocates (a lambda capturing by reference is too big for
// std::function's inline buffer), so a parallel region costs no heap. It must not outlive
// the callable: ParallelFor uses it only until it returns.
class RangeFn {
 public:
  template <class F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, RangeFn>)
      RangeFn(F&& f)  // NOLINT: implicit, so that callers pass lambdas as they are
      : obj_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* o, int64_t b, int64_t e, int t) {
          (*static_cast<std::remove_reference_t<F>*>(o))(b, e, t);
        }) {}
  void operator()(int64_t begin, int64_t end, int thread) const { call_(obj_, begin, end, thread); }

 private:
  void* obj_;
  void (*call_)(void*, int64_t, int64_t, int);
};

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
  void ParallelFor(int64_t n, RangeFn fn, int64_t grain = 1);
  // Calls fn(begin, end, thread_index) for the chunks [i * chunk, (i + 1) * chunk) of [0, n)
  // (the last one shorter), each thread taking the next chunk when done with its last: for
  // loops whose threads may run at different speeds (a vCPU the host took away, DRAM misses),
  // where a fixed split leaves the fast thread waiting. Which thread runs a chunk varies from
  // call to call; the chunks themselves do not.
  void ParallelForDynamic(int64_t n, RangeFn fn, int64_t chunk);

  // The CPUs this process may use: its affinity mask (taskset, cpusets), capped by a cgroup
  // CPU quota (docker --cpus); the default size.
  static int DefaultThreads();

  // Adds kDelta to the pool's awake count while it lives; workers sleep after kSpinNanos
  // idle only while the count is 0. Held by the pool's owner thread; must not outlive it.
  template <int kDelta>
  class AwakeScope {
   public:
    explicit AwakeScope(ThreadPool& pool) : pool_(pool) { pool_.awake_.fetch_add(kDelta); }
    ~AwakeScope() { pool_.awake_.fetch_sub(kDelta); }
    AwakeScope(const AwakeScope&) = delete;
    AwakeScope& operator=(const AwakeScope&) = delete;

   private:
    ThreadPool& pool_;
  };
  // While one lives, idle workers spin instead of going to sleep. A forward pass holds one:
  // its serial parts (router, top-k, the stream tier's bookkeeping) can outlast the spin
  // window, and waking a sleeping worker costs far more than a region (~0.5-1 ms on a
  // virtual machine whose host has descheduled the idle vCPU).
  using KeepAwake = AwakeScope<+1>;
  // Inside a KeepAwake: lets the workers sleep again while it lives. For waits that are long
  // and not the pool's business (expert reads from disk): a vCPU spinning through them
  // slowed this VM's disk by 10-20 %, as the host's I/O work shares its cores.
  using LetSleep = AwakeScope<-1>;

  // Workers asleep on the condition variable now (for tests).
  int sleeping_workers() const { return sleeping_.load(); }

 private:
  static constexpr int64_t kSpinNanos = 200000;  // 0.2 ms of spinning before sleeping

  void WorkerLoop(int index);
  // Pins the calling thread to cpus_[index % size] (pin_ only; failures are ignored: pinning
  // is a hint for speed, never needed for correctness).
  void PinCurrentThread(int index) const;

  int n_threads_;
  bool pin_ = false;
  std::vector<int> cpus_;          // pin_: the CPUs this process may use, in order
  std::thread::id pinned_caller_;  // pin_: the caller thread pinned as thread 0
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_cv_;
  // The current job; published by bumping generation_ (release), read after acquiring it.
  const RangeFn* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_grain_ = 1;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> sleeping_{0};
  std::atomic<int> awake_{0};  // live KeepAwake scopes minus live LetSleep scopes
  std::atomic<bool> stop_{false};
};

}  // namespace mt
