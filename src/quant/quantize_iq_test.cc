// The IQ lattice quantizers (quant/quantize_iq.h): round trips through the reference
// dequantizers. Gaussian figures are RMS error / RMS of x. For comparison (the throwaway
// harness the quantizers were written with; N(0, 1), 16 rows of 4096): llama.cpp's own
// quantizers, given a flat importance matrix (all ones, the same measure as here), reach
// IQ2_XXS 0.344, IQ2_XS 0.300, IQ2_S 0.249, IQ3_XXS 0.182, IQ3_S 0.137, IQ1_S 0.486,
// IQ1_M 0.452 (without one, where they allow that: IQ2_S 0.266, IQ3_XXS 0.214, IQ3_S 0.167,
// IQ1_M 0.584); these ones kBest 0.331, 0.288, 0.239, 0.178, 0.130, 0.452, 0.417.
#include "quant/quantize_iq.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "quant/blocks_iq.h"
#include "quant/dequant.h"
#include "quant/quantize.h"

namespace mt {
namespace {

constexpr GgmlType kIqTypes[] = {GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS, GgmlType::kIQ2_S,
                                 GgmlType::kIQ3_XXS, GgmlType::kIQ3_S,  GgmlType::kIQ1_S,
                                 GgmlType::kIQ1_M};

// N(0, 1) by Box-Muller on mt19937 (independent of the standard library's distributions).
std::vector<float> Gaussian(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  auto uniform = [&] { return (static_cast<double>(gen()) + 0.5) / 4294967296.0; };
  std::vector<float> out(n);
  for (float& v : out) {
    const double u1 = uniform(), u2 = uniform();
    v = static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  return out;
}

std::vector<uint8_t> Quantize(GgmlType type, const std::vector<float>& x, QuantEffort effort) {
  std::vector<uint8_t> bytes(RowBytes(type, x.size()));
  QuantizeRow(type, x.data(), bytes.data(), static_cast<int64_t>(x.size()), effort);
  return bytes;
}

std::vector<float> RoundTrip(GgmlType type, const std::vector<float>& x, QuantEffort effort) {
  const std::vector<uint8_t> bytes = Quantize(type, x, effort);
  std::vector<float> y(x.size());
  DequantizeRow(type, bytes.data(), y.data(), static_cast<int64_t>(x.size()));
  return y;
}

double RelativeRms(const std::vector<float>& x, const std::vector<float>& y) {
  double se = 0, sx = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    se += (static_cast<double>(y[i]) - x[i]) * (static_cast<double>(y[i]) - x[i]);
    sx += static_cast<double>(x[i]) * x[i];
  }
  return std::sqrt(se / sx);
}

TEST(QuantizeIq, CanQuantizeAllSeven) {
  for (GgmlType t : kIqTypes) {
    EXPECT_TRUE(CanQuantize(t)) << TypeName(t);
    EXPECT_TRUE(IsIqLatticeType(t)) << TypeName(t);
  }
  EXPECT_FALSE(IsIqLatticeType(GgmlType::kIQ4_XS));
  EXPECT_FALSE(IsIqLatticeType(GgmlType::kQ4_K));
}

// RMS on 64 rows of 1024 N(0, 1) values, at most 2 % above what this search measured when it
// was written (so a worse search fails), and kFast within 2 % of kBest.
TEST(QuantizeIq, GaussianRms) {
  struct Case {
    GgmlType type;
    double best, fast;  // measured
  };
  const std::vector<float> x = Gaussian(64 * 1024, 1234);
  for (const Case& c :
       {Case{GgmlType::kIQ2_XXS, 0.3313, 0.3337}, Case{GgmlType::kIQ2_XS, 0.2875, 0.2885},
        Case{GgmlType::kIQ2_S, 0.2394, 0.2400}, Case{GgmlType::kIQ3_XXS, 0.1776, 0.1782},
        Case{GgmlType::kIQ3_S, 0.1299, 0.1306}, Case{GgmlType::kIQ1_S, 0.4518, 0.4557},
        Case{GgmlType::kIQ1_M, 0.4168, 0.4222}}) {
    const double best = RelativeRms(x, RoundTrip(c.type, x, QuantEffort::kBest));
    const double fast = RelativeRms(x, RoundTrip(c.type, x, QuantEffort::kFast));
    std::printf("  %-8s relative RMS error best %.4f fast %.4f (N(0,1) data)\n",
                std::string(TypeName(c.type)).c_str(), best, fast);
    EXPECT_LT(best, c.best * 1.02) << TypeName(c.type);
    EXPECT_LT(fast, c.fast * 1.02) << TypeName(c.type);
    EXPECT_LT(fast, best * 1.02) << TypeName(c.type);
  }
}

TEST(QuantizeIq, IsDeterministicAndBlockLocal) {
  const std::vector<float> x = Gaussian(2048, 99);
  for (GgmlType t : kIqTypes) {
    for (QuantEffort effort : {QuantEffort::kBest, QuantEffort::kFast}) {
      const std::vector<uint8_t> whole = Quantize(t, x, effort);
      EXPECT_EQ(whole, Quantize(t, x, effort)) << TypeName(t);
      const std::vector<float> a(x.begin(), x.begin() + 768), b(x.begin() + 768, x.end());
      std::vector<uint8_t> split = Quantize(t, a, effort);
      const std::vector<uint8_t> tail = Quantize(t, b, effort);
      split.insert(split.end(), tail.begin(), tail.end());
      EXPECT_EQ(whole, split) << TypeName(t);
    }
  }
}

// Scaled like the input: a row 1000 times larger (or smaller) comes back with the same
// relative error, so synth's tensors keep their magnitudes.
TEST(QuantizeIq, ScaleInvariant) {
  const std::vector<float> x = Gaussian(1024, 5);
  for (GgmlType t : kIqTypes) {
    const double base = RelativeRms(x, RoundTrip(t, x, QuantEffort::kFast));
    for (float s : {1e-3f, 1e3f}) {
      std::vector<float> xs(x);
      for (float& v : xs) v *= s;
      EXPECT_NEAR(RelativeRms(xs, RoundTrip(t, xs, QuantEffort::kFast)), base, 0.01 * base)
          << TypeName(t) << " x" << s;
    }
  }
}

// Signs: every element keeps its own, except that with 7 stored sign bits a group with an odd
// count of negatives gives up the sign of its smallest magnitude. IQ1 (no signs) is left out.
TEST(QuantizeIq, SignsFollowTheInput) {
  const std::vector<float> x = Gaussian(4096, 17);
  for (GgmlType t : {GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS, GgmlType::kIQ2_S, GgmlType::kIQ3_XXS,
                     GgmlType::kIQ3_S}) {
    const bool parity =
        t == GgmlType::kIQ2_XXS || t == GgmlType::kIQ2_XS || t == GgmlType::kIQ3_XXS;
    const std::vector<float> y = RoundTrip(t, x, QuantEffort::kFast);
    int flipped_groups = 0;
    for (size_t g = 0; g < x.size() / 8; ++g) {
      int wrong = 0, jmin = 0, negatives = 0;
      for (int j = 0; j < 8; ++j) {
        const float xv = x[8 * g + j], yv = y[8 * g + j];
        negatives += xv < 0.0f;
        if (yv != 0.0f && (xv < 0.0f) != (yv < 0.0f)) ++wrong;
        if (std::fabs(xv) < std::fabs(x[8 * g + jmin])) jmin = j;
      }
      if (parity && negatives % 2 == 1) {
        ASSERT_EQ(wrong, 1) << TypeName(t) << " group " << g;
        ASSERT_NE((x[8 * g + jmin] < 0.0f), (y[8 * g + jmin] < 0.0f))
            << TypeName(t) << " group " << g;
        ++flipped_groups;
      } else {
        ASSERT_EQ(wrong, 0) << TypeName(t) << " group " << g;
      }
    }
    if (parity) EXPECT_GT(flipped_groups, 100) << TypeName(t);
  }
}

TEST(QuantizeIq, ZerosComeBackExactly) {
  const std::vector<float> zeros(512, 0.0f);
  for (GgmlType t : kIqTypes) {
    for (QuantEffort effort : {QuantEffort::kBest, QuantEffort::kFast}) {
      EXPECT_EQ(RoundTrip(t, zeros, effort), zeros) << TypeName(t);
    }
  }
}

// A super-block of zeros next to a normal one: its d is 0 and the other is unaffected.
TEST(QuantizeIq, BlocksAreIndependent) {
  std::vector<float> x = Gaussian(512, 3);
  for (int i = 0; i < 256; ++i) x[i] = 0.0f;
  for (GgmlType t : kIqTypes) {
    const std::vector<float> y = RoundTrip(t, x, QuantEffort::kFast);
    for (int i = 0; i < 256; ++i) ASSERT_EQ(y[i], 0.0f) << TypeName(t);
    const std::vector<float> xb(x.begin() + 256, x.end()), yb(y.begin() + 256, y.end());
    EXPECT_LT(RelativeRms(xb, yb), 0.6) << TypeName(t);
  }
}

TEST(QuantizeIq, NonFiniteInputGivesValidDeterministicBlocks) {
  std::vector<float> x = Gaussian(512, 7);
  x[3] = NAN;
  x[40] = INFINITY;
  x[300] = -INFINITY;
  for (GgmlType t : kIqTypes) {
    for (QuantEffort effort : {QuantEffort::kBest, QuantEffort::kFast}) {
      const std::vector<uint8_t> q = Quantize(t, x, effort);
      EXPECT_EQ(q, Quantize(t, x, effort)) << TypeName(t);
      std::vector<float> y(x.size());
      DequantizeRow(t, q.data(), y.data(), static_cast<int64_t>(x.size()));  // no crash
    }
  }
}

}  // namespace
}  // namespace mt
