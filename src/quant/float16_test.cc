#include "quant/float16.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>

namespace mt {
namespace {

uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }
float FromBits(uint32_t b) { return std::bit_cast<float>(b); }

TEST(Fp16ToFp32, ZerosKeepTheirSign) {
  EXPECT_EQ(Bits(Fp16ToFp32(0x0000)), 0x00000000u);
  EXPECT_EQ(Bits(Fp16ToFp32(0x8000)), 0x80000000u);
}

TEST(Fp16ToFp32, NormalsAndSubnormals) {
  EXPECT_EQ(Fp16ToFp32(0x3C00), 1.0f);
  EXPECT_EQ(Fp16ToFp32(0xBC00), -1.0f);
  EXPECT_EQ(Fp16ToFp32(0x7BFF), 65504.0f);         // (2 - 2^-10) * 2^15
  EXPECT_EQ(Fp16ToFp32(0x0400), 0x1p-14f);         // smallest normal
  EXPECT_EQ(Fp16ToFp32(0x0001), 0x1p-24f);         // smallest subnormal: 1 * 2^-24
  EXPECT_EQ(Fp16ToFp32(0x03FF), 1023 * 0x1p-24f);  // largest subnormal
  EXPECT_EQ(Fp16ToFp32(0x8001), -0x1p-24f);
  EXPECT_EQ(Fp16ToFp32(0x3555), 1365.0f / 4096.0f);  // (1 + 341/1024) * 2^-2
}

TEST(Fp16ToFp32, InfinityAndNaN) {
  EXPECT_EQ(Fp16ToFp32(0x7C00), INFINITY);
  EXPECT_EQ(Fp16ToFp32(0xFC00), -INFINITY);
  EXPECT_TRUE(std::isnan(Fp16ToFp32(0x7E00)));
  // Signalling f16 NaN 0x7C01: payload 1 moves up 13 bits (0x2000) and the quiet bit is
  // set, as x86 float arithmetic does in ggml's conversion: 0x7FC02000.
  EXPECT_EQ(Bits(Fp16ToFp32(0x7C01)), 0x7FC02000u);
  EXPECT_EQ(Bits(Fp16ToFp32(0xFE00)), 0xFFC00000u);
}

TEST(Fp32ToFp16, ExactValues) {
  EXPECT_EQ(Fp32ToFp16(1.0f), 0x3C00);
  EXPECT_EQ(Fp32ToFp16(-2.0f), 0xC000);
  EXPECT_EQ(Fp32ToFp16(65504.0f), 0x7BFF);
  EXPECT_EQ(Fp32ToFp16(0x1p-14f), 0x0400);
  EXPECT_EQ(Fp32ToFp16(0x1p-24f), 0x0001);
  EXPECT_EQ(Fp32ToFp16(0.0f), 0x0000);
  EXPECT_EQ(Fp32ToFp16(-0.0f), 0x8000);
}

TEST(Fp32ToFp16, RoundsToNearestEven) {
  // Around 1.0 the f16 spacing is 2^-10, so 2^-11 is a tie.
  EXPECT_EQ(Fp32ToFp16(1.0f + 0x1p-11f), 0x3C00);             // tie, 0x3C00 is even
  EXPECT_EQ(Fp32ToFp16(1.0f + 3 * 0x1p-11f), 0x3C02);         // tie between 01 and 02 -> 02
  EXPECT_EQ(Fp32ToFp16(1.0f + 0x1p-11f + 0x1p-20f), 0x3C01);  // just above the tie
  EXPECT_EQ(Fp32ToFp16(1.0f + 0x1p-11f - 0x1p-20f), 0x3C00);  // just below
  EXPECT_EQ(Fp32ToFp16(-(1.0f + 3 * 0x1p-11f)), 0xBC02);
  // Largest finite is 65504 with spacing 32: 65519.99 rounds down, 65520 is a tie between
  // 0x7BFF (odd) and 65536 = inf (even) -> inf.
  EXPECT_EQ(Fp32ToFp16(65519.0f), 0x7BFF);
  EXPECT_EQ(Fp32ToFp16(65520.0f), 0x7C00);
  EXPECT_EQ(Fp32ToFp16(-65520.0f), 0xFC00);
}

TEST(Fp32ToFp16, SubnormalResults) {
  // Units of 2^-24. 2^-25 = 0.5 unit: tie -> 0 (even). 1.5 * 2^-25 = 0.75 -> 1.
  // 3 * 2^-25 = 1.5 units: tie between 1 and 2 -> 2. 2^-26 -> 0.
  EXPECT_EQ(Fp32ToFp16(0x1p-25f), 0x0000);
  EXPECT_EQ(Fp32ToFp16(-0x1p-25f), 0x8000);
  EXPECT_EQ(Fp32ToFp16(0x1.8p-25f), 0x0001);
  EXPECT_EQ(Fp32ToFp16(3 * 0x1p-25f), 0x0002);
  EXPECT_EQ(Fp32ToFp16(0x1p-26f), 0x0000);
  // 1023.75 units: rounds up into the smallest normal 0x0400.
  EXPECT_EQ(Fp32ToFp16(1023.75f * 0x1p-24f), 0x0400);
  // 5.5 units -> 6 (even), 6.5 units -> 6 (even).
  EXPECT_EQ(Fp32ToFp16(5.5f * 0x1p-24f), 0x0006);
  EXPECT_EQ(Fp32ToFp16(6.5f * 0x1p-24f), 0x0006);
  // An f32 subnormal is far below f16's range.
  EXPECT_EQ(Fp32ToFp16(FromBits(0x00000001)), 0x0000);
}

TEST(Fp32ToFp16, OverflowInfinityNaN) {
  EXPECT_EQ(Fp32ToFp16(1e10f), 0x7C00);
  EXPECT_EQ(Fp32ToFp16(-1e10f), 0xFC00);
  EXPECT_EQ(Fp32ToFp16(INFINITY), 0x7C00);
  EXPECT_EQ(Fp32ToFp16(-INFINITY), 0xFC00);
  // NaN -> ggml's canonical quiet NaN 0x7E00 with the sign kept; payload dropped.
  EXPECT_EQ(Fp32ToFp16(FromBits(0x7FC00000)), 0x7E00);
  EXPECT_EQ(Fp32ToFp16(FromBits(0x7F800001)), 0x7E00);  // signalling, payload in low bits
  EXPECT_EQ(Fp32ToFp16(FromBits(0xFFC12345)), 0xFE00);
}

TEST(Fp16, EveryFiniteHalfRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t v = static_cast<uint16_t>(h);
    if ((v & 0x7C00) == 0x7C00 && (v & 0x3FF) != 0) continue;  // NaN: payload not kept
    ASSERT_EQ(Fp32ToFp16(Fp16ToFp32(v)), v) << std::hex << h;
  }
}

