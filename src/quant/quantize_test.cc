// Round trips: quantize, dequantize, compare with the input. The bounds are derived per
// format (see each test); RMS figures are relative to the input's RMS unless stated.
#include "quant/quantize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "quant/dequant.h"
#include "quant/float16.h"

namespace mt {
namespace {

constexpr int64_t kRows = 64;
constexpr int64_t kRowLen = 1024;  // 4 K-quant super-blocks, 32 legacy blocks

// Gaussian N(0, 1) test data, fixed seed. (Box-Muller on mt19937 so the values do not
// depend on the standard library's normal_distribution.)
std::vector<float> Gaussian(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  auto uniform = [&] { return (static_cast<double>(gen()) + 0.5) / 4294967296.0; };
  std::vector<float> out(n);
  for (int64_t i = 0; i < n; ++i) {
    const double u1 = uniform(), u2 = uniform();
    out[i] = static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  return out;
}

std::vector<uint8_t> Quantize(GgmlType type, const std::vector<float>& x) {
  std::vector<uint8_t> bytes(RowBytes(type, x.size()));
  QuantizeRow(type, x.data(), bytes.data(), static_cast<int64_t>(x.size()));
  return bytes;
}

std::vector<float> RoundTrip(GgmlType type, const std::vector<float>& x) {
  const std::vector<uint8_t> bytes = Quantize(type, x);
  std::vector<float> y(x.size());
  DequantizeRow(type, bytes.data(), y.data(), static_cast<int64_t>(x.size()));
  return y;
}

struct Errors {
  double rms = 0;      // RMS error / RMS of x, over all elements
  double max_abs = 0;  // largest |error|
};

Errors Measure(const std::vector<float>& x, const std::vector<float>& y) {
  double se = 0, sx = 0, mx = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double e = static_cast<double>(y[i]) - x[i];
    se += e * e;
    sx += static_cast<double>(x[i]) * x[i];
    mx = std::max(mx, std::fabs(e));
  }
  return Errors{std::sqrt(se / sx), mx};
}

// For every block of `block` elements: RMS of the block's error <= bound(block values).
template <typename Bound>
void ExpectBlockRmsWithin(const std::vector<float>& x, const std::vector<float>& y, int block,
                          Bound bound, const char* name) {
  for (size_t b = 0; b < x.size() / block; ++b) {
    const float* xb = x.data() + b * block;
    double se = 0;
    for (int i = 0; i < block; ++i) {
      const double e = static_cast<double>(y[b * block + i]) - xb[i];
      se += e * e;
    }
    const double rms = std::sqrt(se / block);
    const double limit = bound(xb);
    ASSERT_LE(rms, limit) << name << " block " << b;
  }
}

float AbsMax(const float* x, int n) {
  float m = 0;
  for (int i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

// Runs the round trip on kRows rows of Gaussian data, prints the figures, and returns them.
Errors GaussianRoundTrip(GgmlType type, std::vector<float>* x_out = nullptr,
                         std::vector<float>* y_out = nullptr) {
  const std::vector<float> x = Gaussian(kRows * kRowLen, 1234);
  std::vector<float> y;
  for (int64_t r = 0; r < kRows; ++r) {
    std::vector<float> row(x.begin() + r * kRowLen, x.begin() + (r + 1) * kRowLen);
    const std::vector<float> out = RoundTrip(type, row);
    y.insert(y.end(), out.begin(), out.end());
  }
  const Errors e = Measure(x, y);
  std::printf("  %-6s relative RMS error %.5f, max |error| %.5f (N(0,1) data)\n",
              std::string(TypeName(type)).c_str(), e.rms, e.max_abs);
  if (x_out) *x_out = x;
  if (y_out) *y_out = y;
  return e;
}

TEST(QuantizeRoundTrip, CanQuantizeExactlyTheTwelve) {
  for (GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0,
                     GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                     GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kMXFP4}) {
    EXPECT_TRUE(CanQuantize(t)) << TypeName(t);
  }
  EXPECT_FALSE(CanQuantize(GgmlType::kQ8_1));
  EXPECT_FALSE(CanQuantize(GgmlType::kQ3_K));
}

TEST(QuantizeRoundTrip, F32IsExact) {
  std::vector<float> x, y;
  const Errors e = GaussianRoundTrip(GgmlType::kF32, &x, &y);
  EXPECT_EQ(e.max_abs, 0.0);
  EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * 4), 0);
}

TEST(QuantizeRoundTrip, F16WithinHalfUlp) {
  // Round to nearest: |error| <= half an ulp = |x| * 2^-11 for normal values (all of
  // N(0,1) data above 2^-14 in magnitude; below that the ulp is fixed at 2^-24).
  std::vector<float> x, y;
  GaussianRoundTrip(GgmlType::kF16, &x, &y);
  for (size_t i = 0; i < x.size(); ++i) {
    const double bound = std::max(std::fabs(x[i]) * 0x1p-11, 0x1p-25);
    ASSERT_LE(std::fabs(static_cast<double>(y[i]) - x[i]), bound) << i;
  }
}

TEST(QuantizeRoundTrip, Bf16WithinHalfUlp) {
  // 8 significant bits: |error| <= |x| * 2^-8.
  std::vector<float> x, y;
  GaussianRoundTrip(GgmlType::kBF16, &x, &y);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_LE(std::fabs(static_cast<double>(y[i]) - x[i]), std::fabs(x[i]) * 0x1p-8) << i;
  }
}

