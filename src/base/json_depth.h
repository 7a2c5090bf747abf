// How deeply JSON text nests, so that JSON from outside can be refused before it is parsed.
// nlohmann's parser and destructor are iterative, but copying a value and dump() recurse once
// per level: a few hundred kilobytes of "[[[[..." overflow the stack there.
#pragma once

#include <cstddef>
#include <string_view>

namespace mt {

// The nesting allowed wherever JSON comes from a request, a model's output or a command line:
// far past any real tool schema or response format (a dozen levels), far below the stack.
inline constexpr size_t kMaxJsonDepth = 256;

// The deepest nesting of arrays and objects in `text`; brackets inside strings do not count.
// Text that is not JSON gets a number too, and the parser's own error then decides.
size_t JsonDepth(std::string_view text);

// Json::parse without exceptions (`Json`: nlohmann's json or ordered_json): a discarded value
// for text that is not JSON or nests deeper than kMaxJsonDepth.
template <class Json>
Json ParseJsonWithinDepth(std::string_view text) {
  if (JsonDepth(text) > kMaxJsonDepth) return Json(Json::value_t::discarded);
  return Json::parse(text, nullptr, /*allow_exceptions=*/false);
}

}  // namespace mt
