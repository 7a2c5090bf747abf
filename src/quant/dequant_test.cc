// Golden blocks: bytes written by hand from the ggml format definitions (ggml-common.h,
// ggml-quants.c), with each expected value derived in the comments. These pin the layout
// independently of blocks.h: the blocks are raw byte arrays, not structs.
#include "quant/dequant.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <vector>

#include "quant/blocks.h"
#include "quant/quant_test_util.h"

namespace mt {
namespace {

using testing_quant::Dequant;
using testing_quant::Put16;

TEST(DequantGolden, CanDequantizeExactlyTheTwelve) {
  for (GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0,
                     GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                     GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kMXFP4}) {
    EXPECT_TRUE(CanDequantize(t)) << TypeName(t);
  }
  for (GgmlType t : {GgmlType::kQ8_1, GgmlType::kQ8_K, GgmlType::kI8, GgmlType::kNVFP4}) {
    EXPECT_FALSE(CanDequantize(t)) << TypeName(t);
  }
}

TEST(DequantGolden, F32) {
  // 0x3FC00000 = 1.5 (exponent 127, mantissa .1b); 0xC0000000 = -2.0. Little-endian bytes.
  const std::array<uint8_t, 8> b = {0x00, 0x00, 0xC0, 0x3F, 0x00, 0x00, 0x00, 0xC0};
  const auto y = Dequant(GgmlType::kF32, b);
  EXPECT_EQ(y[0], 1.5f);
  EXPECT_EQ(y[1], -2.0f);
}

TEST(DequantGolden, F16) {
  // 0x3C00: exp 15 (bias 15), mant 0 -> 1.0.        0xC000: sign, exp 16 -> -2.0.
  // 0x3555: exp 13, mant 0x155 = 341 -> (1 + 341/1024) / 4 = 1365/4096 = 0.333251953125.
  // 0x0001: smallest subnormal, 2^-24.               0x7BFF: largest normal, 65504.
  std::array<uint8_t, 10> b{};
  Put16(b, 0, 0x3C00);
  Put16(b, 2, 0xC000);
  Put16(b, 4, 0x3555);
  Put16(b, 6, 0x0001);
  Put16(b, 8, 0x7BFF);
  const auto y = Dequant(GgmlType::kF16, b);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -2.0f);
  EXPECT_EQ(y[2], 0.333251953125f);
  EXPECT_EQ(y[3], 0x1p-24f);
  EXPECT_EQ(y[4], 65504.0f);
}

TEST(DequantGolden, Bf16) {
  // bf16 is the top half of an f32: 0x3F80 -> 0x3F800000 = 1.0; 0xC040 -> 0xC0400000 = -3.0;
  // 0x4049 -> 0x40490000 = 2 * (1 + 0x49/128) = 2 * 1.5703125 = 3.140625.
  std::array<uint8_t, 6> b{};
  Put16(b, 0, 0x3F80);
  Put16(b, 2, 0xC040);
  Put16(b, 4, 0x4049);
  const auto y = Dequant(GgmlType::kBF16, b);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -3.0f);
  EXPECT_EQ(y[2], 3.140625f);
}

TEST(DequantGolden, Q8_0) {
  // Block 0: d = 0x3800 = 0.5. x[i] = d * qs[i] with qs as int8.
  //   qs[0] = 0x7F = 127 -> 63.5; qs[1] = 0x80 = -128 -> -64; qs[5] = 0xFD = -3 -> -1.5;
  //   qs[31] = 1 -> 0.5; the rest 0 -> 0.
  // Block 1: d = 0xB400 = -0.25 (negative scale). qs[0] = 4 -> -1.0; qs[1] = 0xF8 = -8 -> 2.0.
  std::array<uint8_t, 68> b{};
  Put16(b, 0, 0x3800);
  b[2 + 0] = 0x7F;
  b[2 + 1] = 0x80;
  b[2 + 5] = 0xFD;
  b[2 + 31] = 0x01;
  Put16(b, 34, 0xB400);
  b[36 + 0] = 0x04;
  b[36 + 1] = 0xF8;
  const auto y = Dequant(GgmlType::kQ8_0, b);
  EXPECT_EQ(y[0], 63.5f);
  EXPECT_EQ(y[1], -64.0f);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[5], -1.5f);
  EXPECT_EQ(y[31], 0.5f);
  EXPECT_EQ(y[32], -1.0f);
  EXPECT_EQ(y[33], 2.0f);
  EXPECT_EQ(y[34], 0.0f);
}

