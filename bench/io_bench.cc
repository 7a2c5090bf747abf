// io_bench: random-read throughput of the IoEngines on a real file, the access pattern of
// expert streaming (reads of 1-4 MiB at random aligned offsets, a fixed number in flight).
// A measurement, not a test. For cold reads, drop the page cache first
// (sync; echo 1 > /proc/sys/vm/drop_caches) or use O_DIRECT (the default).
//
//   io_bench FILE [--engine io_uring|pread] [--depth 8] [--threads 4] [--seconds 5]
//            [--min-mib 1] [--max-mib 4] [--direct auto|on|off] [--seed 1] [--pages huge|4k]
//            [--busy N]
//   io_bench --replay TRACE [--engine ...] [--depth 8] [--direct ...] [--pages ...] [--busy N]
//
// --replay: the reads of a `moetier bench --read-trace` run, in their order, with `depth`
// in flight and nothing else to do: the device's time for exactly those bytes (the disk's
// part of memory_pressure.sh's bound).
// --busy N: meanwhile N threads stream memory without pause. On a small VM the host's I/O
// work shares the guest's cores, so the disk gives less while they are busy
// (docs/journal/tiering.md, 2026-12-02 (evening)). A diagnostic, not a bound: decode's threads
// sleep through read waits, so its disk lies between the idle and the busy figure.

#include <fmt/format.h>
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/file_io.h"
#include "base/memory_info.h"
#include "io/io_engine.h"
#include "io/read_trace.h"

namespace {

struct Options {
  std::string path;
  std::string engine = "io_uring";
  int depth = 8;    // reads in flight (and io_uring's queue depth)
  int threads = 4;  // pread pool size
  double seconds = 5;
  int min_mib = 1;
  int max_mib = 4;
  std::string direct = "on";
  uint64_t seed = 1;
  std::string replay;          // a read trace to replay instead of random reads
  std::string pages = "huge";  // read buffers: huge (as the stream tier's) or 4k
  int busy = 0;                // threads streaming memory while the reads run
};

// Threads that read through a private 256 MiB buffer each, over and over (far beyond the
// caches, as a decode step's weights are), from construction until destruction.
class BusyThreads {
 public:
  explicit BusyThreads(int n) {
    for (int i = 0; i < n; ++i) {
      threads_.emplace_back([this] {
        std::vector<uint64_t> buf((uint64_t{256} << 20) / sizeof(uint64_t), 1);
        uint64_t sum = 0;
        while (!stop_.load(std::memory_order_relaxed)) {
          for (uint64_t v : buf) sum += v;
        }
        sink_.fetch_add(sum, std::memory_order_relaxed);  // keeps the loop from being dropped
      });
    }
  }
  ~BusyThreads() {
    stop_ = true;
    for (std::thread& t : threads_) t.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> sink_{0};
  std::vector<std::thread> threads_;
};

// ", N busy threads" when --busy is on: both modes' result lines say so.
std::string BusyNote(const Options& o) {
  return o.busy > 0 ? fmt::format(", {} busy threads", o.busy) : std::string();
}

// One destination per read in flight, max_len bytes each, its pages faulted in now. "huge":
// in one 2 MiB-aligned buffer on transparent huge pages, as the stream tier's slots are;
// "4k": separate aligned_alloc blocks on 4 KiB pages (as dd's). On this project's VMs O_DIRECT
// reads into 4 KiB pages ran at a third to two thirds of the rate into huge pages
// (docs/journal/tiering.md, 2026-12-02), so "4k" under-measures what stream mode gets.
class ReadBuffers {
 public:
  ReadBuffers(const Options& o, uint64_t max_len) : slots_(static_cast<size_t>(o.depth)) {
    if (o.pages == "huge") {
      if (mt::TransparentHugePageMode() == "never") {
        fmt::print(stderr,
                   "io_bench: transparent huge pages are off: the buffers lie on 4 KiB "
                   "pages\n");
      }
      const uint64_t huge = uint64_t{2} << 20;
      const uint64_t stride = (max_len + huge - 1) / huge * huge;
      mt::Result<mt::AlignedBuffer> pool = mt::AlignedBuffer::Allocate(stride * slots_.size());
      if (!pool.ok() || !pool->Populate().ok()) {
        fmt::print(stderr, "io_bench: cannot allocate {} MiB of read buffers\n",
                   (stride * slots_.size()) >> 20);
        return;
      }
      pool_ = std::move(pool).value();
      for (size_t i = 0; i < slots_.size(); ++i) slots_[i] = pool_.data() + i * stride;
    } else {
      for (auto& b : slots_) {
        b = static_cast<uint8_t*>(std::aligned_alloc(mt::kDirectIoAlignment, max_len));
        if (b == nullptr) return;
        for (uint64_t i = 0; i < max_len; i += 4096) b[i] = 0;
      }
    }
    ok_ = true;
  }
  ~ReadBuffers() {
    if (pool_.size() == 0) {
      for (uint8_t* b : slots_) std::free(b);  // "4k": each slot its own block (or null)
    }
  }
  bool ok() const { return ok_; }
  uint8_t* operator[](uint64_t slot) const { return slots_[slot]; }