TEST(Bf16, ToFp32IsTheTopHalf) {
  EXPECT_EQ(Bf16ToFp32(0x3F80), 1.0f);
  EXPECT_EQ(Bits(Bf16ToFp32(0x8000)), 0x80000000u);
  EXPECT_EQ(Bf16ToFp32(0x0001), FromBits(0x00010000));  // subnormal kept, not flushed
  EXPECT_EQ(Bf16ToFp32(0x7F80), INFINITY);
  EXPECT_EQ(Bf16ToFp32(0xFF80), -INFINITY);
  EXPECT_TRUE(std::isnan(Bf16ToFp32(0x7FC0)));
}

TEST(Bf16, FromFp32RoundsToNearestEven) {
  EXPECT_EQ(Fp32ToBf16(1.0f), 0x3F80);
  EXPECT_EQ(Fp32ToBf16(-0.0f), 0x8000);
  // The low 16 bits decide: 0x8000 is a tie.
  EXPECT_EQ(Fp32ToBf16(FromBits(0x3F808000)), 0x3F80);  // tie, 0x3F80 even
  EXPECT_EQ(Fp32ToBf16(FromBits(0x3F818000)), 0x3F82);  // tie, 0x3F81 odd -> up
  EXPECT_EQ(Fp32ToBf16(FromBits(0x3F808001)), 0x3F81);  // above the tie
  EXPECT_EQ(Fp32ToBf16(FromBits(0x3F807FFF)), 0x3F80);  // below the tie
  EXPECT_EQ(Fp32ToBf16(FromBits(0xBF818000)), 0xBF82);
  // Subnormals are rounded, not flushed: 0x00018000 is a tie between 1 and 2 -> 2.
  EXPECT_EQ(Fp32ToBf16(FromBits(0x00018000)), 0x0002);
  EXPECT_EQ(Fp32ToBf16(FromBits(0x00008000)), 0x0000);
}

TEST(Bf16, FromFp32OverflowInfinityNaN) {
  EXPECT_EQ(Fp32ToBf16(INFINITY), 0x7F80);
  EXPECT_EQ(Fp32ToBf16(-INFINITY), 0xFF80);
  // FLT_MAX = 0x7F7FFFFF: low half 0xFFFF is above the tie, so it rounds up to inf.
  EXPECT_EQ(Fp32ToBf16(FromBits(0x7F7FFFFF)), 0x7F80);
  // NaN: top half with the quiet bit (0x40) forced, so a payload only in the low half
  // stays NaN instead of truncating to inf.
  EXPECT_EQ(Fp32ToBf16(FromBits(0x7FC00000)), 0x7FC0);
  EXPECT_EQ(Fp32ToBf16(FromBits(0x7F800001)), 0x7FC0);
  EXPECT_EQ(Fp32ToBf16(FromBits(0xFF810000)), 0xFFC1);
}

}  // namespace
}  // namespace mt
