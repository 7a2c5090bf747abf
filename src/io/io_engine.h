// Asynchronous batched reads from files: the one interface all expert I/O goes through.
// Implementations: io_uring (liburing), a pread thread pool, and a fault-injecting wrapper
// for tests. Expert streaming (src/experts/) submits reads and consumes completions in
// whatever order they finish.
//
// Thread-safety: every method of both real engines may be called from any thread (an
// internal mutex serializes them; a blocked Wait does not hold it, so a prefetch thread can
// Submit while the compute thread waits). Completions go to whichever Wait call takes them:
// have one thread consume them, or route by tag yourself.
//
// Lifetime: buffers must stay valid until their read's completion has been returned by
// Wait, or until the engine is destroyed. Destruction drops reads still queued inside the
// engine and waits for those the OS has started; after it returns no buffer is written.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "base/status.h"

namespace mt {

// O_DIRECT needs offsets, lengths and buffers aligned to the logical block size; 4 KiB
// covers every device we care about.
inline constexpr uint64_t kDirectIoAlignment = 4096;

// The longest single read (io_uring takes 32-bit lengths; Linux caps one read below 2 GiB).
inline constexpr uint64_t kMaxReadLength = uint64_t{1} << 30;

struct ReadOp {
  int file = 0;         // index returned by IoEngine::AddFile
  uint64_t offset = 0;  // bytes from the start of the file
  uint64_t length = 0;  // bytes to read
  void* dst = nullptr;  // where to put them (aligned to kDirectIoAlignment for direct files)
  uint64_t tag = 0;     // the caller's id, returned with the completion
  // dst's pages have never been written (fresh anonymous memory). Faulting them in is then
  // part of the read, and costly on some virtual machines (~0.5 GB/s here): io_uring lets a
  // kernel worker do it (IOSQE_ASYNC) instead of the thread that submits.
  bool untouched_dst = false;
};

struct ReadCompletion {
  uint64_t tag = 0;
  int64_t result = 0;  // bytes read (may be short at the end of a file), or -errno
};

enum class DirectMode { kAuto, kOn, kOff };

class IoEngine {
 public:
  virtual ~IoEngine() = default;

  // Opens `path` read-only and returns its index. With kAuto, O_DIRECT is used when the
  // filesystem supports it, else buffered reads (is_direct(index) tells which); kOn fails
  // if O_DIRECT is not supported. Errors name the path.
  virtual Result<int> AddFile(const std::string& path, DirectMode direct) = 0;
  virtual bool is_direct(int file) const = 0;

  // Queues reads; returns at once. Fails only if the engine cannot accept them (never for
  // a bad offset: that shows in the completion's result). A bad op completes with -EBADF
  // (unknown file index) or -EINVAL (length over kMaxReadLength, or offset, length or dst
  // not aligned to kDirectIoAlignment on a direct file). Reads are never dropped: ops
  // beyond the queue depth wait inside the engine and go out as earlier ones complete.
  virtual Status Submit(std::span<const ReadOp> ops) = 0;

  // Waits until at least `min_completions` reads have completed (0: do not wait) or
  // `timeout_ms` passed (-1: no timeout), and writes up to out.size() completions.
  // Returns how many were written. min_completions is capped at out.size() and at
  // in_flight(), so Wait never blocks for reads that were not submitted.
  virtual size_t Wait(std::span<ReadCompletion> out, size_t min_completions, int timeout_ms) = 0;

  // Reads submitted and not yet returned by Wait.
  virtual size_t in_flight() const = 0;

  virtual std::string name() const = 0;  // "io_uring", "pread", ...
};

// io_uring with `queue_depth` entries. Unavailable (old kernel, seccomp): an error the
// caller can fall back on. With no thread of its own, it hands queued reads to the kernel
// during Submit and Wait calls, so keep calling Wait while reads are outstanding.
Result<std::unique_ptr<IoEngine>> CreateUringEngine(int queue_depth);

// A pool of `n_threads` threads doing pread (each read is one pread; short reads are
// reported as such, not retried past the end of the file).
Result<std::unique_ptr<IoEngine>> CreatePreadEngine(int n_threads);

enum class IoBackend { kAuto, kUring, kPread };

// kAuto: io_uring, falling back to pread when io_uring is unavailable (with a notice).
// For pread, queue_depth is the number of threads.
Result<std::unique_ptr<IoEngine>> CreateIoEngine(IoBackend backend, int queue_depth);

}  // namespace mt
