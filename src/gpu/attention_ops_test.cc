// Tests of gpu/attention_ops.h against the CPU kernels it mirrors (kernels/ops.h,
// kernels/attention.h), on random data at offsets off any alignment, with padded strides; the
// floats around each output must stay untouched.
//
// Tolerances (u = 2^-24; Vulkan's precision: +, -, * correctly rounded, x / y 2.5 ulp, sqrt
// 1 / inversesqrt's (2 + 2.5 ulp), exp 3 + 2|x| ulp; an ulp is at most 2u of the value):
//  - bias add and StoreKv: the same bits (one correctly rounded add; integer rounding).
//  - RoPE: the CPU and the device each round two products and a sum (no fusing: `precise`),
//    so each is off the exact value by at most 2u of the sum of the terms' magnitudes
//    (|x0 c| + |x1 s| for x0 c - x1 s): 4u of it between them.
//  - RMS norm: the device's sum of squares (64 sequential sums of dim / 64 squares, then a
//    6-level tree) is off by (dim / 64 + 7) u relative, / dim by 5u, + eps by u, sqrt by 9u
//    and 1 / by 5u: the scale by (dim / 64 + 13) u / 2 + 14u, the output by 2u more; the CPU's
//    (a double sum) by 3u. Both within (dim / 64 + 32) u of |y|.
//  - attention: kernels/attention_test.cc's bound against the definition in double, with the
//    sink counted among the scores, e_exp = (3 + 2R) 2^-23 (R the range of the scores and the
//    sink) and 6u more for the division at the end; the CPU kernel within its own bound
//    (e_exp 2^-21) of the same reference, so the reference means what the CPU computes.
// A missing or extra position moves an output by about A_i / n_pos, far above these bounds
// (a window off by one fails them: tried).
#include "gpu/attention_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/check.h"
#include "gpu/ops_test_fixture.h"
#include "kernels/attention.h"
#include "kernels/ops.h"
#include "quant/dequant.h"
#include "quant/float16.h"

namespace mt::gpu {
namespace {

class GpuAttentionOps : public GpuOpsTest<AttentionOps> {};

TEST_F(GpuAttentionOps, AddBiasMatchesTheCpuBitForBit) {
  struct Case {
    int64_t rows, width, stride;
    uint64_t x_offset, bias_offset;
  };
  const Case cases[] = {
      {1, 64, 0, 0, 0}, {7, 100, 103, 5, 3}, {33, 17, 17, 1, 0}, {3, 2880, 0, 4, 9}};
  std::mt19937 rng(1);
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "rows " << c.rows << " width " << c.width);
    const int64_t stride = c.stride > 0 ? c.stride : c.width;
    std::vector<float> x = Gaussian(c.x_offset + c.rows * stride + 7, 1.0f, rng);
    const std::vector<float> bias = Gaussian(c.bias_offset + c.width, 1.0f, rng);
    Buffer xb = ToDevice(x), bb = ToDevice(bias);
    AddBiasArgs a;
    a.x = &xb;
    a.x_offset = c.x_offset;
    a.rows = c.rows;
    a.width = c.width;
    a.stride = c.stride;
    a.bias = &bb;
    a.bias_offset = c.bias_offset;
    ASSERT_TRUE(Run(a).ok());
    for (int64_t r = 0; r < c.rows; ++r) {
      for (int64_t i = 0; i < c.width; ++i)
        x[c.x_offset + r * stride + i] += bias[c.bias_offset + i];
    }
    const std::vector<float> got = FromDevice<float>(xb, x.size());
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(Bits(got[i]), Bits(x[i])) << "float " << i;
  }
}

TEST_F(GpuAttentionOps, CopyRowsCopiesTheBits) {
  struct Case {
    int64_t rows, width, x_stride, y_stride;
    uint64_t x_offset, y_offset;
  };
  // MLA's q_pe: rows (token, head) of R floats, N + R apart, into rows L + R apart at L;
  // a gated GQA's q: the first half of each head's [q | gate] (token, head) row.
  const Case cases[] = {
      {1, 64, 0, 0, 0, 0}, {12, 32, 96, 160, 64, 128}, {70, 3, 5, 4, 1, 2}, {12, 64, 128, 0, 0, 0}};
  std::mt19937 rng(2);
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "rows " << c.rows << " width " << c.width);
    const int64_t xs = c.x_stride > 0 ? c.x_stride : c.width;
    const int64_t ys = c.y_stride > 0 ? c.y_stride : c.width;
    const std::vector<float> x = Gaussian(c.x_offset + c.rows * xs + 3, 1.0f, rng);
    std::vector<float> y(c.y_offset + c.rows * ys + 5, kSentinel);
    const Buffer xb = ToDevice(x);
    Buffer yb = ToDevice(y);
    CopyRowsArgs a;
    a.x = &xb;
    a.x_offset = c.x_offset;
    a.y = &yb;
    a.y_offset = c.y_offset;
    a.rows = c.rows;
    a.width = c.width;
    a.x_stride = c.x_stride;
    a.y_stride = c.y_stride;
    ASSERT_TRUE(Run(a).ok());
    for (int64_t r = 0; r < c.rows; ++r) {
      for (int64_t i = 0; i < c.width; ++i) {
        y[c.y_offset + r * ys + i] = x[c.x_offset + r * xs + i];
      }
    }
    const std::vector<float> got = FromDevice<float>(yb, y.size());
    for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(Bits(got[i]), Bits(y[i])) << "float " << i;
    a.y_offset = y.size() - ((c.rows - 1) * ys + c.width) + 1;  // one float past y's buffer
    EXPECT_EQ(Run(a).code(), StatusCode::kInvalidArgument);
  }
}