TEST(DequantGolden, Q4_0) {
  // Block 0: d = 0x3C00 = 1.0; x = (q - 8) * d; qs[j] low nibble = element j, high = j + 16.
  //   qs[0] = 0x21 -> element 0 = (1 - 8) = -7, element 16 = (2 - 8) = -6.
  //   qs[15] = 0xF0 -> element 15 = (0 - 8) = -8, element 31 = (15 - 8) = 7.
  //   qs[3] = 0x88 -> elements 3 and 19 = 0.  qs[1] = 0 -> elements 1, 17 = -8.
  // Block 1: d = 0xC000 = -2.0; qs[0] = 0x21 -> element 32 = -7 * -2 = 14, element 48 = 12.
  std::array<uint8_t, 36> b{};
  Put16(b, 0, 0x3C00);
  b[2 + 0] = 0x21;
  b[2 + 15] = 0xF0;
  b[2 + 3] = 0x88;
  Put16(b, 18, 0xC000);
  b[20 + 0] = 0x21;
  const auto y = Dequant(GgmlType::kQ4_0, b);
  EXPECT_EQ(y[0], -7.0f);
  EXPECT_EQ(y[16], -6.0f);
  EXPECT_EQ(y[15], -8.0f);
  EXPECT_EQ(y[31], 7.0f);
  EXPECT_EQ(y[3], 0.0f);
  EXPECT_EQ(y[19], 0.0f);
  EXPECT_EQ(y[1], -8.0f);
  EXPECT_EQ(y[17], -8.0f);
  EXPECT_EQ(y[32], 14.0f);
  EXPECT_EQ(y[48], 12.0f);
}

TEST(DequantGolden, Q4_1) {
  // d = 0x3800 = 0.5, m = 0xBC00 = -1.0; x = q * d + m.
  //   qs[0] = 0xF0 -> element 0 = 0 * 0.5 - 1 = -1, element 16 = 15 * 0.5 - 1 = 6.5.
  //   qs[1] = 0x13 -> element 1 = 3 * 0.5 - 1 = 0.5, element 17 = 1 * 0.5 - 1 = -0.5.
  // Block 1: d = 0x3400 = 0.25, m = 0x4500 = 5.0 (exp 17 -> 4, mant 0x100 -> 1.25).
  //   qs[0] = 0x0C -> element 32 = 12 * 0.25 + 5 = 8, element 48 = 5.
  std::array<uint8_t, 40> b{};
  Put16(b, 0, 0x3800);
  Put16(b, 2, 0xBC00);
  b[4 + 0] = 0xF0;
  b[4 + 1] = 0x13;
  Put16(b, 20, 0x3400);
  Put16(b, 22, 0x4500);
  b[24 + 0] = 0x0C;
  const auto y = Dequant(GgmlType::kQ4_1, b);
  EXPECT_EQ(y[0], -1.0f);
  EXPECT_EQ(y[16], 6.5f);
  EXPECT_EQ(y[1], 0.5f);
  EXPECT_EQ(y[17], -0.5f);
  EXPECT_EQ(y[2], -1.0f);
  EXPECT_EQ(y[32], 8.0f);
  EXPECT_EQ(y[48], 5.0f);
}

TEST(DequantGolden, Q5_0) {
  // d = 0x3800 = 0.5; x = (q - 16) * d; q = low nibble | (bit i of qh as LE uint32) << 4.
  // qh = {0x01, 0x80, 0x01, 0x80} = 0x80018001: bits 0, 15, 16, 31 set.
  //   qs[0] = 0x3A: element 0 = (10 | 16) - 16 = 10 -> 5.0; element 16 = (3 | 16) - 16 = 3
  //     -> 1.5.
  //   qs[15] = 0x5F: element 15 = (15 | 16) - 16 = 15 -> 7.5; element 31 = (5 | 16) - 16 = 5
  //     -> 2.5.
  //   qs[1] = 0x00: elements 1 and 17 have no high bit: -16 -> -8.0.
  //   qs[8] = 0x00: element 8 (qh[1] bit 0 = 0) -> -8.0; element 24 (qh[3] bit 0 = 0) -> -8.0.
  std::array<uint8_t, 22> b{};
  Put16(b, 0, 0x3800);
  b[2] = 0x01;
  b[3] = 0x80;
  b[4] = 0x01;
  b[5] = 0x80;
  b[6 + 0] = 0x3A;
  b[6 + 15] = 0x5F;
  const auto y = Dequant(GgmlType::kQ5_0, b);
  EXPECT_EQ(y[0], 5.0f);
  EXPECT_EQ(y[16], 1.5f);
  EXPECT_EQ(y[15], 7.5f);
  EXPECT_EQ(y[31], 2.5f);
  EXPECT_EQ(y[1], -8.0f);
  EXPECT_EQ(y[17], -8.0f);
  EXPECT_EQ(y[8], -8.0f);
  EXPECT_EQ(y[24], -8.0f);
}

