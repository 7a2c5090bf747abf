#include "base/log.h"

#include <atomic>

namespace mt {
namespace {
std::atomic<LogLevel> g_level{LogLevel::kInfo};
}
void SetLogLevel(LogLevel level) { g_level.store(level); }
LogLevel GetLogLevel() { return g_level.load(); }
}  // namespace mt