TEST_F(GpuAttentionOps, RmsNormMatchesTheCpu) {
  struct Case {
    int64_t rows, dim, stride;
    bool weight, in_place;
    float sigma;  // of x: 1e-3 makes eps (1e-6) count
  };
  const Case cases[] = {{1, 64, 0, true, false, 1.0f},     {5, 2880, 2890, true, false, 1.0f},
                        {7, 128, 0, true, true, 1.0f},     {3, 4096, 0, false, false, 3.0f},
                        {2, 100, 101, true, false, 1e-3f}, {9, 1, 0, true, true, 1.0f}};
  std::mt19937 rng(2);
  double worst = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "rows " << c.rows << " dim " << c.dim << " in place "
                                    << c.in_place << " sigma " << c.sigma);
    const int64_t stride = c.stride > 0 ? c.stride : c.dim;
    const uint64_t x_off = 3, y_off = c.in_place ? x_off : 7, w_off = 5;
    const uint64_t floats = c.rows * stride + 11;
    std::vector<float> x = Gaussian(floats, c.sigma, rng);
    const std::vector<float> w = Gaussian(w_off + c.dim, 1.0f, rng);
    Buffer xb = ToDevice(x), wb = ToDevice(w);
    Buffer yb = ToDevice(std::vector<float>(floats, kSentinel));
    RmsNormArgs a;
    a.x = &xb;
    a.x_offset = x_off;
    a.y = c.in_place ? &xb : &yb;
    a.y_offset = y_off;
    a.rows = c.rows;
    a.dim = c.dim;
    a.stride = c.stride;
    a.weight = c.weight ? &wb : nullptr;
    a.weight_offset = w_off;
    a.eps = 1e-6f;
    ASSERT_TRUE(Run(a).ok());
    std::vector<float> want = c.in_place ? x : std::vector<float>(floats, kSentinel);
    for (int64_t r = 0; r < c.rows; ++r) {
      RmsNorm(x.data() + x_off + r * stride, c.weight ? w.data() + w_off : nullptr, c.dim, a.eps,
              want.data() + y_off + r * stride);
    }
    const std::vector<float> got = FromDevice<float>(c.in_place ? xb : yb, floats);
    const double rel = (static_cast<double>(c.dim) / 64 + 32) * kU;
    for (uint64_t i = 0; i < floats; ++i) {
      const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
      ASSERT_LE(err, rel * std::fabs(want[i]))
          << "float " << i << ": " << got[i] << ", want " << want[i];
      if (want[i] != 0) worst = std::max(worst, err / std::fabs(want[i]) / kU);
    }
  }
  std::printf("  rms norm: worst |err| %.2f u of |y|\n", worst);
}

TEST_F(GpuAttentionOps, RopeMatchesTheCpu) {
  struct Case {
    int64_t n, heads, head_dim, n_rot;
    bool neox;
    int64_t stride;
  };
  const Case cases[] = {{1, 1, 64, 64, false, 0},  {5, 4, 128, 128, true, 520},
                        {3, 8, 128, 64, false, 0}, {7, 2, 80, 32, true, 0},
                        {2, 3, 64, 2, false, 200}, {4, 16, 64, 64, true, 0}};
  std::mt19937 rng(3);
  double worst = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "n " << c.n << " heads " << c.heads << " head_dim "
                                    << c.head_dim << " n_rot " << c.n_rot << " neox " << c.neox);
    const int64_t row = c.heads * c.head_dim;
    const int64_t stride = c.stride > 0 ? c.stride : row;
    const uint64_t x_off = 1, cs_off = 6;
    std::vector<float> x = Gaussian(x_off + c.n * stride + 5, 1.0f, rng);
    std::vector<float> cs(cs_off + c.n * c.n_rot + 3, kSentinel);
    RopeFreqs f;
    f.n_rot = static_cast<int>(c.n_rot);
    f.freq_base = c.neox ? 1e6f : 1e4f;
    for (int64_t t = 0; t < c.n; ++t) {
      RopeAngles(f, static_cast<int>(37 * t + 3 + (t % 2) * 4000),
                 cs.data() + cs_off + t * c.n_rot);
    }
    Buffer xb = ToDevice(x), csb = ToDevice(cs);
    RopeArgs a;
    a.x = &xb;
    a.x_offset = x_off;
    a.n = c.n;
    a.heads = c.heads;
    a.head_dim = c.head_dim;
    a.stride = c.stride;
    a.n_rot = c.n_rot;
    a.neox = c.neox;
    a.cos_sin = &csb;
    a.cos_sin_offset = cs_off;
    ASSERT_TRUE(Run(a).ok());
    // The bound of each output: 4u of its terms' magnitudes, from the inputs.
    std::vector<double> tol(x.size(), 0.0);
    std::vector<float> want = x;
    for (int64_t t = 0; t < c.n; ++t) {
      const float* angles = cs.data() + cs_off + t * c.n_rot;
      const int64_t half = c.n_rot / 2;
      for (int64_t h = 0; h < c.heads; ++h) {
        const int64_t at = x_off + t * stride + h * c.head_dim;
        for (int64_t i = 0; i < half; ++i) {
          const int64_t ia = at + (c.neox ? i : 2 * i), ib = at + (c.neox ? i + half : 2 * i + 1);
          const double x0 = std::fabs(x[ia]), x1 = std::fabs(x[ib]);
          const double c = std::fabs(angles[i]), s = std::fabs(angles[half + i]);
          tol[ia] = 4 * kU * (x0 * c + x1 * s);
          tol[ib] = 4 * kU * (x0 * s + x1 * c);
        }
      }
      RopeRotate(want.data() + x_off + t * stride, static_cast<int>(c.heads),
                 static_cast<int>(c.head_dim), static_cast<int>(c.n_rot), angles,
                 c.neox ? RopeMode::kNeox : RopeMode::kNorm);
    }
    const std::vector<float> got = FromDevice<float>(xb, x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
      ASSERT_LE(err, tol[i]) << "float " << i << ": " << got[i] << ", want " << want[i];
      if (tol[i] > 0) worst = std::max(worst, err / tol[i]);
    }
  }
  std::printf("  rope: worst |err| / tolerance %.3f\n", worst);
}

