// Status and Result<T>: errors from the outside world (files, GGUF, I/O, user input) are
// values that carry their context in the message ("file.gguf: offset 1234: ..."). Broken
// internal invariants use MT_CHECK (check.h) instead.
#pragma once

#include <fmt/format.h>

#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace mt {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad user input: flags, prompts, requests
  kNotFound,         // a file, key or tensor that is not there
  kCorrupt,          // a file whose bytes break its format
  kIoError,          // the OS refused or failed a read or write
  kOutOfRange,       // a size or index past a limit
  kResourceExhausted,
  kUnimplemented,
  kCancelled,
};

const char* StatusCodeName(StatusCode code);

// A string from the outside world made fit for a one-line message: control characters
// become '?', and more than 80 bytes end in "...".
std::string Printable(std::string_view s);

// Cheap when ok (no allocation). The message is one line, context first.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Returns a copy whose message is "context: message", to add where-information
  // (file, layer, expert) as an error travels up; a message that already starts with
  // "context: " is returned unchanged, so a file is not named twice.
  Status WithContext(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

template <typename... Args>
Status InvalidArgument(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kInvalidArgument, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status NotFound(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kNotFound, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status Corrupt(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kCorrupt, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status IoError(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kIoError, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status OutOfRange(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kOutOfRange, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status Unimplemented(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kUnimplemented, fmt::format(f, std::forward<Args>(args)...));
}

// Either a T or a non-ok Status. Accessing value() of an error aborts (a caller bug).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    if (std::get<Status>(v_).ok()) std::abort();   // an ok Status carries no value
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return Get(); }
  const T& value() const& { return const_cast<Result*>(this)->Get(); }
  T&& value() && { return std::move(Get()); }
  T* operator->() { return &Get(); }
  const T* operator->() const { return &const_cast<Result*>(this)->Get(); }
  T& operator*() & { return Get(); }

 private:
  T& Get() {
    if (!ok()) std::abort();
    return std::get<T>(v_);
  }
  std::variant<T, Status> v_;
};

}  // namespace mt

// Returns early with the status of `expr` when it is not ok. Declares nothing in the caller.
#define MT_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::mt::Status mt_status_ = (expr);        \
    if (!mt_status_.ok()) return mt_status_; \
  } while (0)

// The value of `expr` (a Result<T>), or returns its status from the calling function when
// not ok. A GNU statement expression (clang and gcc): the caller writes the declaration,
// so nothing is declared behind its back (STYLE rule 10): `Foo x = MT_TRY(MakeFoo());`
// The enclosing function returns Status or any Result<U>. The value is moved out, not copied.
#define MT_TRY(expr)                            \
  ({                                            \
    auto mt_try_ = (expr);                      \
    if (!mt_try_.ok()) return mt_try_.status(); \
    std::move(mt_try_).value();                 \
  })
