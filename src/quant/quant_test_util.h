// Helpers shared by the quant tests: hand-built blocks in, floats out.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "quant/dequant.h"
#include "quant/ggml_type.h"

namespace mt::testing_quant {

// Dequantizes the whole blocks in `bytes` (checking that they are whole blocks of `type`).
template <size_t N>
std::vector<float> Dequant(GgmlType type, const std::array<uint8_t, N>& bytes) {
  const GgmlTypeTraits& t = TraitsOf(type);
  const int64_t n = static_cast<int64_t>(N / t.type_size * t.block_size);
  EXPECT_EQ(RowBytes(type, n), N) << "test block has the wrong byte count";
  std::vector<float> out(n, -12345.0f);
  DequantizeRow(type, bytes.data(), out.data(), n);
  return out;
}

// Little-endian helper: writes a 16-bit value at bytes[off], bytes[off + 1].
template <size_t N>
void Put16(std::array<uint8_t, N>& bytes, size_t off, uint16_t v) {
  bytes[off] = static_cast<uint8_t>(v & 0xFF);
  bytes[off + 1] = static_cast<uint8_t>(v >> 8);
}

}  // namespace mt::testing_quant