// The device's x * sigmoid(g) against the formula in double: its exp within (3 + 2|g|) ulp,
// + and * within u, 1 / within 2.5 ulp: (13 + 4|g|) u of the value to first order, (14 + 4|g|)
// u with room; past the range where Vulkan bounds the division (1 + e^-g > 2^126, a sigmoid
// below 2^-126) anything up to |x| 2^-125. The CPU's formula (engine/attention_gqa.cc: expf
// within an ulp, three correctly rounded ops) within 6u of the same reference, so it means what
// the CPU computes. A gate read from the wrong float, or sigmoid(+g), misses by far more.
TEST_F(GpuAttentionOps, SigmoidGateMatchesTheCpu) {
  struct Case {
    int64_t rows, width, x_stride, g_stride;
    uint64_t x_offset, g_offset;
  };
  // qwen3next's gate: rows (token, head) of head_dim outputs, each gated by the second half of
  // its head's [q | gate] row (2 head_dim apart); then padded strides at odd offsets.
  const Case cases[] = {{12, 64, 0, 128, 0, 64}, {32, 256, 0, 512, 0, 256}, {70, 3, 5, 4, 1, 2}};
  std::mt19937 rng(3);
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "rows " << c.rows << " width " << c.width);
    const int64_t xs = c.x_stride > 0 ? c.x_stride : c.width;
    const int64_t gs = c.g_stride > 0 ? c.g_stride : c.width;
    std::vector<float> x = Gaussian(c.x_offset + c.rows * xs + 3, 1.0f, rng);
    std::vector<float> g = Gaussian(c.g_offset + c.rows * gs + 5, 4.0f, rng);
    const float probes[] = {0.0f,   -0.0f, 1e-30f, -1e-30f, 20.0f,   -20.0f, 87.0f,
                            -87.0f, 88.0f, -88.0f, 100.0f,  -100.0f, 0.5f,   -0.5f};
    for (size_t j = 0; j < std::size(probes); ++j) {
      g[c.g_offset + (j * 7 % c.rows) * gs + j % c.width] = probes[j];
    }
    Buffer xb = ToDevice(x);
    const Buffer gb = ToDevice(g);
    SigmoidGateArgs a;
    a.x = &xb;
    a.x_offset = c.x_offset;
    a.g = &gb;
    a.g_offset = c.g_offset;
    a.rows = c.rows;
    a.width = c.width;
    a.x_stride = c.x_stride;
    a.g_stride = c.g_stride;
    ASSERT_TRUE(Run(a).ok());
    const std::vector<float> got = FromDevice<float>(xb, x.size());
    std::vector<bool> gated(x.size(), false);
    double worst = 0;  // of the bound
    for (int64_t r = 0; r < c.rows; ++r) {
      for (int64_t i = 0; i < c.width; ++i) {
        const size_t at = c.x_offset + r * xs + i;
        const float xv = x[at], gv = g[c.g_offset + r * gs + i];
        gated[at] = true;
        const double want = double{xv} / (1.0 + std::exp(-double{gv}));
        const float cpu = xv * (1.0f / (1.0f + std::exp(-gv)));  // engine/attention_gqa.cc
        const double abs_floor = std::fabs(double{xv}) * 0x1p-125;
        ASSERT_LE(std::fabs(cpu - want), 6 * kU * std::fabs(want) + abs_floor)
            << "cpu, float " << at << " g " << gv;
        const double tol = (14 + 4 * std::fabs(double{gv})) * kU * std::fabs(want) + abs_floor;
        ASSERT_LE(std::fabs(got[at] - want), tol) << "float " << at << " x " << xv << " g " << gv;
        if (tol > 0) worst = std::max(worst, std::fabs(got[at] - want) / tol);
      }
    }
    std::printf("  rows %lld width %lld: worst |gpu - exact| %.2f of the bound\n",
                static_cast<long long>(c.rows), static_cast<long long>(c.width), worst);
    for (size_t i = 0; i < x.size(); ++i) {
      if (!gated[i]) ASSERT_EQ(Bits(got[i]), Bits(x[i])) << "untouched float " << i;
    }
    a.g_offset = g.size() - ((c.rows - 1) * gs + c.width) + 1;  // one float past g's buffer
    EXPECT_EQ(Run(a).code(), StatusCode::kInvalidArgument);
  }
}

// Floats that exercise f16 rounding: ties both ways, overflow to inf, subnormals, underflow to
// zero, NaNs and infinities of both signs, then random values of every magnitude f16 has.
std::vector<float> F16Probes(size_t n, std::mt19937& rng) {
  std::vector<float> v = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f,
                          65504.0f,        65519.0f,
                          65520.0f,        -70000.0f,
                          0x1p-24f,        0x1p-25f,
                          0x1.8p-25f,      3 * 0x1p-25f,
                          0x1p-15f,        -0x1.0p-14f,
                          0x1.ffcp-15f,    0.0f,
                          -0.0f,           1e-30f,
                          std::nanf(""),   -std::nanf(""),
                          INFINITY,        -INFINITY};
  std::uniform_real_distribution<float> exponent(-26.0f, 17.0f);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  while (v.size() < n) {
    const float x = std::ldexp(mantissa(rng), static_cast<int>(std::floor(exponent(rng))));
    v.push_back(rng() % 2 ? x : -x);
  }
  v.resize(n);
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

