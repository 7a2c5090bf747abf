// Which sanitizer this translation unit is built with (CMake MT_SANITIZE, docs/testing.md),
// so the few tests whose assumptions a sanitizer breaks skip in one visible way.
#pragma once

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MT_ASAN 1  // ASan (+ UBSan in MT_SANITIZE=address)
#endif
#if __has_feature(thread_sanitizer)
#define MT_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(MT_ASAN)
#define MT_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__) && !defined(MT_TSAN)
#define MT_TSAN 1
#endif

namespace mt {

#if defined(MT_ASAN)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#if defined(MT_TSAN)
inline constexpr bool kThreadSanitizer = true;
#else
inline constexpr bool kThreadSanitizer = false;
#endif

}  // namespace mt
