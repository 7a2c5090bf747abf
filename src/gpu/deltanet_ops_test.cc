// Tests of gpu/deltanet_ops.h against the CPU's formulas (engine/attention_deltanet.cc, whose
// steps are restated here: the gpu layer sits below the engine) and kernels/delta_net.h's
// scalar kernel, on random data at offsets off any alignment: three sequences' tokens
// interleaved in one batch, one resuming from a saved copy and taking a checkpoint, one from
// zeros, one going on in place from the copy an earlier pass wrote.
//
// Tolerances (u = 2^-24; Vulkan's precision: +, -, * correctly rounded, x / y 2.5 ulp, sqrt
// and 1 / its 2.5 ulp each, exp 3 + 2|x| ulp, log 3 ulp (2^-21 absolute near 1); an ulp is at
// most 2u of the value):
//  - the convolution's windows: the same bits (copies of the inputs). Its sums are the CPU's
//    op sequence, so an output differs only by SiLU's exp and division: within
//    (4 |x| + 6) u + 5u + the CPU's own exp (2u) of |y|, (4 |x| + 16) u allowed.
//  - the delta rule: per token the device's q and k norms (a 64-thread tree, S / 64 + 6
//    levels of additions) and the gates (exp, log, sigmoid's division) differ from the CPU's
//    by e = (S / 64 + 24 + 8 X) u relative, X the largest |argument| of the token's exps. The
//    state's update is the scalar kernel's op sequence; an input off by e moves each of its
//    terms by e of their magnitude, and the sums of S products add (2 S + 4) u, so a step adds
//    at most (e + (2 S + 4) u) times the magnitude M_abs (the update with every term's
//    absolute value) to the state's error, and the earlier error is carried by decay and
//    (I - beta k k^T) (norms at most 1): after t steps at most the sum of the steps' terms,
//    bounded by their sum times the current M_abs. Outputs o = (M . q) / sqrt(S) likewise with
//    o_abs; the norm divides by the head's rms (its error: the largest of the o errors over
//    the rms, plus (S / 64 + 32) u) and the gate adds exp's error: y = o / rms w silu(z).
// A wrong key head, a token out of order or a lost state moves outputs by their own size.
#include "gpu/deltanet_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "base/check.h"
#include "gpu/ops_test_fixture.h"
#include "kernels/delta_net.h"
#include "kernels/ops.h"

namespace mt::gpu {
namespace {

constexpr uint32_t kNone = DeltaNetRun::kNone;

class GpuDeltaNetOps : public GpuOpsTest<DeltaNetOps> {};

// The batch: rows 0..8 of three sequences interleaved; sequence 0 (4 tokens) resumes from
// its copy 0, writes copy 1 and takes the checkpoint (copy 2) after its third token; sequence 1
// (2 tokens) starts from zeros; sequence 2 (3 tokens) goes on in its copy 1, in place.
constexpr int kTokens = 9;
constexpr uint32_t kSeqOf[kTokens] = {0, 1, 2, 0, 2, 0, 1, 2, 0};
constexpr int kSeqs = 3;

struct Layout {
  uint64_t copy_floats = 0;
  uint64_t state_offset = 3;  // floats before copy 0 of sequence 0
  std::vector<DeltaNetRun> runs;
  std::vector<uint32_t> order;
  uint64_t runs_at = 5, order_at = 0;  // words in the runs buffer
  std::vector<uint32_t> words;         // the runs buffer