// Blocks of 32 floats that exercise q8_0's rounding: codes at ties (x / d = k + 1/2, and
// 0.49999997, which the CPU's c + 0.5 rounds up), a zero block, a subnormal maximum (scale 0),
// maxima whose amax / 127 is an f16 tie or just past one, one whose scale overflows f16, an
// infinity and a NaN (the block's scale NaN), then blocks of random values at every magnitude.
std::vector<float> Q8Probes(size_t n, std::mt19937& rng) {
  const std::vector<std::vector<float>> special = {
      {127.0f, 2.5f, -2.5f, 0.5f, -0.5f, 0x1.fffffep-2f, -0x1.fffffep-2f, 1.5f, 126.5f, -126.5f},
      {0.0f, -0.0f},
      {1e-40f, -3e-39f},
      {127 * 0x1p-25f, -0x1p-30f},
      {127 * 0x1.000002p-25f, 0x1p-26f},
      {127 * 0x1.002p-14f, 1.0f},
      {1e7f, -9e6f, 3.0f},
      {65504.0f * 127, -1.0f},
      {1.0f, INFINITY, -2.0f},
      {1.0f, std::nanf(""), 5.0f},
  };
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-40, 24);
  std::vector<float> v(n);
  for (size_t b = 0; b * kKvBlockQ8 < n; ++b) {
    const float scale = std::ldexp(1.0f, exponent(rng));
    for (size_t i = b * kKvBlockQ8; i < std::min(n, (b + 1) * kKvBlockQ8); ++i) {
      v[i] = b < special.size() ? 0.0f : gauss(rng) * scale;
    }
    for (size_t i = 0; b < special.size() && i < special[b].size(); ++i) {
      if (b * kKvBlockQ8 + i < n) v[b * kKvBlockQ8 + i] = special[b][i];
    }
  }
  return v;
}

TEST_F(GpuAttentionOps, StoreKvMatchesTheCpuBitForBit) {
  struct Case {
    int64_t n, heads, head_dim, stride;
    uint32_t cells, n_seq;
    KvElem type;
  };
  const Case cases[] = {{5, 2, 64, 0, 16, 3, KvElem::kF16},
                        {5, 2, 64, 0, 16, 3, KvElem::kF32},
                        {9, 8, 128, 1030, 40, 2, KvElem::kF16},
                        {4, 1, 80, 0, 7, 4, KvElem::kF32},
                        {3, 4, 2, 9, 5, 1, KvElem::kF16},
                        // q8_0: rows of 96 (102 bytes) share words with their neighbours
                        // (cells 0 and 1 of sequence 0 in one dispatch); many random blocks.
                        {5, 2, 64, 0, 16, 3, KvElem::kQ8_0},
                        {4, 3, 96, 300, 7, 2, KvElem::kQ8_0},
                        {64, 4, 128, 0, 64, 1, KvElem::kQ8_0}};
  std::mt19937 rng(4);
  for (const Case& c : cases) {
    const KvElemType type = c.type == KvElem::kF16   ? KvElemType::kF16
                            : c.type == KvElem::kF32 ? KvElemType::kF32
                                                     : KvElemType::kQ8_0;
    SCOPED_TRACE(testing::Message() << "n " << c.n << " heads " << c.heads << " head_dim "
                                    << c.head_dim << " type " << static_cast<int>(c.type));
    const int64_t stride = c.stride > 0 ? c.stride : c.heads * c.head_dim;
    const uint64_t x_off = 3, tok_off = 1;
    const uint64_t cache_off = 36;  // bytes: a whole word, off 16-byte alignment
    std::vector<float> x = F16Probes(x_off + c.n * stride, rng);
    if (type == KvElemType::kQ8_0) {  // the probes block by block in each row
      const std::vector<float> probes = Q8Probes(c.n * c.heads * c.head_dim, rng);
      for (int64_t r = 0; r < c.n * c.heads; ++r) {
        std::copy_n(probes.begin() + r * c.head_dim, c.head_dim,
                    x.begin() + x_off + r / c.heads * stride + r % c.heads * c.head_dim);
      }
    }
    // Distinct slots, then one past the cells and one past the sequences: neither stores.
    std::vector<uint32_t> slots(tok_off, 77);
    for (int64_t t = 0; t < c.n; ++t) {
      slots.push_back(static_cast<uint32_t>(t % c.n_seq));
      slots.push_back(static_cast<uint32_t>((t * 3 + 1) % c.cells));
    }
    const int64_t n = c.n + 2;
    slots.insert(slots.end(), {0, c.cells, c.n_seq, 0});
    std::vector<float> x_all = x;  // rows for the two extra tokens
    x_all.resize(x_off + n * stride, 1.0f);
    const uint64_t row_bytes = KvBytes(type, c.head_dim);
    const uint64_t seq_bytes = c.heads * c.cells * row_bytes;
    std::vector<uint8_t> cache(cache_off + c.n_seq * seq_bytes, 0xA5);
    Buffer xb = ToDevice(x_all), tb = ToDevice(slots), cb = ToDevice(cache);
    StoreKvArgs a;
    a.x = &xb;
    a.x_offset = x_off;
    a.n = n;
    a.heads = c.heads;
    a.head_dim = c.head_dim;
    a.stride = c.stride;
    a.tokens = {&tb, tok_off};
    a.cache = &cb;
    a.cache_offset = cache_off;
    a.cells = c.cells;
    a.type = c.type;
    ASSERT_TRUE(Run(a).ok());
    for (int64_t t = 0; t < c.n; ++t) {
      const uint32_t seq = slots[tok_off + 2 * t], pos = slots[tok_off + 2 * t + 1];
      for (int64_t h = 0; h < c.heads; ++h) {
        const uint64_t at = cache_off + ((seq * c.heads + h) * c.cells + pos) * row_bytes;
        StoreKv(x_all.data() + x_off + t * stride + h * c.head_dim, c.head_dim, type,
                cache.data() + at);
      }
    }
    const std::vector<uint8_t> got = FromDevice<uint8_t>(cb, cache.size());
    for (size_t i = 0; i < cache.size(); ++i) {
      ASSERT_EQ(got[i], cache[i]) << "byte " << i << " (row " << (i - cache_off) / row_bytes
                                  << ", byte " << (i - cache_off) % row_bytes << ")";
    }
  }
}

// One attention case: the caches hold n_seq sequences of `cells` cells; tokens (seq, pos).
struct AttendCase {
  const char* name;
  int n_seq, n_head, n_head_kv, d_k, d_v;
  uint32_t cells;
  KvElem k_type, v_type;
  uint32_t window;
  bool sinks;
  float q_gain;  // larger: a sharper softmax
  std::vector<std::pair<uint32_t, uint32_t>> tokens;
  bool v_in_k = false;  // MLA: V is the first d_v values of K's rows (v_type = k_type)
};

