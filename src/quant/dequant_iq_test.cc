// Golden blocks of the IQ lattice types: bytes written by hand from the ggml format
// definitions, each expected value derived in the comments from ggml-common.h's grid entries
// (quoted). The same blocks are in tests/reference/dequant_iq_test.py for the numpy reference.
// (Both dequantizers were checked bit-exact against ggml's dequantize_row_iq* on 16384 random
// blocks per type when they were written.)
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "quant/blocks_iq.h"
#include "quant/dequant.h"
#include "quant/quant_test_util.h"

namespace mt {
namespace {

using testing_quant::Dequant;
using testing_quant::Put16;

template <size_t N>
void Put32(std::array<uint8_t, N>& b, size_t off, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[off + i] = static_cast<uint8_t>(v >> (8 * i));
}

constexpr GgmlType kIqTypes[] = {GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS, GgmlType::kIQ2_S,
                                 GgmlType::kIQ3_XXS, GgmlType::kIQ3_S,  GgmlType::kIQ1_S,
                                 GgmlType::kIQ1_M};

TEST(DequantIq, CanDequantizeAllSeven) {
  for (GgmlType t : kIqTypes) EXPECT_TRUE(CanDequantize(t)) << TypeName(t);
}

TEST(DequantIq, BlockStructsMatchGgmlSizes) {
  EXPECT_EQ(sizeof(BlockIq2Xxs), TraitsOf(GgmlType::kIQ2_XXS).type_size);
  EXPECT_EQ(sizeof(BlockIq2Xs), TraitsOf(GgmlType::kIQ2_XS).type_size);
  EXPECT_EQ(sizeof(BlockIq2S), TraitsOf(GgmlType::kIQ2_S).type_size);
  EXPECT_EQ(sizeof(BlockIq3Xxs), TraitsOf(GgmlType::kIQ3_XXS).type_size);
  EXPECT_EQ(sizeof(BlockIq3S), TraitsOf(GgmlType::kIQ3_S).type_size);
  EXPECT_EQ(sizeof(BlockIq1S), TraitsOf(GgmlType::kIQ1_S).type_size);
  EXPECT_EQ(sizeof(BlockIq1M), TraitsOf(GgmlType::kIQ1_M).type_size);
}

TEST(DequantIq, Iq2Xxs) {
  // d = 1 (0x3C00). 32-block 0: w0 (bytes 2..5) = grid indices [1, 0, 0, 0]; w1 (bytes 6..9)
  // = group 0's 7-bit signs 0b0000001 (element 0 negative; an odd count, so the parity bit
  // makes element 7 negative too) | ls 3 << 28 -> db = (0.5 + 3) * 0.25 = 0.875.
  // iq2xxs_grid[1] = 0x080808080808082b: coordinate 0 = 43, the rest 8. Group 1: index 0
  // (all 8), no signs.
  std::array<uint8_t, 66> b{};
  Put16(b, 0, 0x3C00);
  b[2] = 1;
  Put32(b, 6, 1u | 3u << 28);
  const auto y = Dequant(GgmlType::kIQ2_XXS, b);
  EXPECT_EQ(y[0], -37.625f);  // -0.875 * 43
  EXPECT_EQ(y[1], 7.0f);
  EXPECT_EQ(y[6], 7.0f);
  EXPECT_EQ(y[7], -7.0f);  // the parity sign
  EXPECT_EQ(y[8], 7.0f);
  // 32-block 1 (elements 32..): all-zero words: index 0, ls 0 -> db = 0.125, all 8 -> 1.
  EXPECT_EQ(y[32], 1.0f);
}

TEST(DequantIq, Iq2Xs) {
  // d = 1. qs[0] = index 2 | signs 0b0000011 << 9 = 0x0602 (two minus signs: parity 0).
  // scales[0] = 0x51: ls 1 for elements 0..15 (db 0.375), 5 for 16..31 (db 1.375).
  // iq2xs_grid[2] = 0x0808080808081919: coordinates 0, 1 = 25, the rest 8.
  std::array<uint8_t, 74> b{};
  Put16(b, 0, 0x3C00);
  Put16(b, 2, 0x0602);
  b[66] = 0x51;
  const auto y = Dequant(GgmlType::kIQ2_XS, b);
  EXPECT_EQ(y[0], -9.375f);
  EXPECT_EQ(y[1], -9.375f);
  EXPECT_EQ(y[2], 3.0f);
  EXPECT_EQ(y[7], 3.0f);
  EXPECT_EQ(y[16], 11.0f);  // group 2: index 0 (all 8) * 1.375
}

TEST(DequantIq, Iq2S) {
  // d = 2. Group 5 (elements 40..47: 32-block 1, l = 1): index = qs[5] | ((qh[1] >> 2) & 3)
  // << 8 = 3 | 1 << 8 = 259; iq2s_grid[259] = 0x08190819192b1908 -> 8 25 43 25 25 8 25 8.
  // Sign byte qs[32 + 5] = 0x81: elements 0 and 7 negative (8 stored bits, no parity).
  // scales[1] = 0x20: ls 0 for elements 32..47 -> db = 2 * 0.5 * 0.25 = 0.25.
  std::array<uint8_t, 82> b{};
  Put16(b, 0, 0x4000);
  b[2 + 5] = 3;
  b[2 + 37] = 0x81;
  b[66 + 1] = 0x04;
  b[74 + 1] = 0x20;
  const auto y = Dequant(GgmlType::kIQ2_S, b);
  EXPECT_EQ(y[40], -2.0f);
  EXPECT_EQ(y[41], 6.25f);
  EXPECT_EQ(y[42], 10.75f);
  EXPECT_EQ(y[45], 2.0f);
  EXPECT_EQ(y[47], -2.0f);
  EXPECT_EQ(y[48], 2.0f * 2.5f * 0.25f * 8.0f);  // elements 48..63: ls 2, index 0
}

TEST(DequantIq, Iq3Xxs) {
  // d = 1. Group 0: qs[0] = 1 (elements 0..3: iq3xxs_grid[1] = 0x04040414 -> 20 4 4 4),
  // qs[1] = 0 (elements 4..7: all 4). The word at qs + 64 (byte 66): signs 0b0000100
  // (element 2; an odd count, so element 7 too), ls 1 -> db = (0.5 + 1) * 0.5 = 0.75.
  std::array<uint8_t, 98> b{};
  Put16(b, 0, 0x3C00);
  b[2] = 1;
  Put32(b, 66, 4u | 1u << 28);
  const auto y = Dequant(GgmlType::kIQ3_XXS, b);
  EXPECT_EQ(y[0], 15.0f);
  EXPECT_EQ(y[1], 3.0f);
  EXPECT_EQ(y[2], -3.0f);
  EXPECT_EQ(y[4], 3.0f);
  EXPECT_EQ(y[7], -3.0f);
}

TEST(DequantIq, Iq3S) {
  // d = 0.5. Group 0: qs[0] = 5 (iq3s_grid[5] = 0x01010301 -> 1 3 1 1); qs[1] = 0 with its
  // 9th bit from bit 1 of qh[0] -> index 256 (iq3s_grid[256] = 0x05090507 -> 7 5 9 5).
  // signs[0] = 0x10: element 4 negative. scales[0] = 0x02: ls 2 for elements 0..31 ->
  // db = 0.5 * (1 + 2 * 2) = 2.5.
  std::array<uint8_t, 110> b{};
  Put16(b, 0, 0x3800);
  b[2] = 5;
  b[66] = 0x02;
  b[74] = 0x10;
  b[106] = 0x02;
  const auto y = Dequant(GgmlType::kIQ3_S, b);
  EXPECT_EQ(y[0], 2.5f);
  EXPECT_EQ(y[1], 7.5f);
  EXPECT_EQ(y[4], -17.5f);
  EXPECT_EQ(y[5], 12.5f);
  EXPECT_EQ(y[6], 22.5f);
}

TEST(DequantIq, Iq1S) {
  // d = 1. qh[0] = ls 2 << 12 | 0x8000: dl = 5, delta -1/8 for elements 0..31. Group 0:
  // index 0 (iq1s_grid[0] = all -1). Group 1: qs[1] = 2 (iq1s_grid[2] = 0xffffffffffff0000 ->
  // 0 0 -1 -1 -1 -1 -1 -1). 32-block 1: qh[1] = 0 -> dl = 1, delta +1/8, index 0.
  std::array<uint8_t, 50> b{};
  Put16(b, 0, 0x3C00);
  b[2 + 1] = 2;
  Put16(b, 34, 2 << 12 | 0x8000);
  const auto y = Dequant(GgmlType::kIQ1_S, b);
  EXPECT_EQ(y[0], -5.625f);  // 5 * (-1 - 0.125)
  EXPECT_EQ(y[8], -0.625f);
  EXPECT_EQ(y[9], -0.625f);
  EXPECT_EQ(y[10], -5.625f);
  EXPECT_EQ(y[32], -0.875f);  // 1 * (-1 + 0.125)
}

TEST(DequantIq, Iq1M) {
  // d = 1 = 0x3C00: its nibbles 0, 0, 0xC, 0x3 sit in the tops of scale words 0..3.
  // s[0] = 3 | 1 << 3: ls 3 for elements 0..15 (dl 7), 1 for 16..31 (dl 3). qh[0] = 0x80:
  // group 0 index 0 (all -1), delta +1/8; group 1 delta -1/8, index qs[1] = 2 (0 0 -1 ...).
  // Group 2 (qh[1] = 0): index 0, delta +1/8.
  std::array<uint8_t, 56> b{};
  b[1] = 2;
  b[32] = 0x80;
  Put16(b, 48, 3 | 1 << 3);
  Put16(b, 52, 0xC000);
  Put16(b, 54, 0x3000);
  const auto y = Dequant(GgmlType::kIQ1_M, b);
  EXPECT_EQ(y[0], -6.125f);
  EXPECT_EQ(y[7], -6.125f);
  EXPECT_EQ(y[8], -0.875f);
  EXPECT_EQ(y[10], -7.875f);
  EXPECT_EQ(y[16], -2.625f);
}

TEST(DequantIq, EachBlockUsesItsOwnScaleAndNaNScalesGiveNaN) {
  // Two IQ2_XXS blocks of zeros but the scales: every element is db * 8 = d / 8 * 8 = d;
  // then a NaN d (0x7E00) makes its whole block NaN (as for the K-quants), not the other.
  std::array<uint8_t, 132> b{};
  Put16(b, 0, 0x4000);   // 2
  Put16(b, 66, 0x7E00);  // NaN
  const auto y = Dequant(GgmlType::kIQ2_XXS, b);
  for (int i = 0; i < 256; ++i) ASSERT_EQ(y[i], 2.0f) << i;
  for (int i = 256; i < 512; ++i) ASSERT_TRUE(std::isnan(y[i])) << i;
}

}  // namespace
}  // namespace mt
