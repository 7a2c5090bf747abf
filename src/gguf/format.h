// Internal to src/gguf: on-disk constants of GGUF shared by the reader and the writer, so
// the writer never produces a file the reader refuses. Facts from ggml's gguf.cpp and
// gguf-py (gguf_writer.py), not from moetier's choices, except where marked "limit".
#pragma once

#include <cstdint>
#include <string_view>

#include "gguf/gguf.h"

namespace mt::gguf_format {

inline constexpr uint8_t kMagic[4] = {'G', 'G', 'U', 'F'};
inline constexpr uint32_t kVersionWritten = 3;
inline constexpr uint32_t kMinVersion = 2;  // v1 used 32-bit counts and is not supported
inline constexpr uint32_t kMaxVersion = 3;
inline constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS

// Limit: how deep arrays of arrays may nest (1 = an array of scalars or strings).
inline constexpr uint32_t kMaxArrayDepth = 8;

inline constexpr std::string_view kKeyAlignment = "general.alignment";            // u32
inline constexpr std::string_view kKeySplitNo = "split.no";                       // u16, from 0
inline constexpr std::string_view kKeySplitCount = "split.count";                 // u16
inline constexpr std::string_view kKeySplitTensorsCount = "split.tensors.count";  // i32

inline constexpr uint32_t kMaxSplitCount = 65535;  // split.count is a u16

// The highest value type id (GgufType::kFloat64).
inline constexpr uint32_t kMaxValueTypeId = 12;

// The fewest bytes one encoded value of `type` takes: used to refuse a count larger than
// the bytes left before allocating for it. A string is at least its u64 length; an array
// element that is itself an array is at least its u32 type and u64 count.
inline uint64_t MinEncodedSize(GgufType type) {
  switch (type) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
    case GgufType::kString:
      return 8;
    case GgufType::kArray:
      return 12;
  }
  return 1;
}

// Rounds `x` up to a multiple of `alignment` (a power of two). The caller keeps `x` far
// enough below 2^64 (file offsets are).
inline uint64_t AlignUp(uint64_t x, uint64_t alignment) {
  return (x + alignment - 1) & ~(alignment - 1);
}

inline bool IsPowerOfTwo(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

}  // namespace mt::gguf_format