// A cache (n_seq, n_kv, cells, d) of random values as the CPU's StoreKv writes them, and those
// values widened (what the device reads; q8_0: d c). Cells past `last[seq]` hold NaN: no token
// reads them.
struct Cache {
  std::vector<uint8_t> bytes;
  std::vector<float> val;
  KvElemType type;
  size_t row_bytes;  // a cell's
};

KvElemType CpuType(KvElem type) {
  return type == KvElem::kF16   ? KvElemType::kF16
         : type == KvElem::kF32 ? KvElemType::kF32
                                : KvElemType::kQ8_0;
}

Cache MakeCache(const AttendCase& c, int d, KvElem type, const std::vector<uint32_t>& last,
                std::mt19937& rng) {
  Cache cache;
  cache.type = CpuType(type);
  cache.row_bytes = KvBytes(cache.type, d);
  const size_t rows = static_cast<size_t>(c.n_seq) * c.n_head_kv * c.cells;
  cache.val = Gaussian(rows * d, 1.0f, rng);
  cache.bytes.resize(rows * cache.row_bytes);
  for (size_t r = 0; r < rows; ++r) {
    float* v = cache.val.data() + r * d;
    if (r % c.cells > last[r / c.cells / c.n_head_kv]) std::fill(v, v + d, std::nanf(""));
    uint8_t* row = cache.bytes.data() + r * cache.row_bytes;
    StoreKv(v, d, cache.type, row);
    if (type == KvElem::kF16) {
      for (int i = 0; i < d; ++i) v[i] = Fp16ToFp32(Fp32ToFp16(v[i]));
    } else if (type == KvElem::kQ8_0) {
      DequantizeRow(GgmlType::kQ8_0, row, v, d);
    }
  }
  return cache;
}

// The exact output of one (token, head) in double, and the bounds of kernels/attention_test.cc
// for an exp within e_exp (or, e_exp < 0, within (3 + 2R) 2^-23) and `extra` more roundings.
struct Expected {
  std::vector<double> out, tol_gpu, tol_cpu, a;  // (d_v); a: sum_j w_j |V[j][i]|
};

Expected Reference(const float* q, const float* k, const float* v, int64_t n_pos, int d_k, int d_v,
                   float scale, const float* sink) {
  std::vector<double> s(n_pos);
  double e = 0, smax = -INFINITY, smin = INFINITY;
  for (int64_t j = 0; j < n_pos; ++j) {
    double dot = 0, mag = 0;
    for (int i = 0; i < d_k; ++i) {
      dot += double{q[i]} * k[j * d_k + i];
      mag += std::fabs(double{q[i]} * k[j * d_k + i]);
    }
    s[j] = scale * dot;
    e = std::max(e, (d_k + 2) * kU * std::fabs(scale) * mag);
    smax = std::max(smax, s[j]);
    smin = std::min(smin, s[j]);
  }
  if (sink != nullptr) {
    smax = std::max(smax, double{*sink});
    smin = std::min(smin, double{*sink});
  }
  double l = sink != nullptr ? std::exp(*sink - smax) : 0.0;
  std::vector<double> w(n_pos);
  for (int64_t j = 0; j < n_pos; ++j) l += w[j] = std::exp(s[j] - smax);
  const double tiles = static_cast<double>((n_pos + kAttendTile - 1) / kAttendTile);
  const double range = smax - smin + 2 * e;
  auto bound = [&](double e_exp, double extra, double a, double vmax) {
    const double lambda = 2 * e + (tiles + 1) * (e_exp + kU * range);
    const double grow = std::exp(2 * lambda);
    return a * ((grow - 1) + grow * (2 * n_pos + 2 * tiles + 4 + extra) * kU) +
           static_cast<double>(n_pos) * std::ldexp(1.0, -125) * vmax;
  };
  Expected r;
  r.out.assign(d_v, 0.0);
  r.tol_gpu.assign(d_v, 0.0);
  r.tol_cpu.assign(d_v, 0.0);
  r.a.assign(d_v, 0.0);
  for (int i = 0; i < d_v; ++i) {
    double vmax = 0;
    for (int64_t j = 0; j < n_pos; ++j) {
      r.out[i] += w[j] / l * v[j * d_v + i];
      r.a[i] += w[j] / l * std::fabs(v[j * d_v + i]);
      vmax = std::max(vmax, std::fabs(double{v[j * d_v + i]}));
    }
    r.tol_gpu[i] = bound((3 + 2 * range) * 0x1p-23, 6, r.a[i], vmax);
    r.tol_cpu[i] = bound(0x1p-21, 0, r.a[i], vmax);
  }
  return r;
}