TEST(QuantizeRoundTrip, Q8_0) {
  // d = f16(amax / 127), q = round(x / d): no code leaves [-127, 127] because the f16
  // rounding moves d by at most 2^-11, so amax / d <= 127.07 < 127.5. Hence every element
  // has |error| <= d / 2 <= amax / 254 * (1 + 2^-11).
  std::vector<float> x, y;
  const Errors e = GaussianRoundTrip(GgmlType::kQ8_0, &x, &y);
  for (size_t b = 0; b < x.size() / 32; ++b) {
    const double bound = AbsMax(&x[b * 32], 32) / 254.0 * (1 + 0x1p-11) + 1e-7;
    for (int i = 0; i < 32; ++i) {
      ASSERT_LE(std::fabs(static_cast<double>(y[b * 32 + i]) - x[b * 32 + i]), bound);
    }
  }
  // Uniform rounding error has RMS d / sqrt(12). Over blocks, the RMS of amax of 32 N(0,1)
  // samples is 2.39 (numpy, 200k blocks), so 2.39 / 127 / sqrt(12) = 0.0054. Allow 10 %.
  EXPECT_LT(e.rms, 2.39 / 127 / std::sqrt(12.0) * 1.1);  // 0.0060
}

// Symmetric formats (Q4_0: q in [-8, 7]; Q5_0: [-16, 15]): among the candidate scales is
// d = amax / qpos, which needs no clamping, so the chosen scale (least squared error) has
// block RMS error <= that candidate's max error <= d / 2 = amax / (2 qpos), times
// (1 + 2^-11) for the f16 scale. Statistically, a fixed scale halfway between the two
// ends, d = amax / (qpos + 0.5), gives RMS d / sqrt(12) with RMS(amax of 32) = 2.39; the
// search must do at least as well as that fixed choice (no margin).
TEST(QuantizeRoundTrip, Q4_0) {
  std::vector<float> x, y;
  const Errors e = GaussianRoundTrip(GgmlType::kQ4_0, &x, &y);
  ExpectBlockRmsWithin(
      x, y, 32, [](const float* b) { return AbsMax(b, 32) / 14.0 * (1 + 0x1p-11) + 1e-7; }, "q4_0");
  EXPECT_LT(e.rms, 2.39 / 7.5 / std::sqrt(12.0));  // 0.092
}

TEST(QuantizeRoundTrip, Q5_0) {
  std::vector<float> x, y;
  const Errors e = GaussianRoundTrip(GgmlType::kQ5_0, &x, &y);
  ExpectBlockRmsWithin(
      x, y, 32, [](const float* b) { return AbsMax(b, 32) / 30.0 * (1 + 0x1p-11) + 1e-7; }, "q5_0");
  EXPECT_LT(e.rms, 2.39 / 15.5 / std::sqrt(12.0));  // 0.0445
}

