// io_bench: random-read throughput of the IoEngines on a real file, the access pattern of
// expert streaming (reads of 1-4 MiB at random aligned offsets, a fixed number in flight).
// A measurement, not a test. For cold reads, drop the page cache first
// (sync; echo 1 > /proc/sys/vm/drop_caches) or use O_DIRECT (the default).
//
//   io_bench FILE [--engine io_uring|pread] [--depth 8] [--threads 4] [--seconds 5]
//            [--min-mib 1] [--max-mib 4] [--direct auto|on|off] [--seed 1]

#include <fmt/format.h>
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "io/io_engine.h"

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
};

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
  auto engine =
      o.engine == "pread" ? mt::CreatePreadEngine(o.threads) : mt::CreateUringEngine(o.depth);
  if (!engine.ok()) {
    fmt::print(stderr, "io_bench: {}\n", engine.status().message());
    return 1;
  }
  mt::DirectMode mode = o.direct == "off"  ? mt::DirectMode::kOff
                        : o.direct == "on" ? mt::DirectMode::kOn
                                           : mt::DirectMode::kAuto;
  mt::Result<int> file = (*engine)->AddFile(o.path, mode);
  if (!file.ok()) {
    fmt::print(stderr, "io_bench: {}\n", file.status().message());
    return 1;
  }

  // (depth, max_len) one buffer per read in flight
  std::vector<uint8_t*> buffers(static_cast<size_t>(o.depth));
  for (auto& b : buffers) {
    b = static_cast<uint8_t*>(std::aligned_alloc(mt::kDirectIoAlignment, max_len));
    for (uint64_t i = 0; i < max_len; i += 4096) b[i] = 0;  // fault the pages in now
  }
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
  const Clock::time_point t0 = Clock::now();
  const Clock::time_point end =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
  std::vector<mt::ReadOp> first;
  for (int i = 0; i < o.depth; ++i) first.push_back(next_op(uint64_t(i)));
  if (!(*engine)->Submit(first).ok()) return 1;
  uint64_t bytes = 0, reads = 0, errors = 0;
  std::vector<mt::ReadCompletion> done(static_cast<size_t>(o.depth));
  bool stopping = false;
  while ((*engine)->in_flight() > 0) {
    size_t n = (*engine)->Wait(done, 1, -1);
    std::vector<mt::ReadOp> again;
    for (size_t i = 0; i < n; ++i) {
      if (done[i].result < 0) {
        ++errors;
      } else {
        bytes += uint64_t(done[i].result);
        ++reads;
      }
      if (!stopping) again.push_back(next_op(done[i].tag));
    }
    if (!stopping && Clock::now() >= end) stopping = true;  // let the last ones finish
    if (!again.empty() && !stopping && !(*engine)->Submit(again).ok()) return 1;
  }
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  std::string label =
      o.engine == "pread" ? fmt::format("pread x{} threads", o.threads) : std::string("io_uring");
  fmt::print("{:<20} depth {:2}  {} {}-{} MiB  {:7.0f} reads  {:6.2f} GB/s  ({:.2f} GiB/s){}\n",
             label, o.depth, (*engine)->is_direct(*file) ? "O_DIRECT" : "buffered", o.min_mib,
             o.max_mib, double(reads), double(bytes) / secs / 1e9,
             double(bytes) / secs / double(1 << 30),
             errors ? fmt::format("  {} errors", errors) : std::string());
  for (auto* b : buffers) std::free(b);
  return errors ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Random-read throughput of the IoEngines"};
  app.add_option("file", o.path, "file to read")->required();
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
  CLI11_PARSE(app, argc, argv);
  return Run(o);
}