TEST_F(GpuAttentionOps, AttendMatchesTheCpu) {
  using KE = KvElem;
  // clang-format off
  const std::vector<AttendCase> cases = {
      // name, n_seq, n_head, n_head_kv, d_k, d_v, cells, K, V, window, sinks, q_gain, tokens
      {"mha f32 d64", 2, 4, 4, 64, 64, 80, KE::kF32, KE::kF32, 0, false, 1.0f,
       {{0, 0}, {1, 62}, {0, 63}, {1, 64}, {0, 1}, {1, 10}}},
      {"gqa4 f16 d128 sinks", 3, 8, 2, 128, 128, 208, KE::kF16, KE::kF16, 0, true, 1.0f,
       {{2, 199}, {0, 64}, {1, 0}, {0, 130}, {2, 65}, {1, 63}}},
      {"gqa8 d80 window 50 sinks k f16 v f32", 2, 8, 1, 80, 80, 210, KE::kF16, KE::kF32, 50,
       true, 1.0f, {{0, 200}, {1, 49}, {1, 50}, {0, 51}, {1, 120}, {0, 3}}},
      {"gqa4 d_k 192 d_v 128 window 64 k f32 v f16", 1, 4, 1, 192, 128, 200, KE::kF32, KE::kF16,
       64, false, 1.0f, {{0, 63}, {0, 64}, {0, 65}, {0, 130}, {0, 199}}},
      {"d256 window 1 sinks", 2, 2, 2, 256, 256, 70, KE::kF32, KE::kF16, 1, true, 1.0f,
       {{0, 64}, {1, 0}, {1, 5}}},
      // Dims past 128 (a thread's 2nd pair), the maximum rising in later tiles.
      {"d256 sinks", 2, 2, 2, 256, 256, 210, KE::kF16, KE::kF32, 0, true, 1.0f,
       {{0, 199}, {1, 130}, {0, 64}}},
      // Sharp: most weights underflow (e^x for x < -87.3 is 0), no NaN.
      {"sharp f16 d64 sinks", 1, 2, 1, 64, 64, 150, KE::kF16, KE::kF16, 0, true, 60.0f,
       {{0, 100}, {0, 5}, {0, 149}}},
      // DeepSeek's MLA dims: the largest.
      {"mla 576/512", 1, 2, 1, 576, 512, 210, KE::kF16, KE::kF16, 0, false, 1.0f,
       {{0, 65}, {0, 0}, {0, 199}}},
      // MLA as GpuMlaAttention runs it: V read from K's rows (their first d_v values).
      {"mla latent rows 576/512 f16", 2, 3, 1, 576, 512, 130, KE::kF16, KE::kF16, 0, false, 1.0f,
       {{0, 65}, {1, 0}, {0, 129}, {1, 64}}, true},
      {"mla latent rows 160/128 f32", 1, 4, 1, 160, 128, 80, KE::kF32, KE::kF32, 0, false, 1.0f,
       {{0, 0}, {0, 1}, {0, 63}, {0, 64}, {0, 79}}, true},
      // q8_0: the query rounded to q8_0 for K's scores (q' in the reference), V's d c; rows of
      // 96 or 160 dims (102, 170 bytes) off words; MLA's latent rows in q8_0.
      {"gqa2 q8_0 d64 sinks", 2, 4, 2, 64, 64, 80, KE::kQ8_0, KE::kQ8_0, 0, true, 1.0f,
       {{0, 0}, {1, 62}, {0, 63}, {1, 64}, {0, 79}}},
      {"q8_0 K f16 V d128 window 40", 1, 4, 1, 128, 128, 130, KE::kQ8_0, KE::kF16, 40, false,
       1.0f, {{0, 39}, {0, 40}, {0, 129}}},
      {"f32 K q8_0 V d96", 2, 2, 1, 96, 96, 70, KE::kF32, KE::kQ8_0, 0, false, 1.0f,
       {{0, 65}, {1, 3}, {1, 69}}},
      {"sharp q8_0 d96", 1, 2, 2, 96, 96, 70, KE::kQ8_0, KE::kQ8_0, 0, true, 30.0f,
       {{0, 65}, {0, 1}}},
      {"mla latent rows 160/128 q8_0", 1, 4, 1, 160, 128, 80, KE::kQ8_0, KE::kQ8_0, 0, false,
       1.0f, {{0, 0}, {0, 1}, {0, 64}, {0, 79}}, true},
  };
  // clang-format on
  std::mt19937 rng(5);
  for (const AttendCase& c : cases) {
    SCOPED_TRACE(c.name);
    double worst_gpu = 0, worst_cpu = 0, worst_err = 0, worst_diff = 0;
    const int64_t n = static_cast<int64_t>(c.tokens.size());
    std::vector<uint32_t> last(c.n_seq, 0);
    for (const auto& [seq, pos] : c.tokens) last[seq] = std::max(last[seq], pos);
    const Cache k = MakeCache(c, c.d_k, c.k_type, last, rng);
    Cache v;
    if (c.v_in_k) {  // the values the device reads as V: K's rows' first d_v (bytes: K's)
      v.type = k.type;
      v.row_bytes = k.row_bytes;
      for (size_t r = 0; r < k.val.size() / c.d_k; ++r) {
        v.val.insert(v.val.end(), k.val.begin() + r * c.d_k, k.val.begin() + r * c.d_k + c.d_v);
      }
    } else {
      v = MakeCache(c, c.d_v, c.v_type, last, rng);
    }
    const int64_t q_stride = c.n_head * c.d_k + 2, out_stride = c.n_head * c.d_v + 4;
    const uint64_t q_off = 3, out_off = 5, tok_off = 1, sink_off = 2;
    const uint64_t k_off = 12, v_off = 20;  // bytes
    const std::vector<float> q = Gaussian(q_off + n * q_stride, c.q_gain, rng);
    std::vector<float> sinks = Gaussian(sink_off + c.n_head, 2.0f, rng);
    for (float& z : sinks) z += 1.0f;
    std::vector<uint32_t> slots(tok_off, 99);
    for (const auto& [seq, pos] : c.tokens) slots.insert(slots.end(), {seq, pos});
    std::vector<uint8_t> kb(k_off, 0xEE), vb(v_off, 0xEE);
    kb.insert(kb.end(), k.bytes.begin(), k.bytes.end());
    vb.insert(vb.end(), v.bytes.begin(), v.bytes.end());
    const uint64_t out_floats = out_off + n * out_stride + 3;
    const Buffer qbuf = ToDevice(q), sbuf = ToDevice(sinks), tbuf = ToDevice(slots),
                 kbuf = ToDevice(kb), vbuf = ToDevice(vb);
    Buffer obuf = ToDevice(std::vector<float>(out_floats, kSentinel));
    AttendArgs a;
    a.q = &qbuf;
    a.q_offset = q_off;
    a.q_stride = q_stride;
    a.out = &obuf;
    a.out_offset = out_off;
    a.out_stride = out_stride;
    a.n = n;
    a.n_head = c.n_head;
    a.n_head_kv = c.n_head_kv;
    a.d_k = c.d_k;
    a.d_v = c.d_v;
    a.tokens = {&tbuf, tok_off};
    a.k_cache = &kbuf;
    a.k_offset = k_off;
    a.v_cache = &vbuf;
    a.v_offset = v_off;
    if (c.v_in_k) {
      a.v_cache = &kbuf;
      a.v_offset = k_off;
      a.v_row = c.d_k;
    }
    a.cells = c.cells;
    a.k_type = c.k_type;
    a.v_type = c.v_type;
    a.scale = 1.0f / std::sqrt(static_cast<float>(c.d_k));
    a.window = c.window;
    a.sinks = c.sinks ? &sbuf : nullptr;
    a.sinks_offset = sink_off;
    ASSERT_TRUE(Run(a).ok());
    const std::vector<float> got = FromDevice<float>(obuf, out_floats);

    // The CPU kernel per (token, GQA group), and the reference per (token, head).
    const int group = c.n_head / c.n_head_kv;
    std::vector<float> cpu(c.n_head * c.d_v), scratch(group * kAttendTile);
    std::vector<bool> written(out_floats, false);
    for (int64_t t = 0; t < n; ++t) {
      const auto [seq, pos] = c.tokens[t];
      const uint32_t first = c.window && pos + 1 > c.window ? pos + 1 - c.window : 0;
      const int64_t n_pos = pos + 1 - first;
      for (int kvh = 0; kvh < c.n_head_kv; ++kvh) {
        const size_t row = (static_cast<size_t>(seq) * c.n_head_kv + kvh) * c.cells + first;
        AttendQueries qs;
        qs.q = q.data() + q_off + t * q_stride + kvh * group * c.d_k;
        qs.q_tok_stride = q_stride;
        qs.q_head_stride = c.d_k;
        qs.out = cpu.data() + kvh * group * c.d_v;
        qs.out_tok_stride = c.n_head * c.d_v;
        qs.out_head_stride = c.d_v;
        qs.n_head = group;
        qs.n_tok = 1;
        qs.n_pos = n_pos;
        qs.sinks = c.sinks ? sinks.data() + sink_off + kvh * group : nullptr;
        const uint8_t* v_rows =
            c.v_in_k ? k.bytes.data() + row * k.row_bytes : v.bytes.data() + row * v.row_bytes;
        AttendTokens(qs, k.bytes.data() + row * k.row_bytes, v_rows, {k.type, v.type}, c.d_k,
                     c.v_in_k ? c.d_k : c.d_v, c.d_k, c.d_v, a.scale, scratch.data());
        for (int g = 0; g < group; ++g) {
          const int h = kvh * group + g;
          SCOPED_TRACE(testing::Message()
                       << "token " << t << " (seq " << seq << ", pos " << pos << ") head " << h);
          // A q8_0 K's scores take q' = q rounded to q8_0 (kernels/attention.h), on both sides.
          std::vector<float> q_used(qs.q + g * c.d_k, qs.q + (g + 1) * c.d_k);
          if (c.k_type == KE::kQ8_0) {
            std::vector<uint8_t> q8(KvBytes(KvElemType::kQ8_0, c.d_k));
            StoreKv(q_used.data(), c.d_k, KvElemType::kQ8_0, q8.data());
            DequantizeRow(GgmlType::kQ8_0, q8.data(), q_used.data(), c.d_k);
          }
          const Expected ref = Reference(q_used.data(), k.val.data() + row * c.d_k,
                                         v.val.data() + row * c.d_v, n_pos, c.d_k, c.d_v, a.scale,
                                         c.sinks ? sinks.data() + sink_off + h : nullptr);
          for (int i = 0; i < c.d_v; ++i) {
            const uint64_t at = out_off + t * out_stride + h * c.d_v + i;
            written[at] = true;
            const double gpu_err = std::fabs(got[at] - ref.out[i]);
            const double cpu_err = std::fabs(cpu[h * c.d_v + i] - ref.out[i]);
            ASSERT_LE(gpu_err, ref.tol_gpu[i])
                << "element " << i << ": " << got[at] << ", want " << ref.out[i];
            ASSERT_LE(cpu_err, ref.tol_cpu[i]) << "the CPU, element " << i << ": "
                                               << cpu[h * c.d_v + i] << ", want " << ref.out[i];
            worst_gpu = std::max(worst_gpu, gpu_err / ref.tol_gpu[i]);
            worst_cpu = std::max(worst_cpu, cpu_err / ref.tol_cpu[i]);
            worst_err = std::max(worst_err, gpu_err / ref.a[i]);
            worst_diff = std::max(worst_diff, std::fabs(got[at] - cpu[h * c.d_v + i]) / ref.a[i]);
          }
        }
      }
    }
    for (uint64_t i = 0; i < out_floats; ++i) {
      if (!written[i]) ASSERT_EQ(got[i], kSentinel) << "float " << i << " is not an output";
    }
    std::printf(
        "  %s: worst |err| / tolerance %.4f (the CPU's %.4f), / A %.1e; |gpu - cpu| / A %.1e\n",
        c.name, worst_gpu, worst_cpu, worst_err, worst_diff);

    // A token's result does not depend on the batch: the 2nd token alone gives the same bits.
    AttendArgs one = a;
    one.n = 1;
    one.q_offset = q_off + q_stride;
    one.tokens.offset = tok_off + 2;
    one.out_offset = 0;
    Buffer alone = ToDevice(std::vector<float>(c.n_head * c.d_v, kSentinel));
    one.out = &alone;
    ASSERT_TRUE(Run(one).ok());
    const std::vector<float> got_one = FromDevice<float>(alone, c.n_head * c.d_v);
    for (int64_t i = 0; i < c.n_head * c.d_v; ++i) {
      ASSERT_EQ(Bits(got_one[i]), Bits(got[out_off + out_stride + i])) << "alone, float " << i;
    }
  }
}