// Affine formats (Q4_1: q in [0, 15], Q5_1: [0, 31]): one candidate is d = (hi - lo) / qmax,
// m = lo, stored as f16 (relative error <= 2^-11 each). Its max error is d / 2 plus the f16
// error of m (<= 2^-11 |lo|) plus, for clamped top codes, qmax * 2^-11 * d. Statistically
// RMS(range of 32 N(0,1)) = 4.20 (numpy) and the plain min/max fit has RMS error
// (range / qmax) / sqrt(12); the least-squares search must beat it (no margin).
double AffineBound(const float* b, int qmax) {
  const float lo = *std::min_element(b, b + 32), hi = *std::max_element(b, b + 32);
  const double d = (static_cast<double>(hi) - lo) / qmax;
  return d / 2 * (1 + 0x1p-11) + 0x1p-11 * std::fabs(lo) + qmax * 0x1p-11 * d + 1e-7;
}

TEST(QuantizeRoundTrip, Q4_1) {
  std::vector<float> x, y;
  const Errors e = GaussianRoundTrip(GgmlType::kQ4_1, &x, &y);
  ExpectBlockRmsWithin(
      x, y, 32, [](const float* b) { return AffineBound(b, 15); }, "q4_1");
  EXPECT_LT(e.rms, 4.2 / 15 / std::sqrt(12.0));  // 0.081
}

TEST(QuantizeRoundTrip, Q5_1) {
  std::vector<float> x, y;
  const Errors e = GaussianRoundTrip(GgmlType::kQ5_1, &x, &y);
  ExpectBlockRmsWithin(
      x, y, 32, [](const float* b) { return AffineBound(b, 31); }, "q5_1");
  EXPECT_LT(e.rms, 4.2 / 31 / std::sqrt(12.0));  // 0.039
}

// K-quants: each 32-element sub-block is fitted like Q4_1/Q5_1 with m <= 0, then its scale
// and min are rounded to 6 bits of a per-super-block f16 scale, which adds error (a
// sub-block scale off by up to half a step of max_scale / 63, i.e. a few % of a scale).
// The statistical figure is the affine one, (range / qmax) / sqrt(12) with RMS(range) =
// 4.20, plus 10 % for the 6-bit scales and the m <= 0 constraint.
TEST(QuantizeRoundTrip, Q4_K) {
  const Errors e = GaussianRoundTrip(GgmlType::kQ4_K);
  EXPECT_LT(e.rms, 4.2 / 15 / std::sqrt(12.0) * 1.1);  // 0.089
}

TEST(QuantizeRoundTrip, Q5_K) {
  const Errors e = GaussianRoundTrip(GgmlType::kQ5_K);
  EXPECT_LT(e.rms, 4.2 / 31 / std::sqrt(12.0) * 1.1);  // 0.043
}

// Q6_K: 16-element sub-blocks, symmetric q in [-32, 31]; RMS(amax of 16 N(0,1)) = 2.13, so
// d ~ 2.13 / 31.5 and RMS = d / sqrt(12) = 0.0195; the int8 sub-scales add at most half a
// step of max / 127 (under 0.4 % of the largest scale): 5 % margin.
TEST(QuantizeRoundTrip, Q6_K) {
  const Errors e = GaussianRoundTrip(GgmlType::kQ6_K);
  EXPECT_LT(e.rms, 2.13 / 31.5 / std::sqrt(12.0) * 1.05);  // 0.0205
}

// MXFP4: the largest element sits in [2^k, 2^(k+1)). With scale exponent k - 2 (the OCP
// choice) the e2m1 grid tops out at 6 * 2^(k-2) = 1.5 * 2^k with step 2^(k-1) there; with
// k - 1 it reaches 3 * 2^k, step 2^k. The second never clips, so the chosen (least error)
// block has RMS <= 2^(k-1) <= amax / 2. Statistically: e2m1 has one mantissa bit, so in
// the binade [2^j, 2^(j+1)) the step is 2^(j-1) and the RMS error step / sqrt(12) is 7 %
// to 14 % of the value; averaged over Gaussian data (and the fixed step below 2^(k-2))
// about 11 %. Allow 15 % over that.
TEST(QuantizeRoundTrip, Mxfp4) {
  std::vector<float> x, y;
  const Errors e = GaussianRoundTrip(GgmlType::kMXFP4, &x, &y);
  ExpectBlockRmsWithin(
      x, y, 32, [](const float* b) { return AbsMax(b, 32) / 2.0; }, "mxfp4");
  EXPECT_LT(e.rms, 0.13);
}

