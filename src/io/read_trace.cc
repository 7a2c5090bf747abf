#include "io/read_trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

namespace mt {
namespace {

constexpr std::string_view kHeader = "moetier-read-trace 1";

// The next space-separated field of `rest` (which loses it and the space after it).
std::string_view NextField(std::string_view& rest) {
  const size_t space = rest.find(' ');
  std::string_view field = rest.substr(0, space);
  rest = space == std::string_view::npos ? std::string_view() : rest.substr(space + 1);
  return field;
}

bool ParseU64(std::string_view s, uint64_t* out) {
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

Result<std::string> FormatReadTrace(const ReadTrace& trace) {
  std::string out = fmt::format("{}\n", kHeader);
  for (size_t i = 0; i < trace.files.size(); ++i) {
    if (trace.files[i].find_first_of("\r\n") != std::string::npos) {
      return InvalidArgument("read trace: the path of file {} holds a line break", i);
    }
    out += fmt::format("file {} {}\n", i, trace.files[i]);
  }
  for (const TracedRead& r : trace.reads) {
    out += fmt::format("read {} {} {}\n", r.file, r.offset, r.length);
  }
  return out;
}

Result<ReadTrace> ParseReadTrace(std::string_view text) {
  ReadTrace trace;
  uint64_t line_no = 0;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    ++line_no;
    if (line_no == 1) {
      if (line != kHeader) {
        return Corrupt("read trace line 1: expected '{}', not a moetier read trace", kHeader);
      }
      continue;
    }
    if (line.empty()) continue;
    std::string_view rest = line;
    const std::string_view kind = NextField(rest);
    if (kind == "file") {
      uint64_t index = 0;
      if (!ParseU64(NextField(rest), &index) || index != trace.files.size()) {
        return Corrupt("read trace line {}: expected file index {}", line_no, trace.files.size());
      }
      if (rest.empty()) return Corrupt("read trace line {}: file {} has no path", line_no, index);
      trace.files.emplace_back(rest);
    } else if (kind == "read") {
      uint64_t file = 0, offset = 0, length = 0;
      if (!ParseU64(NextField(rest), &file) || !ParseU64(NextField(rest), &offset) ||
          !ParseU64(rest, &length)) {
        return Corrupt("read trace line {}: expected 'read FILE OFFSET LENGTH'", line_no);
      }
      if (file >= trace.files.size()) {
        return Corrupt("read trace line {}: file index {} is not defined", line_no, file);
      }
      if (length == 0 || length > kMaxReadLength) {
        return Corrupt("read trace line {}: length {} is not in 1 .. {}", line_no, length,
                       kMaxReadLength);
      }
      trace.reads.push_back({static_cast<uint32_t>(file), offset, length});
    } else {
      return Corrupt("read trace line {}: unknown item '{}'", line_no,
                     kind.substr(0, std::min<size_t>(kind.size(), 40)));
    }
  }
  if (line_no == 0) return Corrupt("read trace: empty");
  return trace;
}

void TracingEngine::SetRecording(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  if (on) reads_.clear();
  recording_ = on;
}

ReadTrace TracingEngine::trace() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ReadTrace{paths_, reads_};
}

Result<int> TracingEngine::AddFile(const std::string& path, DirectMode direct) {
  Result<int> index = inner_->AddFile(path, direct);
  if (index.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (paths_.size() <= static_cast<size_t>(index.value())) paths_.resize(index.value() + 1);
    paths_[index.value()] = path;
  }
  return index;
}

Status TracingEngine::Submit(std::span<const ReadOp> ops) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (recording_) {
      for (const ReadOp& op : ops) {
        // An op the engine will refuse (unknown file, bad length) read nothing: left out.
        const bool known = op.file >= 0 && static_cast<size_t>(op.file) < paths_.size();
        if (!known || op.length == 0 || op.length > kMaxReadLength) continue;
        reads_.push_back({static_cast<uint32_t>(op.file), op.offset, op.length});
      }
    }
  }
  return inner_->Submit(ops);
}

}  // namespace mt