TEST_F(GpuAttentionOps, AttendGivesZerosForASlotOutsideTheCache) {
  // Two cells of one sequence; tokens at pos 2 (past the cells) and at seq 1 (past the
  // buffer) get zeros, the one at (0, 1) a mean of V's two rows (q = 0: equal weights).
  const std::vector<float> q(3 * 2 * 2, 0.0f), kv = {1, 2, 3, 4};  // 2 cells of d = 2, f32
  const std::vector<uint32_t> slots = {0, 2, 1, 0, 0, 1};
  const Buffer qb = ToDevice(q), kvb = ToDevice(kv), tb = ToDevice(slots);
  Buffer ob = ToDevice(std::vector<float>(12, kSentinel));
  AttendArgs a;
  a.q = &qb;
  a.out = &ob;
  a.n = 3;
  a.n_head = 2;
  a.n_head_kv = 1;
  a.d_k = a.d_v = 2;
  a.tokens = {&tb, 0};
  a.k_cache = a.v_cache = &kvb;
  a.cells = 2;
  a.k_type = a.v_type = KvElem::kF32;
  ASSERT_TRUE(Run(a).ok());
  const std::vector<float> got = FromDevice<float>(ob, 12);
  const std::vector<float> want = {0, 0, 0, 0, 0, 0, 0, 0, 2, 3, 2, 3};
  for (int i = 0; i < 12; ++i) EXPECT_EQ(got[i], want[i]) << i;
}

