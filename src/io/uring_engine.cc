// IoEngine on io_uring (liburing). One mutex guards the ring and the queues. A waiter blocks
// on an eventfd registered with the ring, outside the mutex, so other threads can Submit
// meanwhile; everything that touches the rings happens under the mutex.
//
// At most queue_depth reads are in the kernel at once (the completion ring holds twice the
// submission ring, so it can never overflow); the rest wait in pending_ and go out as slots
// free up during Submit and Wait calls.

#include <liburing.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <mutex>
#include <vector>

#include "base/check.h"
#include "io/io_engine.h"
#include "io/io_engine_internal.h"

namespace mt {
namespace {

using Clock = std::chrono::steady_clock;

// A read that came back -EAGAIN or -EINTR is issued again, at most this many times.
constexpr int kMaxRetries = 16;
// Queue depths io_uring accepts (IORING_MAX_ENTRIES).
constexpr int kMaxQueueDepth = 32768;

class UringEngine final : public IoEngine {
 public:
  UringEngine() = default;
  UringEngine(const UringEngine&) = delete;
  UringEngine& operator=(const UringEngine&) = delete;

  // Sets up the ring in place (liburing keeps it by address). Unimplemented when the
  // kernel or a sandbox does not allow io_uring.
  Status Init(int queue_depth) {
    int ret = io_uring_queue_init(static_cast<unsigned>(queue_depth), &ring_, 0);
    if (ret < 0) return Unimplemented("io_uring unavailable: {}", std::strerror(-ret));
    ring_ready_ = true;
    io_uring_probe* probe = io_uring_get_probe_ring(&ring_);
    bool has_read = probe != nullptr && io_uring_opcode_supported(probe, IORING_OP_READ);
    if (probe != nullptr) io_uring_free_probe(probe);
    if (!has_read) return Unimplemented("io_uring unavailable: the kernel lacks IORING_OP_READ");
    event_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (event_fd_ < 0)
      return Unimplemented("io_uring unavailable: eventfd: {}", std::strerror(errno));
    ret = io_uring_register_eventfd(&ring_, event_fd_);
    if (ret < 0) {
      return Unimplemented("io_uring unavailable: cannot register an eventfd: {}",
                           std::strerror(-ret));
    }
    slots_.resize(static_cast<size_t>(queue_depth));
    for (size_t i = slots_.size(); i-- > 0;) free_slots_.push_back(static_cast<uint32_t>(i));
    return Status::Ok();
  }

  ~UringEngine() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (ring_ready_) {
      pending_.clear();
      // The kernel may still write into the caller's buffers: wait for every started read.
      while (free_slots_.size() < slots_.size()) {
        int ret = io_uring_submit_and_wait(&ring_, 1);
        MT_CHECK_MSG(ret >= 0 || ret == -EINTR || ret == -EAGAIN || ret == -EBUSY,
                     "io_uring_enter failed while draining");
        io_uring_cqe* cqe;
        while (io_uring_peek_cqe(&ring_, &cqe) == 0) {
          free_slots_.push_back(static_cast<uint32_t>(io_uring_cqe_get_data64(cqe)));
          io_uring_cqe_seen(&ring_, cqe);
        }
      }
      io_uring_queue_exit(&ring_);
    }
    if (event_fd_ >= 0) ::close(event_fd_);
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
    std::lock_guard<std::mutex> lock(mu_);
    bool rejected = false;
    for (const ReadOp& op : ops) {
      int err = io_internal::CheckOp(files_.Get(op.file), op);
      if (err != 0) {
        ready_.push_back({op.tag, err});
        rejected = true;
      } else {
        pending_.push_back({op, 0});
      }
    }
    // Reaping here frees slots for a caller that submits often; the eventfd is left as it
    // is so a blocked waiter still wakes up and finds what was reaped.
    Reap();
    Fill();
    if (rejected) WakeWaiters();
    return Status::Ok();
  }

