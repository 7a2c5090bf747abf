// Minimal leveled logging to stderr. User-facing output of commands goes to stdout
// through fmt::print; this is for notices and diagnostics.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <utility>

namespace mt {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// Messages below this level are dropped. Not thread-safe to change while logging.
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();

template <typename... Args>
void Log(LogLevel level, fmt::format_string<Args...> f, Args&&... args) {
  if (level < GetLogLevel()) return;
  static constexpr const char* kPrefix[] = {"debug: ", "", "warning: ", "error: "};
  fmt::print(stderr, "moetier: {}{}\n", kPrefix[static_cast<int>(level)],
             fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace mt