TEST(DequantGolden, Q5_1) {
  // d = 0x3400 = 0.25, m = 0xC500 = -5.0; x = q * d + m, q = nibble | qh bit << 4.
  // qh = {0, 0, 0, 0x80}: only bit 31 (element 31).
  //   qs[15] = 0xF1: element 15 = 1 * 0.25 - 5 = -4.75; element 31 = (15 | 16) = 31 ->
  //     7.75 - 5 = 2.75.
  //   qs[0] = 0x00: elements 0 and 16 = -5.
  //   qs[7] = 0x77: element 7 = 7 * 0.25 - 5 = -3.25 and element 23 the same (bit 23 clear).
  std::array<uint8_t, 24> b{};
  Put16(b, 0, 0x3400);
  Put16(b, 2, 0xC500);
  b[7] = 0x80;
  b[8 + 15] = 0xF1;
  b[8 + 7] = 0x77;
  const auto y = Dequant(GgmlType::kQ5_1, b);
  EXPECT_EQ(y[15], -4.75f);
  EXPECT_EQ(y[31], 2.75f);
  EXPECT_EQ(y[0], -5.0f);
  EXPECT_EQ(y[16], -5.0f);
  EXPECT_EQ(y[7], -3.25f);
  EXPECT_EQ(y[23], -3.25f);
}

TEST(DequantGolden, Mxfp4) {
  // x = kvalues[code] * 2^(e - 128), kvalues = e2m1 doubled: 0 1 2 3 4 6 8 12, then negated.
  // Block 0: e = 127 -> 2^-1.
  //   qs[0] = 0xF7: element 0 = code 7 = 12 * 0.5 = 6.0; element 16 = code 15 = -12 * 0.5 = -6.
  //   qs[1] = 0x91: element 1 = code 1 -> 0.5; element 17 = code 9 -> -0.5.
  //   qs[2] = 0x5D: element 2 = code 13 = -6 * 0.5 = -3; element 18 = code 5 = 6 * 0.5 = 3.
  //   qs[3] = 0x08: element 3 = code 8 = "-0" -> 0; element 19 = code 0 -> 0.
  // Block 1: e = 130 -> 2^2 = 4. qs[0] = 0x02: element 32 = 2 * 4 = 8 (e2m1 1.0 * 2^3).
  // Block 2: e = 0 -> 2^-128 (f32 subnormal). qs[0] = 0x07: element 64 = 12 * 2^-128 =
  //   1.5 * 2^-125.
  // Block 3: e = 254 -> 2^126. qs[0] = 0x0A: element 96 = code 10 = -2 * 2^126 = -2^127.
  std::array<uint8_t, 68> b{};
  b[0] = 127;
  b[1 + 0] = 0xF7;
  b[1 + 1] = 0x91;
  b[1 + 2] = 0x5D;
  b[1 + 3] = 0x08;
  b[17] = 130;
  b[18] = 0x02;
  b[34] = 0;
  b[35] = 0x07;
  b[51] = 254;
  b[52] = 0x0A;
  const auto y = Dequant(GgmlType::kMXFP4, b);
  EXPECT_EQ(y[0], 6.0f);
  EXPECT_EQ(y[16], -6.0f);
  EXPECT_EQ(y[1], 0.5f);
  EXPECT_EQ(y[17], -0.5f);
  EXPECT_EQ(y[2], -3.0f);
  EXPECT_EQ(y[18], 3.0f);
  EXPECT_EQ(y[3], 0.0f);
  EXPECT_EQ(y[19], 0.0f);
  EXPECT_EQ(y[32], 8.0f);
  EXPECT_EQ(y[48], 0.0f);
  EXPECT_EQ(y[64], 0x1.8p-125f);
  EXPECT_EQ(y[96], -0x1p127f);
}

