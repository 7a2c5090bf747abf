// RoPE angles with and without YaRN, against their definitions (kernels/ops.h).
#include "kernels/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace mt {
namespace {

TEST(RopeAnglesTest, PlainRotationIsTheTextbookAngle) {
  const RopeFreqs f{.n_rot = 64, .freq_base = 10000, .freq_scale = 0.25f};
  std::vector<float> cs(64);
  for (int pos : {0, 1, 17, 4095}) {
    RopeAngles(f, pos, cs.data());
    for (int i = 0; i < 32; ++i) {
      const double theta = pos * 0.25 * std::pow(10000.0, -2.0 * i / 64);
      EXPECT_EQ(cs[i], static_cast<float>(std::cos(theta))) << pos << " " << i;
      EXPECT_EQ(cs[32 + i], static_cast<float>(std::sin(theta))) << pos << " " << i;
    }
  }
}

// ggml's rope_yarn: the ramp mixes the interpolated and extrapolated angle per dim pair, and
// cos/sin carry attn_factor * (1 + 0.1 ln(1 / freq_scale)).
TEST(RopeAnglesTest, YarnMixesInterpolationAndExtrapolationByDim) {
  const RopeFreqs f{.n_rot = 64,
                    .freq_base = 10000,
                    .freq_scale = 1.0f / 40,
                    .ext_factor = 1,
                    .attn_factor = 0.8f,
                    .corr_low = 10,
                    .corr_high = 23};
  const double m = 0.8 * (1 + 0.1 * std::log(40.0));
  std::vector<float> cs(64);
  for (int pos : {1, 100, 5000}) {
    RopeAngles(f, pos, cs.data());
    for (int i = 0; i < 32; ++i) {
      const double extrap = pos * std::pow(10000.0, -2.0 * i / 64);
      const double ramp = 1 - std::min(1.0, std::max(0.0, (i - 10.0) / 13.0));
      const double theta = extrap / 40 * (1 - ramp) + extrap * ramp;
      EXPECT_NEAR(cs[i], std::cos(theta) * m, 2e-6) << pos << " " << i;
      EXPECT_NEAR(cs[32 + i], std::sin(theta) * m, 2e-6) << pos << " " << i;
    }
    // Below the ramp the dims keep their trained (extrapolated) angle, above it they are
    // interpolated like linear scaling.
    EXPECT_NEAR(cs[3], std::cos(pos * std::pow(10000.0, -6.0 / 64)) * m, 2e-6);
    EXPECT_NEAR(cs[30], std::cos(pos * std::pow(10000.0, -60.0 / 64) / 40) * m, 2e-6);
  }
}

// gpt-oss's clamped SwiGLU, values derived by hand: the gate is clamped above at 7 only, the
// up projection to [-7, 7], then g * sigmoid(1.702 g) * (u + 1).
TEST(SwiGluOaiTest, ClampsTheGateAboveAndTheUpBothWays) {
  const float gate[] = {0.0f, 1.0f, 10.0f, -10.0f, 7.0f};
  const float up[] = {3.0f, -1.0f, 9.0f, -9.0f, 0.5f};
  float out[5];
  SwiGluOai(gate, up, 5, out);
  auto want = [](double g, double u) { return g / (1 + std::exp(-1.702 * g)) * (u + 1); };
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_NEAR(out[1], want(1, -1), 1e-7);    // u = -1: nothing passes
  EXPECT_NEAR(out[2], want(7, 7), 1e-5);     // both clamped at 7
  EXPECT_NEAR(out[3], want(-10, -7), 1e-6);  // the gate is not clamped below
  EXPECT_NEAR(out[4], want(7, 0.5), 1e-5);
}

}  // namespace
}  // namespace mt
