// IoEngine on a pool of threads doing blocking pread. One mutex guards the queue, the
// completions and the file table; workers drop it while they read.

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "io/io_engine.h"
#include "io/io_engine_internal.h"

namespace mt {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxThreads = 1024;
// A pread that fails with EAGAIN is tried again, at most this many times (EINTR always).
constexpr int kMaxRetries = 16;

// One pread: bytes read (short at the end of the file), or -errno.
int64_t PreadOnce(int fd, const ReadOp& op) {
  int again = 0;
  for (;;) {
    ssize_t n = ::pread(fd, op.dst, op.length, static_cast<off_t>(op.offset));
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    if (errno == EAGAIN && again++ < kMaxRetries) continue;
    return -errno;
  }
}

class PreadEngine final : public IoEngine {
 public:
  explicit PreadEngine(int n_threads) {
    threads_.reserve(static_cast<size_t>(n_threads));
    for (int i = 0; i < n_threads; ++i) threads_.emplace_back([this] { WorkerLoop(); });
  }

  ~PreadEngine() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      queue_.clear();  // never started; reads in progress finish before the joins return
    }
    work_cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  Result<int> AddFile(const std::string& path, DirectMode direct) override {
    std::lock_guard<std::mutex> lock(mu_);
    return files_.Add(path, direct);
  }

  bool is_direct(int file) const override {
    std::lock_guard<std::mutex> lock(mu_);
    const io_internal::OpenFile* f = files_.Get(file);
    return f != nullptr && f->direct;
  }

  Status Submit(std::span<const ReadOp> ops) override {
    bool rejected = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const ReadOp& op : ops) {
        int err = io_internal::CheckOp(files_.Get(op.file), op);
        if (err != 0) {
          ready_.push_back({op.tag, err});
          rejected = true;
        } else {
          queue_.push_back(op);
        }
      }
    }
    work_cv_.notify_all();
    if (rejected) done_cv_.notify_all();
    return Status::Ok();
  }

  size_t Wait(std::span<ReadCompletion> out, size_t min_completions, int timeout_ms) override {
    std::unique_lock<std::mutex> lock(mu_);
    // Re-evaluated on each wake-up: another thread's Wait may have taken completions.
    auto done = [&] {
      return ready_.size() >= std::min({min_completions, out.size(), InFlightLocked()});
    };
    if (timeout_ms < 0) {
      done_cv_.wait(lock, done);
    } else {
      done_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), done);
    }
    size_t n = std::min(out.size(), ready_.size());
    std::copy_n(ready_.begin(), n, out.begin());
    ready_.erase(ready_.begin(), ready_.begin() + static_cast<ptrdiff_t>(n));
    return n;
  }

  size_t in_flight() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return InFlightLocked();
  }

  std::string name() const override { return "pread"; }

 private:
  size_t InFlightLocked() const { return queue_.size() + running_ + ready_.size(); }

  void WorkerLoop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      work_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      ReadOp op = queue_.front();
      queue_.pop_front();
      int fd = files_.Get(op.file)->fd;  // checked in Submit; files are never removed
      ++running_;
      lock.unlock();
      int64_t result = PreadOnce(fd, op);
      lock.lock();
      --running_;
      ready_.push_back({op.tag, result});
      done_cv_.notify_all();
    }
  }

  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // workers: queue_ not empty, or stopping_
  std::condition_variable done_cv_;  // waiters: ready_ grew
  io_internal::FileTable files_;
  std::deque<ReadOp> queue_;          // accepted, not yet taken by a worker
  size_t running_ = 0;                // reads a worker is doing now
  std::deque<ReadCompletion> ready_;  // completed, not yet returned by Wait
  bool stopping_ = false;
  std::vector<std::thread> threads_;  // last member: started after everything above exists
};

}  // namespace

Result<std::unique_ptr<IoEngine>> CreatePreadEngine(int n_threads) {
  if (n_threads < 1 || n_threads > kMaxThreads) {
    return InvalidArgument("pread thread count {} is out of range [1, {}]", n_threads, kMaxThreads);
  }
  return std::unique_ptr<IoEngine>(new PreadEngine(n_threads));
}

}  // namespace mt
