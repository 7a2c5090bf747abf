// The ggml tensor types as stored in GGUF: type ids, block sizes and bytes per block,
// bit-exact with ggml (ggml.h / ggml-common.h). Every type a GGUF file may name is here,
// so a reader can size any tensor; which types moetier can compute with is a separate
// question (quant/dequant.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace mt {

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
  kNVFP4 = 40,
  kQ1_0 = 41,
  kQ2_0 = 42,
};

struct GgmlTypeTraits {
  std::string_view name;     // ggml's name: "f32", "q4_K", "mxfp4"
  uint32_t block_size;       // elements per block
  uint32_t type_size;        // bytes per block
  bool dequantized = false;  // moetier reads it (quant/dequant.h) and computes with it
  bool quantized = false;    // moetier writes it (quant/quantize.h: synth, repacking)
};

// Returns the traits of a type id read from a file, or nullopt for an id ggml does not
// define (including the removed ones: 4, 5, 31-33, 36-38).
std::optional<GgmlTypeTraits> TraitsOfTypeId(uint32_t id);

// Traits of a known type. Never fails.
const GgmlTypeTraits& TraitsOf(GgmlType type);

inline std::string_view TypeName(GgmlType type) { return TraitsOf(type).name; }

// Parses ggml's type name, case-insensitive ("q4_k" == "q4_K"). nullopt if unknown.
std::optional<GgmlType> TypeFromName(std::string_view name);

// Bytes of a row of `n_elements`; the caller ensures n_elements % block_size == 0.
inline uint64_t RowBytes(GgmlType type, uint64_t n_elements) {
  const GgmlTypeTraits& t = TraitsOf(type);
  return n_elements / t.block_size * t.type_size;
}

}  // namespace mt