TEST(QuantizeRoundTrip, IsDeterministic) {
  const std::vector<float> x = Gaussian(4096, 99);
  for (GgmlType t : {GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0, GgmlType::kQ4_0,
                     GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ4_K,
                     GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kMXFP4}) {
    EXPECT_EQ(Quantize(t, x), Quantize(t, x)) << TypeName(t);
  }
}

TEST(QuantizeRoundTrip, ValuesOnTheGridComeBackExactly) {
  // Each block holds exactly representable values, so the best fit has zero error:
  // Q4_0/Q5_0: multiples of 0.5 reaching the negative end (-8 * 0.5 for Q4_0);
  // Q4_1/Q5_1: lo + k * 0.25 with lo = -1.75; MXFP4: e2m1 values times 2^-3.
  // (Q8_0 is left out: its scale is amax / 127, which is off the grid of 0.5.)
  constexpr int kE2m1Doubled[8] = {0, 1, 2, 3, 4, 6, 8, 12};
  std::vector<float> sym(32), affine(32), fp4(32);
  for (int i = 0; i < 32; ++i) {
    sym[i] = 0.5f * static_cast<float>((i % 16) - 8);         // -4 .. 3.5
    affine[i] = -1.75f + 0.25f * static_cast<float>(i % 16);  // -1.75 .. 2
    fp4[i] = 0.125f * static_cast<float>(kE2m1Doubled[i % 8]) / 2.0f * (i % 3 == 0 ? -1.0f : 1.0f);
  }
  for (GgmlType t : {GgmlType::kQ4_0, GgmlType::kQ5_0}) {
    EXPECT_EQ(RoundTrip(t, sym), sym) << TypeName(t);
  }
  for (GgmlType t : {GgmlType::kQ4_1, GgmlType::kQ5_1}) {
    EXPECT_EQ(RoundTrip(t, affine), affine) << TypeName(t);
  }
  EXPECT_EQ(RoundTrip(GgmlType::kMXFP4, fp4), fp4);
}

TEST(QuantizeRoundTrip, ZerosAndConstants) {
  // Zeros are exact everywhere. A constant 2.0 is exact where a scale can be chosen freely
  // enough: Q4_0 (d = -0.25, q = -8), Q5_0 (d = -0.125, q = -16), Q4_1/Q5_1 (d = 0,
  // m = 2), MXFP4 (2^-2 * 8). Q8_0 and the K-quants go through an f16 scale derived from
  // 2 / 127 or from a 6-/8-bit sub-scale, so they are within 2 * 2^-11 relative.
  const std::vector<float> zeros(256, 0.0f), twos(256, 2.0f);
  for (GgmlType t :
       {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
        GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kMXFP4}) {
    EXPECT_EQ(RoundTrip(t, zeros), zeros) << TypeName(t);
  }
  for (GgmlType t :
       {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kMXFP4}) {
    EXPECT_EQ(RoundTrip(t, twos), twos) << TypeName(t);
  }
  for (GgmlType t : {GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    for (float v : RoundTrip(t, twos)) ASSERT_NEAR(v, 2.0f, 2.0 * 2 * 0x1p-11) << TypeName(t);
  }
}

TEST(QuantizeRoundTrip, NonFiniteInputGivesValidBlocks) {
  // Garbage in, but no crash or undefined behaviour (the sanitizer builds would see it),
  // and the same bytes every time.
  std::vector<float> x = Gaussian(256, 7);
  x[3] = NAN;
  x[40] = INFINITY;
  x[100] = -INFINITY;
  for (GgmlType t :
       {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
        GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kMXFP4}) {
    EXPECT_EQ(Quantize(t, x), Quantize(t, x)) << TypeName(t);  // and still deterministic
  }
}

TEST(QuantizeDeathTest, RejectsPartialBlocks) {
  std::vector<float> x(300);
  std::vector<uint8_t> out(1024);
  EXPECT_DEATH(QuantizeRow(GgmlType::kQ4_K, x.data(), out.data(), 300), "block size");
  EXPECT_DEATH(QuantizeRow(GgmlType::kIQ2_XXS, x.data(), out.data(), 256), "no quantizer");
}

}  // namespace
}  // namespace mt