TEST_F(GpuAttentionOps, RefusesRangesPastTheirBuffers) {
  // 4 KiB of inputs (zeros: token slots (0, 0)) and 4 KiB for outputs.
  const Buffer b = ToDevice(std::vector<float>(1024, 0.0f));
  Buffer out = ToDevice(std::vector<float>(1024, 0.0f));
  Buffer* x = &out;
  auto refused = [](const Status& s, const char* op) {
    return s.code() == StatusCode::kInvalidArgument && s.message().find(op) != std::string::npos;
  };
  AddBiasArgs bias;
  bias.x = x;
  bias.bias = &b;
  bias.rows = 16;
  bias.width = 64;
  EXPECT_TRUE(Run(bias).ok());
  bias.x_offset = 1;  // one float too far
  EXPECT_TRUE(refused(Run(bias), "gpu add bias")) << Run(bias).message();

  RmsNormArgs norm;
  norm.x = &b;
  norm.y = x;
  norm.weight = &b;
  norm.rows = 8;
  norm.dim = 128;
  EXPECT_TRUE(Run(norm).ok());
  norm.weight_offset = 1024 - 127;
  EXPECT_TRUE(refused(Run(norm), "gpu rms norm")) << Run(norm).message();

  RopeArgs rope;
  rope.x = x;
  rope.cos_sin = &b;
  rope.n = 4;
  rope.heads = 2;
  rope.head_dim = 128;
  rope.n_rot = 128;
  EXPECT_TRUE(Run(rope).ok());
  rope.n_rot = 127;  // odd
  EXPECT_TRUE(refused(Run(rope), "gpu rope")) << Run(rope).message();
  rope.n_rot = 128;
  rope.cos_sin_offset = 1024 - 511;
  EXPECT_TRUE(refused(Run(rope), "gpu rope")) << Run(rope).message();

  StoreKvArgs store;
  store.x = &b;
  store.n = 2;
  store.heads = 2;
  store.head_dim = 64;
  store.tokens = {&b, 0};
  store.cache = x;
  store.cells = 8;
  store.type = KvElem::kF32;
  EXPECT_TRUE(Run(store).ok());  // one sequence: 2 heads x 8 cells x 64 floats
  store.cache_offset = 4;
  EXPECT_TRUE(refused(Run(store), "gpu store kv")) << Run(store).message();
  store.cache_offset = 2;  // not a whole word
  EXPECT_TRUE(refused(Run(store), "gpu store kv")) << Run(store).message();
  store.cache_offset = 0;
  store.type = KvElem::kQ8_0;
  EXPECT_TRUE(Run(store).ok());
  store.head_dim = 48;  // not whole q8_0 blocks
  EXPECT_TRUE(refused(Run(store), "gpu store kv")) << Run(store).message();

  AttendArgs at;
  at.q = &b;
  at.out = x;
  at.n = 2;
  at.n_head = 4;
  at.n_head_kv = 2;
  at.d_k = at.d_v = 64;
  at.tokens = {&b, 0};
  at.k_cache = at.v_cache = &b;
  at.cells = 8;
  at.k_type = at.v_type = KvElem::kF32;
  EXPECT_TRUE(Run(at).ok());  // one sequence: 2 heads x 8 cells x 64 floats
  at.v_offset = 4;            // one sequence of V reaches one float past the buffer
  EXPECT_TRUE(refused(Run(at), "gpu attend")) << Run(at).message();
  at.v_offset = 0;
  at.n_head_kv = 3;  // does not divide n_head
  EXPECT_TRUE(refused(Run(at), "gpu attend")) << Run(at).message();
  at.n = 1;
  at.n_head = at.n_head_kv = 1;
  at.cells = 1;
  at.d_k = 576;
  EXPECT_TRUE(Run(at).ok());
  at.d_k = 578;  // past the largest d_k
  EXPECT_TRUE(refused(Run(at), "gpu attend")) << Run(at).message();
  at.d_k = at.d_v = 64;
  at.v_row = 62;  // V's cells shorter than d_v
  EXPECT_TRUE(refused(Run(at), "gpu attend")) << Run(at).message();
  at.v_row = 1024;  // one cell of 1024 floats: past the buffer from float 1
  at.v_offset = 4;
  EXPECT_TRUE(refused(Run(at), "gpu attend")) << Run(at).message();
  at.v_offset = 0;
  EXPECT_TRUE(Run(at).ok());
  at.v_row = 0;
  at.k_type = at.v_type = KvElem::kQ8_0;
  EXPECT_TRUE(Run(at).ok());
  at.d_v = 48;  // not whole q8_0 blocks
  EXPECT_TRUE(refused(Run(at), "gpu attend")) << Run(at).message();
}

}  // namespace
}  // namespace mt::gpu