// Q4_K and Q5_K share the header and scale packing. d = 0x3C00 = 1.0, dmin = 0x3800 = 0.5.
// Chosen (sc, m) per sub-block; the rest are (0, 0):
//   s0 = (1, 2), s1 = (63, 0), s3 = (5, 63), s4 = (37, 58), s7 = (16, 1).
// 37 = 0b10'0101 (low 4 = 5, high 2 = 2); 58 = 0b11'1010 (low 4 = 10, high 2 = 3);
// 16 = 0b01'0000 (low 4 = 0, high 2 = 1).
// Packing (scales[0..11], byte offsets 4..15 of the block):
//   scales[0] = sc0 | (sc4 >> 4) << 6 = 1 | 2 << 6  = 0x81
//   scales[1] = sc1 | (sc5 >> 4) << 6 = 63          = 0x3F
//   scales[3] = sc3 | (sc7 >> 4) << 6 = 5 | 1 << 6  = 0x45
//   scales[4] = m0  | (m4 >> 4) << 6  = 2 | 3 << 6  = 0xC2
//   scales[7] = m3  | (m7 >> 4) << 6  = 63          = 0x3F
//   scales[8] = (sc4 & 15) | (m4 & 15) << 4 = 5 | 10 << 4 = 0xA5
//   scales[11] = (sc7 & 15) | (m7 & 15) << 4 = 0 | 1 << 4 = 0x10
// Effective (d * sc, dmin * m): s0 (1, 1), s1 (63, 0), s3 (5, 31.5), s4 (37, 29), s7 (16, 0.5).
template <size_t N>
void PutKScales(std::array<uint8_t, N>& b) {
  Put16(b, 0, 0x3C00);
  Put16(b, 2, 0x3800);
  b[4 + 0] = 0x81;
  b[4 + 1] = 0x3F;
  b[4 + 3] = 0x45;
  b[4 + 4] = 0xC2;
  b[4 + 7] = 0x3F;
  b[4 + 8] = 0xA5;
  b[4 + 11] = 0x10;
}

TEST(DequantGolden, Q4_K) {
  // qs at offset 16. Chunk c = s / 2 uses qs[32c .. 32c + 31]; even s low nibbles, odd s high.
  //   qs[0] = 0xF7: element 0 (s0, q 7) = 1 * 7 - 1 = 6; element 32 (s1, q 15) = 63 * 15 = 945.
  //   qs[5] = 0x00: element 5 (s0, q 0) = -1; element 37 (s1) = 0.
  //   qs[34] = 0x30: element 98 (s3, l 2, q 3) = 5 * 3 - 31.5 = -16.5.
  //   qs[65] = 0x0C: element 129 (s4, l 1, q 12) = 37 * 12 - 29 = 415 (4-7 packing).
  //   qs[127] = 0xE0: element 255 (s7, l 31, q 14) = 16 * 14 - 0.5 = 223.5.
  //   element 64 (s2, sc = m = 0) = 0; element 160 (s5) = 0.
  std::array<uint8_t, 144> b{};
  PutKScales(b);
  b[16 + 0] = 0xF7;
  b[16 + 34] = 0x30;
  b[16 + 65] = 0x0C;
  b[16 + 127] = 0xE0;
  const auto y = Dequant(GgmlType::kQ4_K, b);
  EXPECT_EQ(y[0], 6.0f);
  EXPECT_EQ(y[32], 945.0f);
  EXPECT_EQ(y[5], -1.0f);
  EXPECT_EQ(y[37], 0.0f);
  EXPECT_EQ(y[98], -16.5f);
  EXPECT_EQ(y[96], -31.5f);
  EXPECT_EQ(y[129], 415.0f);
  EXPECT_EQ(y[128], -29.0f);
  EXPECT_EQ(y[255], 223.5f);
  EXPECT_EQ(y[224], -0.5f);
  EXPECT_EQ(y[64], 0.0f);
  EXPECT_EQ(y[160], 0.0f);
}

