// Which sanitizer this build runs under (CMake MT_SANITIZE, docs/testing.md), so the few
// tests whose timing or memory assumptions a sanitizer breaks can skip in one visible way.
#pragma once

namespace mt {

#if defined(MT_SANITIZE_ADDRESS)
inline constexpr const char* kSanitizer = "address";  // ASan + UBSan
#elif defined(MT_SANITIZE_THREAD)
inline constexpr const char* kSanitizer = "thread";  // TSan
#else
inline constexpr const char* kSanitizer = nullptr;  // not sanitized
#endif

// True in an ASan (shadow memory, redzones, quarantine) build.
inline constexpr bool kAddressSanitizer = kSanitizer != nullptr && kSanitizer[0] == 'a';
// True in a TSan build (5-15x slower, shadow memory).
inline constexpr bool kThreadSanitizer = kSanitizer != nullptr && kSanitizer[0] == 't';

}  // namespace mt