  uint32_t Copy(int seq, int copy) const {
    return static_cast<uint32_t>((seq * 3 + copy) * copy_floats);
  }
  explicit Layout(uint64_t copy) : copy_floats(copy) {
    for (int s = 0; s < kSeqs; ++s) {
      DeltaNetRun r;
      r.begin = static_cast<uint32_t>(order.size());
      for (int t = 0; t < kTokens; ++t) {
        if (kSeqOf[t] == static_cast<uint32_t>(s)) order.push_back(static_cast<uint32_t>(t));
      }
      r.end = static_cast<uint32_t>(order.size());
      r.next = Copy(s, 1);
      r.checkpoint = Copy(s, 2);
      r.source = s == 0 ? Copy(s, 0) : s == 1 ? kNone : r.next;
      r.checkpoint_at = s == 0 ? r.begin + 2 : kNone;
      runs.push_back(r);
    }
    order_at = runs_at + runs.size() * 8 + 2;
    words.assign(order_at + order.size() + 1, 0xdeadbeef);
    std::memcpy(words.data() + runs_at, runs.data(), runs.size() * sizeof(DeltaNetRun));
    std::memcpy(words.data() + order_at, order.data(), order.size() * 4);
  }
  DeltaNetRuns Bound(const Buffer* b) const {
    return {b, runs_at, static_cast<int64_t>(runs.size()), order_at, kTokens};
  }
};

float Silu(float x) { return x / (1.0f + std::exp(-x)); }
float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float Softplus(float x) { return x > 20.0f ? x : std::log(1.0f + std::exp(x)); }

TEST_F(GpuDeltaNetOps, ConvolutionMatchesTheCpu) {
  for (const int64_t d_conv : {4, 2, 1}) {
    const int64_t C = 200, stride = 203, W = d_conv - 1;
    SCOPED_TRACE(testing::Message() << "d_conv " << d_conv);
    std::mt19937 rng(7 + d_conv);
    const Layout lay(static_cast<uint64_t>(C * W + 13));
    const uint64_t x_off = 5, w_off = 3;
    std::vector<float> x = Gaussian(x_off + kTokens * stride + 2, 1.0f, rng);
    const std::vector<float> w = Gaussian(w_off + C * d_conv, 0.5f, rng);
    std::vector<float> state =
        Gaussian(lay.state_offset + kSeqs * 3 * lay.copy_floats + 4, 1.0f, rng);
    // The copies the run writes start as sentinels: each must be written whole.
    for (int s = 0; s < kSeqs; ++s) {
      for (int c = 1; c < 3; ++c) {
        if (s == 2 && c == 1) continue;  // sequence 2 goes on from its copy 1
        std::fill_n(state.begin() + lay.state_offset + lay.Copy(s, c), C * W, kSentinel);
      }
    }
    Buffer xb = ToDevice(x), wb = ToDevice(w), sb = ToDevice(state), rb = ToDevice(lay.words);
    DeltaConvArgs a;
    a.x = &xb;
    a.x_offset = x_off;
    a.n = kTokens;
    a.channels = C;
    a.stride = stride;
    a.weight = &wb;
    a.weight_offset = w_off;
    a.d_conv = d_conv;
    a.runs = lay.Bound(&rb);
    a.state = &sb;
    a.state_offset = lay.state_offset;
    a.copy_floats = lay.copy_floats;
    ASSERT_TRUE(Run(a).ok());
    // The CPU's Convolve.
    std::vector<float> want = x;
    std::vector<float> want_state = state;
    std::vector<double> pre(x.size(), 0.0);  // each output's SiLU argument
    for (const DeltaNetRun& r : lay.runs) {
      for (int64_t c = 0; c < C; ++c) {
        const float* wc = w.data() + w_off + c * d_conv;
        float window[8];
        for (int i = 0; i < W; ++i) {
          window[i] = r.source == kNone ? 0.0f : state[lay.state_offset + r.source + c * W + i];
        }
        for (uint32_t o = r.begin; o < r.end; ++o) {
          float& v = want[x_off + lay.order[o] * stride + c];
          float sum = 0.0f;
          for (int i = 0; i < W; ++i) sum += window[i] * wc[i];
          sum += v * wc[W];
          for (int i = 0; i + 1 < W; ++i) window[i] = window[i + 1];
          if (W > 0) window[W - 1] = v;
          v = Silu(sum);
          pre[&v - want.data()] = sum;
          if (o == r.checkpoint_at) {
            std::memcpy(&want_state[lay.state_offset + r.checkpoint + c * W], window, W * 4);
          }
        }
        std::memcpy(&want_state[lay.state_offset + r.next + c * W], window, W * 4);
      }
    }
    const std::vector<float> got_state = FromDevice<float>(sb, state.size());
    for (size_t i = 0; i < state.size(); ++i) {
      ASSERT_EQ(Bits(got_state[i]), Bits(want_state[i])) << "state float " << i;
    }
    const std::vector<float> got = FromDevice<float>(xb, x.size());
    double worst = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double y = want[i];
      const double bound = (4 * std::fabs(pre[i]) + 16) * kU * std::fabs(y);
      const double err = std::fabs(double{got[i]} - y);
      ASSERT_LE(err, bound) << "float " << i << " want " << y << " got " << got[i];
      worst = std::max(worst, err / std::max(std::fabs(y), 1e-30) / kU);
    }
    std::printf("  d_conv %lld: worst %.1f u of |y|\n", static_cast<long long>(d_conv), worst);
  }
}

struct RuleCase {
  int64_t n_k_heads, n_v_heads, dim;
  bool tiled, separate;
};

TEST_F(GpuDeltaNetOps, DeltaRuleMatchesTheCpuWithinTheDerivedBound) {
  // qwen3next-tiny's shape (grouped, ssm_ba), qwen35moe's (tiled, ssm_beta/ssm_alpha), heads
  // of two state rows a thread (128) and of fewer rows than threads (32).
  const RuleCase cases[] = {{2, 4, 64, false, false},
                            {2, 4, 64, true, true},
                            {1, 2, 128, false, false},
                            {2, 2, 32, true, false}};
  for (const RuleCase& c : cases) {
    SCOPED_TRACE(testing::Message() << "heads " << c.n_k_heads << "/" << c.n_v_heads << " dim "
                                    << c.dim << " tiled " << c.tiled << " separate " << c.separate);
    std::mt19937 rng(static_cast<uint32_t>(11 + c.dim + c.tiled));
    const int64_t S = c.dim, Hk = c.n_k_heads, H = c.n_v_heads, K = Hk * S, V = H * S;
    const int64_t C = 2 * K + V, stride = C + 3, conv = 7;  // conv: a window's floats first
    const Layout lay(static_cast<uint64_t>(conv + H * S * S));
    const uint64_t qkv_off = 2, ba_off = 1, z_off = 4, out_off = 6;
    const std::vector<float> qkv = Gaussian(qkv_off + kTokens * stride, 1.0f, rng);
    const std::vector<float> ba = Gaussian(ba_off + kTokens * 2 * H, 1.5f, rng);
    const std::vector<float> z = Gaussian(z_off + kTokens * V, 1.0f, rng);
    // params: dt (H) at 3, A (H) after it, the norm (S) after that.
    std::vector<float> params = Gaussian(3 + 2 * H + S + 1, 1.0f, rng);
    for (int64_t h = 0; h < H; ++h) params[3 + H + h] = -std::exp(0.5f * params[3 + H + h]);
    std::vector<float> state =
        Gaussian(lay.state_offset + kSeqs * 3 * lay.copy_floats + 4, 0.3f, rng);
    for (int s = 0; s < kSeqs; ++s) {
      for (int cp = 1; cp < 3; ++cp) {
        if (s == 2 && cp == 1) continue;
        std::fill_n(state.begin() + lay.state_offset + lay.Copy(s, cp) + conv, H * S * S,
                    kSentinel);
      }
    }
    std::vector<float> out(out_off + kTokens * V + 3, kSentinel);
    const Buffer qb = ToDevice(qkv), bb = ToDevice(ba), zb = ToDevice(z), pb = ToDevice(params);
    const Buffer rb = ToDevice(lay.words);
    Buffer sb = ToDevice(state), ob = ToDevice(out);
    GatedDeltaArgs a;
    a.qkv = &qb;
    a.qkv_offset = qkv_off;
    a.qkv_stride = stride;
    a.ba = &bb;
    a.ba_offset = ba_off;
    a.z = &zb;
    a.z_offset = z_off;
    a.out = &ob;
    a.out_offset = out_off;
    a.n = kTokens;
    a.n_k_heads = Hk;
    a.n_v_heads = H;
    a.dim = S;
    a.tiled = c.tiled;
    a.separate_beta_alpha = c.separate;
    a.params = &pb;
    a.dt_offset = 3, a.a_offset = 3 + H, a.norm_offset = 3 + 2 * H;
    a.runs = lay.Bound(&rb);
    a.state = &sb;
    a.state_offset = lay.state_offset;
    a.heads_offset = conv;
    a.copy_floats = lay.copy_floats;
    a.eps = 1e-6f;
    a.scale = 1.0f / std::sqrt(static_cast<float>(S));
    ASSERT_TRUE(Run(a).ok());
    const std::vector<float> got_state = FromDevice<float>(sb, state.size());
    const std::vector<float> got = FromDevice<float>(ob, out.size());

    // The CPU: engine/attention_deltanet.cc's DeltaRule with the scalar kernel, and beside it
    // each state element's and output's magnitude (every term's absolute value) in double.
    std::vector<float> want_state = state, want = out;
    std::vector<double> m_abs(state.size(), 0.0), bound_rel(state.size(), 0.0);
    for (size_t i = 0; i < state.size(); ++i) m_abs[i] = std::fabs(double{state[i]});
    const int64_t per_k = H / Hk, SS = S * S;
    double worst_state = 0, worst_out = 0;
    int64_t checked = 0;
    for (const DeltaNetRun& r : lay.runs) {
      for (int64_t h = 0; h < H; ++h) {
        const int64_t kh = c.tiled ? h % Hk : h / per_k;
        const int64_t b_at = c.separate ? h : (h / per_k) * 2 * per_k + h % per_k;
        const int64_t a_at = c.separate ? H + h : b_at + per_k;
        const uint64_t next = lay.state_offset + r.next + conv + h * SS;
        double carried = 0;  // the bound so far, relative to the current magnitudes
        for (uint32_t o = r.begin; o < r.end; ++o) {
          const uint32_t t = lay.order[o];
          const float* row = qkv.data() + qkv_off + t * stride;
          std::vector<float> q(row + kh * S, row + (kh + 1) * S);
          std::vector<float> k(row + K + kh * S, row + K + (kh + 1) * S);
          for (std::vector<float>* x : {&q, &k}) {  // ggml_l2_norm, summed in double
            double sum = 0;
            for (float v : *x) sum += static_cast<double>(v * v);
            const float scale = 1.0f / std::fmax(std::sqrt(static_cast<float>(sum)), 1e-6f);
            for (float& v : *x) v *= scale;
          }
          const float* bat = ba.data() + ba_off + t * 2 * H;
          const float g_arg = bat[a_at] + params[3 + h];
          const float g = Softplus(g_arg) * params[3 + H + h];
          const bool first = o == r.begin;
          const bool zeros = first && r.source == kNone;
          const uint64_t in = first && !zeros ? lay.state_offset + r.source + conv + h * SS : next;
          // The magnitudes, before the kernel overwrites the state.
          const float decay = std::exp(g), beta = Sigmoid(bat[b_at]);
          std::vector<double> mag(SS), o_abs(S);
          for (int64_t j = 0; j < S; ++j) {
            double mk = 0;
            for (int64_t i = 0; i < S; ++i) {
              mag[j * S + i] = zeros ? 0.0 : decay * m_abs[in + j * S + i];
              mk += mag[j * S + i] * std::fabs(k[i]);
            }
            const double d = (std::fabs(row[2 * K + h * S + j]) + mk) * beta;
            double mq = 0;
            for (int64_t i = 0; i < S; ++i) {
              mag[j * S + i] += d * std::fabs(k[i]);
              mq += mag[j * S + i] * std::fabs(q[i]);
            }
            o_abs[j] = mq / std::sqrt(static_cast<double>(S));
          }
          DeltaRuleArgs da;
          da.state_in = zeros ? nullptr : want_state.data() + in;
          da.state_out = want_state.data() + next;
          da.q = q.data();
          da.k = k.data();
          da.v = row + 2 * K + h * S;
          da.decay = decay;
          da.beta = beta;
          da.scale = a.scale;
          da.dim_k = static_cast<int>(S);
          da.dim_v = static_cast<int>(S);
          std::vector<float> o_head(S);
          da.out = o_head.data();
          kernels::DeltaRuleScalar(da);
          for (int64_t i = 0; i < SS; ++i) m_abs[next + i] = mag[i];
          const double X = std::max(
              {std::fabs(double{bat[b_at]}), std::fabs(double{g_arg}), std::fabs(double{g})});
          carried += (S / 64.0 + 24 + 8 * X + 2 * S + 4) * kU;
          if (o == r.checkpoint_at) {
            const uint64_t cp = lay.state_offset + r.checkpoint + conv + h * SS;
            std::copy_n(want_state.begin() + next, SS, want_state.begin() + cp);
            std::copy_n(m_abs.begin() + next, SS, m_abs.begin() + cp);
            std::fill_n(bound_rel.begin() + cp, SS, carried);
          }
          std::fill_n(bound_rel.begin() + next, SS, carried);
          // The gated norm.
          double sq = 0, o_err = 0;
          for (int64_t j = 0; j < S; ++j) {
            sq += double{o_head[j]} * o_head[j];
            o_err = std::max(o_err, carried * o_abs[j]);
          }
          const double rms = std::sqrt(sq / S);
          float* y = want.data() + out_off + t * V + h * S;
          std::vector<float> normed(S);
          RmsNorm(o_head.data(), params.data() + 3 + 2 * H, S, 1e-6f, normed.data());
          for (int64_t j = 0; j < S; ++j) {
            const float zj = z[z_off + t * V + h * S + j];
            y[j] = normed[j] * Silu(zj);
            const double gate = std::fabs(double{params[3 + 2 * H + j]} * Silu(zj));
            const double err_o = carried * o_abs[j];
            const double bound = gate / rms * (err_o + std::fabs(double{o_head[j]}) * o_err / rms) +
                                 (S / 64.0 + 40 + 4 * std::fabs(double{zj})) * kU * std::fabs(y[j]);
            const size_t at = out_off + t * V + h * S + j;
            const double err = std::fabs(double{got[at]} - y[j]);
            ASSERT_LE(err, bound) << "token " << t << " head " << h << " j " << j << " want "
                                  << y[j] << " got " << got[at];
            worst_out = std::max(worst_out, err / bound);
            ++checked;
          }
        }
      }
    }
    // The states: every written copy within its bound, everything else untouched.
    for (size_t i = 0; i < state.size(); ++i) {
      if (bound_rel[i] == 0) {
        ASSERT_EQ(Bits(got_state[i]), Bits(want_state[i])) << "state float " << i;
        continue;
      }
      const double err = std::fabs(double{got_state[i]} - want_state[i]);
      ASSERT_LE(err, bound_rel[i] * m_abs[i]) << "state float " << i;
      worst_state = std::max(worst_state, err / (bound_rel[i] * m_abs[i]));
    }
    for (size_t i = 0; i < out.size(); ++i) {  // floats no token owns
      const size_t rel = i < out_off ? 0 : i - out_off;
      if (i < out_off || rel >= static_cast<size_t>(kTokens * V)) {
        ASSERT_EQ(Bits(got[i]), Bits(kSentinel)) << "out float " << i;
      }
    }
    EXPECT_EQ(checked, kTokens * V);
    std::printf("  dim %lld: worst error %.3f of the bound (states), %.3f (outputs)\n",
                static_cast<long long>(S), worst_state, worst_out);
  }
}

TEST_F(GpuDeltaNetOps, RefusesShapesAndRangesOutsideTheBuffers) {
  const Layout lay(64);
  const Buffer rb = ToDevice(lay.words);
  Buffer xb = ToDevice(std::vector<float>(kTokens * 16, 0.0f));
  const Buffer wb = ToDevice(std::vector<float>(16 * 4, 0.0f));
  Buffer sb = ToDevice(std::vector<float>(lay.state_offset + kSeqs * 3 * 64, 0.0f));
  DeltaConvArgs a;
  a.x = &xb;
  a.n = kTokens;
  a.channels = 16;
  a.weight = &wb;
  a.d_conv = 4;
  a.runs = lay.Bound(&rb);
  a.state = &sb;
  a.state_offset = lay.state_offset;
  a.copy_floats = 64;
  EXPECT_TRUE(Run(a).ok());
  DeltaConvArgs bad = a;
  bad.d_conv = 10;  // a window past the shader's
  EXPECT_EQ(Run(bad).code(), StatusCode::kInvalidArgument);
  bad = a;
  bad.x_offset = 1;  // one float past x
  EXPECT_EQ(Run(bad).code(), StatusCode::kInvalidArgument);
  bad = a;
  bad.runs.n_order = kTokens + 1;  // more tokens than rows
  EXPECT_EQ(Run(bad).code(), StatusCode::kInvalidArgument);
  bad = a;
  bad.state_offset = kSeqs * 3 * 64 - 10;  // no room for a copy
  EXPECT_EQ(Run(bad).code(), StatusCode::kInvalidArgument);

  GatedDeltaArgs g;
  const Buffer one = ToDevice(std::vector<float>(1024, 0.0f));
  g.qkv = g.ba = g.z = g.params = &one;
  g.out = &xb;
  g.n = 1;
  g.n_k_heads = 2;
  g.n_v_heads = 3;  // not a multiple of the key heads
  g.dim = 4;
  g.runs = lay.Bound(&rb);
  g.runs.n_order = 1;
  g.state = &sb;
  g.copy_floats = 64;
  EXPECT_EQ(Run(g).code(), StatusCode::kInvalidArgument);
  g.n_v_heads = 2;
  g.dim = 300;  // past the shader's 256
  EXPECT_EQ(Run(g).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mt::gpu