TEST(DequantGolden, Q5_K) {
  // Same scales as Q4_K. qh at offset 16 (32 bytes), qs at offset 48. The fifth bit of
  // element 64c + l is bit 2c of qh[l]; of element 64c + 32 + l, bit 2c + 1 of qh[l].
  //   qs[0] = 0xF7, qh[0] = 0x01: element 0 (s0): q = 7 | 16 = 23 -> 23 - 1 = 22;
  //     element 32 (s1): bit 1 clear, q = 15 -> 945.
  //   qs[34] = 0x30, qh[2] = 0x08 (bit 3 = s3): element 98: q = 3 | 16 = 19 -> 95 - 31.5 = 63.5;
  //     element 66 (s2, bit 2 clear, sc 0) = 0.
  //   qs[65] = 0x0C, qh[1] = 0x10 (bit 4 = s4): element 129: q = 12 | 16 = 28 ->
  //     37 * 28 - 29 = 1007; element 97 (s3, qh[1] bit 3 clear, nibble 0) = -31.5.
  //   element 130 (s4, l 2): qh[2] bit 4 clear, nibble 0 -> -29.
  //   qs[127] = 0xE0, qh[31] = 0x80 (bit 7 = s7): element 255: q = 14 | 16 = 30 ->
  //     16 * 30 - 0.5 = 479.5; element 223 (s6, bit 6 clear) = 0.
  std::array<uint8_t, 176> b{};
  PutKScales(b);
  b[16 + 0] = 0x01;
  b[16 + 2] = 0x08;
  b[16 + 1] = 0x10;
  b[16 + 31] = 0x80;
  b[48 + 0] = 0xF7;
  b[48 + 34] = 0x30;
  b[48 + 65] = 0x0C;
  b[48 + 127] = 0xE0;
  const auto y = Dequant(GgmlType::kQ5_K, b);
  EXPECT_EQ(y[0], 22.0f);
  EXPECT_EQ(y[32], 945.0f);
  EXPECT_EQ(y[98], 63.5f);
  EXPECT_EQ(y[66], 0.0f);
  EXPECT_EQ(y[129], 1007.0f);
  EXPECT_EQ(y[97], -31.5f);
  EXPECT_EQ(y[130], -29.0f);
  EXPECT_EQ(y[255], 479.5f);
  EXPECT_EQ(y[223], 0.0f);
}

TEST(DequantGolden, Q6_K) {
  // Layout: ql[128] at 0, qh[64] at 128, scales[16] (int8) at 192, d at 208.
  // d = 0x3800 = 0.5. scales: [0] = 1, [2] = -2, [4] = 3, [6] = -1, [8] = 127, [15] = -128.
  // x = d * scale[e / 16] * (q - 32).
  // Half 0, l = 0: qh[0] = 0xE4 = 0b11'10'01'00 -> high bits 0, 1, 2, 3 for elements
  //   0, 32, 64, 96. ql[0] = 0x5A (low 10 -> element 0, high 5 -> element 64);
  //   ql[32] = 0xC3 (low 3 -> element 32, high 12 -> element 96).
  //   element 0:  q = 10 | 0 << 4 = 10 -> -22; 0.5 * 1 * -22 = -11.
  //   element 32: q = 3 | 1 << 4 = 19 -> -13; 0.5 * -2 * -13 = 13.
  //   element 64: q = 5 | 2 << 4 = 37 -> 5;   0.5 * 3 * 5 = 7.5.
  //   element 96: q = 12 | 3 << 4 = 60 -> 28; 0.5 * -1 * 28 = -14.
  // Half 1 (ql + 64, qh + 32), l = 5: ql[69] = 0x0F, qh[37] = 0x03:
  //   element 133: q = 15 | 3 << 4 = 63 -> 31; 0.5 * 127 * 31 = 1968.5.
  //   element 197 (uses ql[69] high = 0, qh[37] bits 4-5 = 0): q = 0 -> -32, scale[12] = 0
  //   -> 0.
  // element 255: half 1, l = 31, fourth quarter: ql[127] high, qh[63] >> 6, both 0 ->
  //   q - 32 = -32; 0.5 * -128 * -32 = 2048.
  // element 16: scale[1] = 0 -> 0.
  std::array<uint8_t, 210> b{};
  b[0] = 0x5A;
  b[32] = 0xC3;
  b[69] = 0x0F;
  b[128 + 0] = 0xE4;
  b[128 + 37] = 0x03;
  b[192 + 0] = 1;
  b[192 + 2] = 0xFE;  // -2
  b[192 + 4] = 3;
  b[192 + 6] = 0xFF;   // -1
  b[192 + 8] = 0x7F;   // 127
  b[192 + 15] = 0x80;  // -128
  Put16(b, 208, 0x3800);
  const auto y = Dequant(GgmlType::kQ6_K, b);
  EXPECT_EQ(y[0], -11.0f);
  EXPECT_EQ(y[32], 13.0f);
  EXPECT_EQ(y[64], 7.5f);
  EXPECT_EQ(y[96], -14.0f);
  EXPECT_EQ(y[133], 1968.5f);
  EXPECT_EQ(y[197], 0.0f);
  EXPECT_EQ(y[255], 2048.0f);
  EXPECT_EQ(y[16], 0.0f);
}