 private:
  std::vector<uint8_t*> slots_;  // (depth)
  mt::AlignedBuffer pool_;       // ("huge") the slots' memory; empty for "4k"
  bool ok_ = false;
};

struct Totals {
  uint64_t bytes = 0, reads = 0, errors = 0;
  bool submit_failed = false;
};

// Keeps up to `depth` reads in flight until `next` has no more: next(slot) is the op for a
// free slot (its buffer), or nothing.
Totals Drive(mt::IoEngine& engine, int depth,
             const std::function<std::optional<mt::ReadOp>(uint64_t slot)>& next) {
  Totals t;
  std::vector<mt::ReadOp> ops;
  for (int i = 0; i < depth; ++i) {
    if (std::optional<mt::ReadOp> op = next(uint64_t(i))) ops.push_back(*op);
  }
  std::vector<mt::ReadCompletion> done(static_cast<size_t>(depth));
  while (!ops.empty() || engine.in_flight() > 0) {
    if (!ops.empty() && !engine.Submit(ops).ok()) {
      t.submit_failed = true;
      return t;
    }
    ops.clear();
    const size_t n = engine.Wait(done, 1, -1);
    for (size_t i = 0; i < n; ++i) {
      if (done[i].result < 0) {
        ++t.errors;
      } else {
        t.bytes += uint64_t(done[i].result);
        ++t.reads;
      }
      if (std::optional<mt::ReadOp> op = next(done[i].tag)) ops.push_back(*op);
    }
  }
  return t;
}

mt::DirectMode ModeOf(const Options& o) {
  return o.direct == "off"  ? mt::DirectMode::kOff
         : o.direct == "on" ? mt::DirectMode::kOn
                            : mt::DirectMode::kAuto;
}

mt::Result<std::unique_ptr<mt::IoEngine>> MakeEngine(const Options& o) {
  return o.engine == "pread" ? mt::CreatePreadEngine(o.threads) : mt::CreateUringEngine(o.depth);
}

// Replays a read trace: its reads in order, o.depth in flight.
int Replay(const Options& o) {
  mt::Result<std::string> text = mt::ReadWholeFile(o.replay);
  if (!text.ok()) {
    fmt::print(stderr, "io_bench: {}\n", text.status().message());
    return 1;
  }
  mt::Result<mt::ReadTrace> trace = mt::ParseReadTrace(*text);
  if (!trace.ok()) {
    fmt::print(stderr, "io_bench: {}: {}\n", o.replay, trace.status().message());
    return 1;
  }
  auto engine = MakeEngine(o);
  if (!engine.ok()) {
    fmt::print(stderr, "io_bench: {}\n", engine.status().message());
    return 1;
  }
  std::vector<int> files;  // (trace files) engine index
  bool direct = true;
  for (const std::string& path : trace->files) {
    mt::Result<int> file = (*engine)->AddFile(path, ModeOf(o));
    if (!file.ok()) {
      fmt::print(stderr, "io_bench: {}\n", file.status().message());
      return 1;
    }
    files.push_back(*file);
    direct = direct && (*engine)->is_direct(*file);
  }
  uint64_t max_len = mt::kDirectIoAlignment;
  for (const mt::TracedRead& r : trace->reads) max_len = std::max(max_len, r.length);
  const uint64_t align = mt::kDirectIoAlignment;
  max_len = (max_len + align - 1) / align * align;
  ReadBuffers buffers(o, max_len);
  if (!buffers.ok()) return 1;
  size_t next = 0;
  const BusyThreads busy(o.busy);
  const auto t0 = std::chrono::steady_clock::now();
  const Totals t = Drive(**engine, o.depth, [&](uint64_t slot) -> std::optional<mt::ReadOp> {
    if (next == trace->reads.size()) return std::nullopt;
    const mt::TracedRead& r = trace->reads[next++];
    return mt::ReadOp{files[r.file], r.offset, r.length, buffers[slot], slot};
  });
  if (t.submit_failed) return 1;
  const uint64_t bytes = t.bytes, errors = t.errors;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print(
      "replay {:<12} depth {:2}  {} {} pages{}  {} reads  {:.3f} GB  {:.3f} s  "
      "{:6.2f} GB/s  ({:.2f} GiB/s){}\n",
      (*engine)->name(), o.depth, direct ? "O_DIRECT" : "buffered", o.pages, BusyNote(o),
      trace->reads.size(), double(bytes) / 1e9, secs, secs > 0 ? double(bytes) / secs / 1e9 : 0.0,
      secs > 0 ? double(bytes) / secs / double(1 << 30) : 0.0,
      errors ? fmt::format("  {} errors", errors) : std::string());
  return errors ? 1 : 0;
}

int Run(const Options& o) {
  struct stat st;
  if (::stat(o.path.c_str(), &st) != 0) {
    fmt::print(stderr, "io_bench: {}: cannot stat\n", o.path);
    return 1;
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const uint64_t max_len = uint64_t(o.max_mib) << 20;
  if (o.min_mib < 1 || o.max_mib < o.min_mib || size < 2 * max_len || o.depth < 1) {
    fmt::print(stderr, "io_bench: bad sizes (file {} bytes, reads {}-{} MiB, depth {})\n", size,
               o.min_mib, o.max_mib, o.depth);
    return 1;
  }
  auto engine = MakeEngine(o);
  if (!engine.ok()) {
    fmt::print(stderr, "io_bench: {}\n", engine.status().message());
    return 1;
  }
  mt::Result<int> file = (*engine)->AddFile(o.path, ModeOf(o));
  if (!file.ok()) {
    fmt::print(stderr, "io_bench: {}\n", file.status().message());
    return 1;
  }

  ReadBuffers buffers(o, max_len);
  if (!buffers.ok()) return 1;
  std::mt19937_64 rng(o.seed);
  const uint64_t block = mt::kDirectIoAlignment;  // bytes
  auto next_op = [&](uint64_t slot) {
    uint64_t len_blocks = (uint64_t(o.min_mib) << 20) / block +
                          rng() % (((uint64_t(o.max_mib - o.min_mib)) << 20) / block + 1);
    uint64_t len = len_blocks * block;
    uint64_t offset = rng() % ((size - len) / block) * block;
    return mt::ReadOp{*file, offset, len, buffers[slot], slot};
  };

  using Clock = std::chrono::steady_clock;
  const BusyThreads busy(o.busy);
  const Clock::time_point t0 = Clock::now();
  const Clock::time_point end =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
  // New reads until the time is up; the last ones finish.
  const Totals t = Drive(**engine, o.depth, [&](uint64_t slot) -> std::optional<mt::ReadOp> {
    if (Clock::now() >= end) return std::nullopt;
    return next_op(slot);
  });
  if (t.submit_failed) return 1;
  const uint64_t bytes = t.bytes, reads = t.reads, errors = t.errors;
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  std::string label =
      o.engine == "pread" ? fmt::format("pread x{} threads", o.threads) : std::string("io_uring");
  label += BusyNote(o);
  fmt::print(
      "{:<20} depth {:2}  {} {} pages {}-{} MiB  {:7.0f} reads  {:6.2f} GB/s  "
      "({:.2f} GiB/s){}\n",
      label, o.depth, (*engine)->is_direct(*file) ? "O_DIRECT" : "buffered", o.pages, o.min_mib,
      o.max_mib, double(reads), double(bytes) / secs / 1e9, double(bytes) / secs / double(1 << 30),
      errors ? fmt::format("  {} errors", errors) : std::string());
  return errors ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Random-read throughput of the IoEngines"};
  auto* file = app.add_option("file", o.path, "file to read");
  app.add_option("--replay", o.replay, "replay a moetier bench --read-trace file instead")
      ->excludes(file);
  app.add_option("--engine", o.engine, "io_uring or pread")
      ->check(CLI::IsMember({"io_uring", "pread"}));
  app.add_option("--depth", o.depth, "reads in flight");
  app.add_option("--threads", o.threads, "pread threads");
  app.add_option("--seconds", o.seconds, "how long to read");
  app.add_option("--min-mib", o.min_mib, "smallest read, MiB");
  app.add_option("--max-mib", o.max_mib, "largest read, MiB");
  app.add_option("--direct", o.direct, "auto, on or off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_option("--seed", o.seed, "offsets and lengths");
  app.add_option("--pages", o.pages, "read buffers on huge pages (as stream mode's) or 4k pages")
      ->check(CLI::IsMember({"huge", "4k"}));
  app.add_option("--busy", o.busy, "threads streaming memory while the reads run (a diagnostic)")
      ->check(CLI::Range(0, 64));
  CLI11_PARSE(app, argc, argv);
  if (!o.replay.empty()) return Replay(o);
  if (o.path.empty()) {
    fmt::print(stderr, "io_bench: give a FILE to read, or --replay TRACE\n");
    return 1;
  }
  return Run(o);
}
