// MT_CHECK: an internal invariant. A failure is a bug in moetier, never bad input, so it
// prints the condition and location and aborts. Input errors are Status values instead.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace mt::internal {
[[noreturn]] inline void CheckFailed(const char* cond, const char* file, int line,
                                     const char* msg) {
  std::fprintf(stderr, "moetier: internal error: check failed: %s (%s:%d)%s%s\n", cond, file, line,
               msg[0] ? ": " : "", msg);
  std::abort();
}
}  // namespace mt::internal

#define MT_CHECK(cond)                                                       \
  do {                                                                       \
    if (!(cond)) ::mt::internal::CheckFailed(#cond, __FILE__, __LINE__, ""); \
  } while (0)

#define MT_CHECK_MSG(cond, msg)                                                 \
  do {                                                                          \
    if (!(cond)) ::mt::internal::CheckFailed(#cond, __FILE__, __LINE__, (msg)); \
  } while (0)