TEST(DequantGolden, RowsOfSeveralBlocksUseEachBlocksOwnScale) {
  // Two Q8_0 blocks at an odd address (rows in a file mapping need not be aligned):
  // block 0 d = 1.0 (0x3C00), block 1 d = 2.0 (0x4000); qs[0] = 3 in both -> 3 and 6.
  std::array<uint8_t, 69> raw{};
  uint8_t* p = raw.data() + 1;
  p[0] = 0x00, p[1] = 0x3C, p[2] = 3;
  p[34] = 0x00, p[35] = 0x40, p[36] = 3;
  std::vector<float> y(64);
  DequantizeRow(GgmlType::kQ8_0, p, y.data(), 64);
  EXPECT_EQ(y[0], 3.0f);
  EXPECT_EQ(y[32], 6.0f);
}

TEST(DequantGolden, BlockStructsMatchGgmlSizes) {
  // ggml type_size per block, and RowBytes of 256 elements worked out by hand:
  //   f32 4*256 = 1024; f16/bf16 2*256 = 512; q8_0 8 blocks * 34 = 272; q4_0 8 * 18 = 144;
  //   q4_1 8 * 20 = 160; q5_0 8 * 22 = 176; q5_1 8 * 24 = 192; mxfp4 8 * 17 = 136;
  //   q4_K 1 * 144 (4.5 bpw); q5_K 176 (5.5 bpw); q6_K 210 (6.5625 bpw).
  EXPECT_EQ(sizeof(BlockQ8_0), TraitsOf(GgmlType::kQ8_0).type_size);
  EXPECT_EQ(sizeof(BlockQ4_0), TraitsOf(GgmlType::kQ4_0).type_size);
  EXPECT_EQ(sizeof(BlockQ4_1), TraitsOf(GgmlType::kQ4_1).type_size);
  EXPECT_EQ(sizeof(BlockQ5_0), TraitsOf(GgmlType::kQ5_0).type_size);
  EXPECT_EQ(sizeof(BlockQ5_1), TraitsOf(GgmlType::kQ5_1).type_size);
  EXPECT_EQ(sizeof(BlockMxfp4), TraitsOf(GgmlType::kMXFP4).type_size);
  EXPECT_EQ(sizeof(BlockQ4_K), TraitsOf(GgmlType::kQ4_K).type_size);
  EXPECT_EQ(sizeof(BlockQ5_K), TraitsOf(GgmlType::kQ5_K).type_size);
  EXPECT_EQ(sizeof(BlockQ6_K), TraitsOf(GgmlType::kQ6_K).type_size);
  EXPECT_EQ(RowBytes(GgmlType::kF32, 256), 1024u);
  EXPECT_EQ(RowBytes(GgmlType::kF16, 256), 512u);
  EXPECT_EQ(RowBytes(GgmlType::kBF16, 256), 512u);
  EXPECT_EQ(RowBytes(GgmlType::kQ8_0, 256), 272u);
  EXPECT_EQ(RowBytes(GgmlType::kQ4_0, 256), 144u);
  EXPECT_EQ(RowBytes(GgmlType::kQ4_1, 256), 160u);
  EXPECT_EQ(RowBytes(GgmlType::kQ5_0, 256), 176u);
  EXPECT_EQ(RowBytes(GgmlType::kQ5_1, 256), 192u);
  EXPECT_EQ(RowBytes(GgmlType::kMXFP4, 256), 136u);
  EXPECT_EQ(RowBytes(GgmlType::kQ4_K, 256), 144u);
  EXPECT_EQ(RowBytes(GgmlType::kQ5_K, 256), 176u);
  EXPECT_EQ(RowBytes(GgmlType::kQ6_K, 256), 210u);
}

TEST(DequantDeathTest, RejectsPartialBlocks) {
  std::vector<uint8_t> bytes(34);
  std::vector<float> y(32);
  EXPECT_DEATH(DequantizeRow(GgmlType::kQ8_0, bytes.data(), y.data(), 31), "block size");
  EXPECT_DEATH(DequantizeRow(GgmlType::kQ8_K, bytes.data(), y.data(), 256), "no reference");
}

}  // namespace
}  // namespace mt
