#include "base/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "base/memory_info.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MT_CPU_RELAX() _mm_pause()
#else
#define MT_CPU_RELAX() std::this_thread::yield()
#endif

namespace mt {
namespace {

// The range of part `i` of `parts` over [0, n), in multiples of `grain`.
std::pair<int64_t, int64_t> PartRange(int64_t n, int64_t grain, int i, int parts) {
  int64_t blocks = (n + grain - 1) / grain;
  int64_t b0 = blocks * i / parts, b1 = blocks * (i + 1) / parts;
  return {std::min(n, b0 * grain), std::min(n, b1 * grain)};
}

// The CPUs this process may use. Affinity is per thread in Linux, and a pinned pool leaves
// its caller on one CPU, so the set is read once, by the first pool, before any pinning.
const std::vector<int>& AllowedCpus() {
  static const std::vector<int> cpus = [] {
    std::vector<int> out;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
      for (int c = 0; c < CPU_SETSIZE; ++c) {
        if (CPU_ISSET(c, &set)) out.push_back(c);
      }
    }
    return out;
  }();
  return cpus;
}

int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int ThreadPool::DefaultThreads() {
  // Read once: the affinity before any pool pins, the quota as the process started.
  static const int cpus = [] {
    const size_t allowed = AllowedCpus().size();
    int n = allowed > 0 ? static_cast<int>(allowed)
                        : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    if (std::optional<int> quota = CgroupCpuLimit()) n = std::min(n, *quota);
    return n;
  }();
  return cpus;
}

ThreadPool::ThreadPool(int n_threads, bool pin)
    : n_threads_(n_threads > 0 ? n_threads : DefaultThreads()), pin_(pin) {
  AllowedCpus();  // read while no pool has pinned anything yet
  if (pin_) {
    cpus_ = AllowedCpus();
    pin_ = !cpus_.empty();
  }
  for (int i = 1; i < n_threads_; ++i) {
    workers_.emplace_back([this, i] {
      PinCurrentThread(i);
      WorkerLoop(i);
    });
  }
}

void ThreadPool::PinCurrentThread(int index) const {
  if (!pin_) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpus_[static_cast<size_t>(index) % cpus_.size()], &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  wake_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin briefly: the next job usually follows within microseconds.
    const int64_t deadline = NowNanos() + kSpinNanos;
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spins = 0; gen == seen; ++spins) {
      MT_CPU_RELAX();
      gen = generation_.load(std::memory_order_acquire);
      if (gen == seen && (spins & 255) == 0 && awake_.load(std::memory_order_relaxed) == 0 &&
          NowNanos() > deadline) {
        std::unique_lock<std::mutex> lock(mu_);
        sleeping_.fetch_add(1);
        wake_cv_.wait(lock, [&] { return generation_.load() != seen; });
        sleeping_.fetch_sub(1);
        gen = generation_.load(std::memory_order_acquire);
      }
    }
    seen = gen;
    if (stop_.load()) return;
    auto [begin, end] = PartRange(job_n_, job_grain_, index, n_threads_);
    if (begin < end) (*job_)(begin, end, index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::ParallelFor(int64_t n, RangeFn fn, int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (pin_ && std::this_thread::get_id() != pinned_caller_) {
    PinCurrentThread(0);
    pinned_caller_ = std::this_thread::get_id();
  }
  if (n_threads_ == 1 || n <= grain) {
    fn(0, n, 0);
    return;
  }
  job_ = &fn;
  job_n_ = n;
  job_grain_ = grain;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  if (sleeping_.load() > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1);
    wake_cv_.notify_all();
  } else {
    generation_.fetch_add(1);
    // A worker may have gone to sleep just before the bump: notify under the lock too.
    if (sleeping_.load() > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      wake_cv_.notify_all();
    }
  }
  auto [begin, end] = PartRange(n, grain, 0, n_threads_);
  if (begin < end) fn(begin, end, 0);
  while (pending_.load(std::memory_order_acquire) != 0) MT_CPU_RELAX();
}

void ThreadPool::ParallelForDynamic(int64_t n, RangeFn fn, int64_t chunk) {
  if (n <= 0) return;
  chunk = std::max<int64_t>(chunk, 1);
  if (n_threads_ == 1 || n <= chunk) {
    ParallelFor(n, fn, n);  // pins the caller as ParallelFor does, then runs it inline
    return;
  }
  std::atomic<int64_t> next{0};
  ParallelFor(n_threads_, [&](int64_t, int64_t, int thread) {
    for (int64_t b = next.fetch_add(chunk); b < n; b = next.fetch_add(chunk)) {
      fn(b, std::min(b + chunk, n), thread);
    }
  });
}

}  // namespace mt
