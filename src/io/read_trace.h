// A record of the reads a run made (file, offset, length), so that a benchmark can replay
// exactly those reads alone (io_bench --replay) and take the device's own time for them as
// the disk's share of the bound: on the same device and host cache, with nothing else to do.
// A generic random-read probe cannot give that number where a host cache serves re-read
// blocks faster than the device (docs/journal/tiering.md).
//
// Text format, one item per line:
//   moetier-read-trace 1
//   file <index> <path>            indices 0, 1, ... in order, each before its first read
//   read <file> <offset> <length>  in submission order
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "io/io_engine.h"

namespace mt {

struct TracedRead {
  uint32_t file = 0;    // index into ReadTrace::files
  uint64_t offset = 0;  // bytes
  uint64_t length = 0;  // bytes, 1 .. kMaxReadLength
};

struct ReadTrace {
  std::vector<std::string> files;  // (files) path of each index
  std::vector<TracedRead> reads;   // (reads) in submission order
};

// The text form. Fails for a path that holds a line break.
Result<std::string> FormatReadTrace(const ReadTrace& trace);

// Errors name the line: "read trace line 7: file index 3 is not defined".
Result<ReadTrace> ParseReadTrace(std::string_view text);

// An IoEngine that passes everything to `inner` and, while recording, appends every op that
// Submit hands on to a trace. Thread-safe as the engines are.
class TracingEngine final : public IoEngine {
 public:
  explicit TracingEngine(std::unique_ptr<IoEngine> inner) : inner_(std::move(inner)) {}

  // Starts (true) or stops recording; starting drops the reads recorded so far.
  void SetRecording(bool on);
  // The files added so far and the reads recorded.
  ReadTrace trace() const;

  Result<int> AddFile(const std::string& path, DirectMode direct) override;
  bool is_direct(int file) const override { return inner_->is_direct(file); }
  Status Submit(std::span<const ReadOp> ops) override;
  size_t Wait(std::span<ReadCompletion> out, size_t min_completions, int timeout_ms) override {
    return inner_->Wait(out, min_completions, timeout_ms);
  }
  size_t in_flight() const override { return inner_->in_flight(); }
  std::string name() const override { return inner_->name(); }

 private:
  std::unique_ptr<IoEngine> inner_;
  mutable std::mutex mu_;
  bool recording_ = false;
  std::vector<std::string> paths_;  // (files) by the inner engine's index
  std::vector<TracedRead> reads_;
};

}  // namespace mt
