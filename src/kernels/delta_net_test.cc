// DeltaRuleStep's variants against a double-precision reference of the delta rule, in place
// and not, from zeros and from a state.
#include "kernels/delta_net.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace mt {
namespace {

// The rule in double: M = decay M_in; per row j d = beta (v_j - M_j . k); M_j += d k;
// out_j = scale M_j . q.
void Reference(const std::vector<float>& in, bool zeros, const std::vector<float>& q,
               const std::vector<float>& k, const std::vector<float>& v, double decay, double beta,
               double scale, int dk, int dv, std::vector<double>& state, std::vector<double>& out) {
  state.assign(size_t(dk) * dv, 0.0);
  out.assign(dv, 0.0);
  for (int j = 0; j < dv; ++j) {
    double sk = 0;
    for (int i = 0; i < dk; ++i) {
      state[j * dk + i] = zeros ? 0.0 : decay * in[j * dk + i];
      sk += state[j * dk + i] * k[i];
    }
    const double d = beta * (v[j] - sk);
    double sq = 0;
    for (int i = 0; i < dk; ++i) {
      state[j * dk + i] += d * k[i];
      sq += state[j * dk + i] * q[i];
    }
    out[j] = scale * sq;
  }
}

class DeltaRuleTest : public ::testing::TestWithParam<Isa> {};

TEST_P(DeltaRuleTest, MatchesTheRuleInDouble) {
  const Isa isa = GetParam();
  if (!IsaSupported(isa)) GTEST_SKIP() << IsaName(isa) << " not supported on this CPU";
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (int dk : {5, 16, 37, 64, 128}) {
    SCOPED_TRACE(dk);
    const int dv = dk;
    std::vector<float> in(size_t(dk) * dv), q(dk), k(dk), v(dv);
    for (float& x : in) x = 0.3f * normal(rng);
    for (float& x : q) x = normal(rng) / std::sqrt(float(dk));
    for (float& x : k) x = normal(rng) / std::sqrt(float(dk));
    for (float& x : v) x = normal(rng);
    for (bool zeros : {false, true}) {
      for (bool in_place : {false, true}) {
        std::vector<float> state = in, out(dv), separate(size_t(dk) * dv);
        DeltaRuleArgs a;
        a.state_in = zeros ? nullptr : state.data();
        a.state_out = in_place ? state.data() : separate.data();
        a.q = q.data();
        a.k = k.data();
        a.v = v.data();
        a.decay = 0.8f;
        a.beta = 0.6f;
        a.scale = 1.0f / std::sqrt(float(dk));
        a.dim_k = dk;
        a.dim_v = dv;
        a.out = out.data();
        DeltaRuleStepWith(isa, a);
        std::vector<double> want_state, want_out;
        Reference(in, zeros, q, k, v, 0.8, 0.6, a.scale, dk, dv, want_state, want_out);
        const float* got = a.state_out;
        for (int i = 0; i < dk * dv; ++i) ASSERT_NEAR(got[i], want_state[i], 2e-5) << i;
        for (int j = 0; j < dv; ++j) ASSERT_NEAR(out[j], want_out[j], 2e-5) << j;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllIsas, DeltaRuleTest, ::testing::ValuesIn(kAllIsas),
                         [](const auto& info) { return std::string(IsaName(info.param)); });

}  // namespace
}  // namespace mt
