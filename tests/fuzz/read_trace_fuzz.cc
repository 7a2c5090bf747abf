// Fuzzes the read-trace reader (src/io/read_trace.cc): any text must give a trace or a
// one-line Status, never a crash; a trace that parses writes back to text that parses to
// the same trace.
#include <cstdint>
#include <string>
#include <string_view>

#include "io/read_trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  mt::Result<mt::ReadTrace> r = mt::ParseReadTrace(text);
  if (!r.ok()) {
    if (r.status().message().find('\n') != std::string::npos) __builtin_trap();
    return 0;
  }
  for (const mt::TracedRead& read : r->reads) {
    if (read.file >= r->files.size() || read.length == 0 || read.length > mt::kMaxReadLength) {
      __builtin_trap();
    }
  }
  mt::Result<std::string> again = mt::FormatReadTrace(*r);
  if (!again.ok()) return 0;  // a path with a carriage return
  mt::Result<mt::ReadTrace> back = mt::ParseReadTrace(*again);
  if (!back.ok() || back->files != r->files || back->reads.size() != r->reads.size()) {
    __builtin_trap();
  }
  for (size_t i = 0; i < r->reads.size(); ++i) {
    const mt::TracedRead &a = r->reads[i], &b = back->reads[i];
    if (a.file != b.file || a.offset != b.offset || a.length != b.length) __builtin_trap();
  }
  return 0;
}
