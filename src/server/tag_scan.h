// Small text scans shared by the output splitters (tool_calls, reasoning), which look for
// tags in text that arrives in pieces.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string_view>

namespace mt::server {

inline bool IsAsciiSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// The length of the longest tail of `s` that `tag` starts with, shorter than `tag`: a tag
// that the stream may have cut, to hold back until the next piece says.
inline size_t PartialTagLength(std::string_view s, std::string_view tag) {
  for (size_t k = std::min(s.size(), tag.size() - 1); k > 0; --k) {
    if (tag.substr(0, k) == s.substr(s.size() - k)) return k;
  }
  return 0;
}

}  // namespace mt::server
