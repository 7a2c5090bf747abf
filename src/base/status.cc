#include "base/status.h"

namespace mt {

std::string Printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 80)) {
    out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
  }
  if (s.size() > 80) out += "...";
  return out;
}

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInvalidArgument:
      return "invalid argument";
    case StatusCode::kNotFound:
      return "not found";
    case StatusCode::kCorrupt:
      return "corrupt";
    case StatusCode::kIoError:
      return "I/O error";
    case StatusCode::kOutOfRange:
      return "out of range";
    case StatusCode::kResourceExhausted:
      return "resource exhausted";
    case StatusCode::kUnimplemented:
      return "unimplemented";
    case StatusCode::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  // A message that already starts with this context (an error naming its own file) keeps
  // it once.
  if (message_.size() > context.size() + 1 && std::string_view(message_).starts_with(context) &&
      message_.compare(context.size(), 2, ": ") == 0) {
    return *this;
  }
  return Status(code_, fmt::format("{}: {}", context, message_));
}

}  // namespace mt