  size_t Wait(std::span<ReadCompletion> out, size_t min_completions, int timeout_ms) override {
    const Clock::time_point deadline = timeout_ms < 0
                                           ? Clock::time_point::max()
                                           : Clock::now() + std::chrono::milliseconds(timeout_ms);
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      // Clear the eventfd before looking at the ring: a completion posted after the look
      // signals it again, so the poll below cannot miss it.
      DrainEventFd();
      size_t had = ready_.size();
      Reap();
      Fill();
      // That drain may have eaten the signal another blocked waiter needed.
      if (ready_.size() > had && blocked_waiters_ > 0) WakeWaiters();
      size_t want = std::min({min_completions, out.size(), InFlightLocked()});
      if (ready_.size() >= want) break;
      Clock::time_point now = Clock::now();
      if (now >= deadline) break;
      // SQEs the kernel refused for now (EAGAIN/EBUSY) are pushed again after 1 ms.
      Clock::time_point until = deadline;
      if (io_uring_sq_ready(&ring_) > 0)
        until = std::min(until, now + std::chrono::milliseconds(1));
      ++blocked_waiters_;
      lock.unlock();
      BlockOnEventFd(until);
      lock.lock();
      --blocked_waiters_;
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

  std::string name() const override { return "io_uring"; }

 private:
  struct Pending {
    ReadOp op;
    int retries = 0;  // times it came back -EAGAIN/-EINTR
  };

  size_t InFlightLocked() const {
    return pending_.size() + (slots_.size() - free_slots_.size()) + ready_.size();
  }

  // Moves pending reads into free slots and submits them. mu_ held.
  void Fill() {
    bool added = false;
    while (!pending_.empty() && !free_slots_.empty()) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      // Reads in the submission ring plus reads in the kernel never exceed queue_depth,
      // which is at most the ring's size.
      MT_CHECK(sqe != nullptr);
      uint32_t slot = free_slots_.back();
      free_slots_.pop_back();
      slots_[slot] = pending_.front();
      pending_.pop_front();
      const ReadOp& op = slots_[slot].op;
      int fd = files_.Get(op.file)->fd;
      io_uring_prep_read(sqe, fd, op.dst, static_cast<unsigned>(op.length), op.offset);
      if (op.untouched_dst) io_uring_sqe_set_flags(sqe, IOSQE_ASYNC);
      io_uring_sqe_set_data64(sqe, slot);
      added = true;
    }
    if (added || io_uring_sq_ready(&ring_) > 0) SubmitToKernel();
  }

  // mu_ held. SQEs the kernel does not take now stay in the ring for the next call.
  void SubmitToKernel() {
    for (;;) {
      int ret = io_uring_submit(&ring_);
      if (ret == -EINTR) continue;
      MT_CHECK_MSG(ret >= 0 || ret == -EAGAIN || ret == -EBUSY, "io_uring_submit failed");
      return;
    }
  }

  // Takes every completion the ring holds. mu_ held.
  void Reap() {
    io_uring_cqe* cqe;
    while (io_uring_peek_cqe(&ring_, &cqe) == 0) {
      uint32_t slot = static_cast<uint32_t>(io_uring_cqe_get_data64(cqe));
      int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      MT_CHECK(slot < slots_.size());
      Pending& p = slots_[slot];
      if ((res == -EAGAIN || res == -EINTR) && p.retries < kMaxRetries) {
        ++p.retries;
        pending_.push_front(p);  // first in line: it has waited longest
      } else {
        ready_.push_back({p.op.tag, res});
      }
      free_slots_.push_back(slot);
    }
  }

  void DrainEventFd() {
    eventfd_t value;
    eventfd_read(event_fd_, &value);  // takes the whole count; EAGAIN when it was 0
  }

  void WakeWaiters() { eventfd_write(event_fd_, 1); }

  void BlockOnEventFd(Clock::time_point until) {
    pollfd pfd{event_fd_, POLLIN, 0};
    if (until == Clock::time_point::max()) {
      ::ppoll(&pfd, 1, nullptr, nullptr);
      return;
    }
    auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(until - Clock::now());
    if (left.count() <= 0) return;
    timespec ts{static_cast<time_t>(left.count() / 1000000000),
                static_cast<long>(left.count() % 1000000000)};
    ::ppoll(&pfd, 1, &ts, nullptr);  // EINTR: the caller's loop looks again
  }

  mutable std::mutex mu_;
  io_uring ring_{};
  bool ring_ready_ = false;  // io_uring_queue_init succeeded
  int event_fd_ = -1;        // signalled by the kernel on each completion, and by WakeWaiters
  io_internal::FileTable files_;
  std::deque<Pending> pending_;       // accepted, not yet handed to the kernel
  std::vector<Pending> slots_;        // (queue_depth) a read per slot; user_data = index
  std::vector<uint32_t> free_slots_;  // indices of slots_ not in the kernel
  std::deque<ReadCompletion> ready_;  // completed, not yet returned by Wait
  int blocked_waiters_ = 0;           // Wait calls blocked on the eventfd now
};

}  // namespace

Result<std::unique_ptr<IoEngine>> CreateUringEngine(int queue_depth) {
  if (queue_depth < 1 || queue_depth > kMaxQueueDepth) {
    return InvalidArgument("io_uring queue depth {} is out of range [1, {}]", queue_depth,
                           kMaxQueueDepth);
  }
  auto engine = std::make_unique<UringEngine>();
  MT_RETURN_IF_ERROR(engine->Init(queue_depth));
  return std::unique_ptr<IoEngine>(std::move(engine));
}

}  // namespace mt
