#include "base/read_bandwidth.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "base/aligned_buffer.h"

namespace mt {
namespace {

constexpr uint64_t kLine = 64;
constexpr int kStreams = 4;
constexpr uint64_t kPrefetchAhead = 2048;  // bytes: 32 lines per stream in flight

// Eight independent lanes, so the loads are not serialised by one dependency chain.
inline void XorLine(const uint64_t* w, uint64_t acc[8]) {
  for (int j = 0; j < 8; ++j) acc[j] ^= w[j];
}

}  // namespace

uint64_t ReadAllBytes(const void* data, uint64_t bytes) {
  const char* p = static_cast<const char*>(data);
  const uint64_t quarter = bytes / kStreams / kLine * kLine;
  uint64_t acc[8] = {};
  for (uint64_t i = 0; i < quarter; i += kLine) {
    for (int s = 0; s < kStreams; ++s) {
      const char* line = p + s * quarter + i;
      __builtin_prefetch(line + kPrefetchAhead);  // past the end is harmless: no fault
      XorLine(reinterpret_cast<const uint64_t*>(line), acc);
    }
  }
  const uint64_t* tail = reinterpret_cast<const uint64_t*>(p + kStreams * quarter);
  for (uint64_t i = 0; i < (bytes - kStreams * quarter) / 8; ++i) acc[i % 8] ^= tail[i];
  uint64_t sum = 0;
  for (int j = 0; j < 8; ++j) sum ^= acc[j];
  return sum;
}

double MeasureReadBandwidth(ThreadPool& pool, uint64_t bytes, int reps) {
  bytes = bytes / kLine * kLine;
  Result<AlignedBuffer> buf = AlignedBuffer::Allocate(bytes);
  if (!buf.ok() || bytes == 0) return 0;
  uint64_t* words = reinterpret_cast<uint64_t*>(buf->data());
  const int64_t n_lines = static_cast<int64_t>(bytes / kLine);
  pool.ParallelFor(n_lines, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b * 8; i < e * 8; ++i) words[i] = static_cast<uint64_t>(i);
  });
  double best = 0;
  std::vector<uint64_t> sinks(pool.size());
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    // One contiguous range per thread, so each thread's four streams are long.
    pool.ParallelFor(n_lines, [&](int64_t b, int64_t e, int thread) {
      sinks[thread] ^= ReadAllBytes(words + b * 8, static_cast<uint64_t>(e - b) * kLine);
    });
    auto t1 = std::chrono::steady_clock::now();
    const double secs = std::chrono::duration<double>(t1 - t0).count();
    best = std::max(best, double(bytes) / secs / 1e9);
  }
  volatile uint64_t keep = 0;
  for (uint64_t s : sinks) keep = keep ^ s;
  (void)keep;
  return best;
}

}  // namespace mt
