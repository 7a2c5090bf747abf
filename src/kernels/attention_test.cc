// Tests of AttendHead (kernels/attention.h) for every ISA variant this CPU runs, against the
// definition computed here in double precision (with a q8_0 cache: with the query rounded to
// q8_0 blocks, as the header defines).
//
// Tolerance, per output element i (u = 2^-24; w_j the exact softmax weights; T tiles):
//  - score error: a float dot of d_k terms (any order, FMA or not) times scale is off by at
//    most delta_j = (d_k + 2) u |scale| sum_c |q[c] K[j][c]| (gamma_{d_k + 1}, rounded up);
//    E = max_j delta_j.
//  - each position's unnormalised weight exp(s_j - M) is then off by a factor e^{lambda_j}:
//    the score errors enter as a difference (the maximum is one of the computed scores), so
//    at most 2 E; the subtraction s_j - M and each of the at most T rescale factors
//    exp(M_old - M_new) (whose arguments telescope to s_j - M) round their argument (by at
//    most u R, R = the range of the scores + 2 E) and their exp (e_exp). So
//    |lambda_j| <= Lambda = 2 E + (T + 1) (e_exp + u R).
//  - normalising, w'_j / w_j is in [e^{-2 Lambda}, e^{2 Lambda}], so the weights alone move
//    out_i by at most (e^{2 Lambda} - 1) A_i, A_i = sum_j w_j |V[j][i]|.
//  - the sums (output: n_pos products and sums, fused or not, and T rescale products; L:
//    n_pos additions and T products; then 1 / L and the product) add at most
//    (2 n_pos + 2 T + 4) u of e^{2 Lambda} A_i (gamma_n, rounded up).
//  - weights whose exact value is below 2^-126 may be flushed to 0: at most
//    n_pos 2^-126 max_j |V[j][i]| more (negligible, but part of the bound).
//  e_exp = 2^-21: the SIMD exp's worst case is a few ulps (ExpAccuracy checks it), std::exp's
//  below 1 ulp.
// A wrong or missing position moves out_i by about A_i / n_pos, far above this bound.
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "quant/dequant.h"
#include "quant/float16.h"
#include "quant/quantize.h"

namespace mt {
namespace {

constexpr double kU = 1.0 / (1 << 24);
constexpr double kExpErr = 1.0 / (1 << 21);

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// A K or V cache of n_pos positions (plus poisoned ones after) of d elements, stride apart
// (the gaps poisoned too: NaN), f16, f32 or q8_0 (d and stride whole blocks), and the same
// values as floats (q8_0: as quant/dequant.h reads the blocks).
struct Cache {
  std::vector<uint8_t> bytes;
  std::vector<float> val;  // (n_pos, d) the values, widened
  KvElemType type;
  int64_t stride;
  int d;

  const void* data() const { return bytes.data(); }
  float at(int64_t j, int c) const { return val[j * d + c]; }
};

Cache MakeCache(const std::vector<float>& values, int64_t n_pos, int d, int64_t stride,
                KvElemType type) {
  Cache c;
  c.type = type;
  c.stride = stride;
  c.d = d;
  const int64_t slots = (n_pos + 3) * stride;  // 3 poisoned positions after the last
  c.bytes.resize(KvBytes(type, slots));
  const uint16_t nan16 = 0x7E00;
  const float nan32 = std::nanf("");
  const size_t elt = type == KvElemType::kF32 ? 4 : type == KvElemType::kF16 ? 2 : 34;
  for (size_t at = 0; at < c.bytes.size(); at += elt) {  // q8_0: blocks with a NaN scale
    std::memcpy(c.bytes.data() + at,
                type == KvElemType::kF32 ? static_cast<const void*>(&nan32) : &nan16,
                type == KvElemType::kF32 ? 4 : 2);
  }
  c.val.resize(n_pos * d);
  for (int64_t j = 0; j < n_pos; ++j) {
    uint8_t* row = c.bytes.data() + KvBytes(type, j * stride);
    const float* x = values.data() + j * d;
    float* widened = c.val.data() + j * d;
    switch (type) {
      case KvElemType::kF32:
        std::memcpy(row, x, 4 * d);
        std::memcpy(widened, x, 4 * d);
        break;
      case KvElemType::kF16:
        for (int i = 0; i < d; ++i) {
          const uint16_t h = Fp32ToFp16(x[i]);
          std::memcpy(row + 2 * i, &h, 2);
          widened[i] = Fp16ToFp32(h);
        }
        break;
      case KvElemType::kQ8_0:
        QuantizeRow(GgmlType::kQ8_0, x, row, d);
        DequantizeRow(GgmlType::kQ8_0, row, widened, d);
        break;
    }
  }
  return c;
}

constexpr KvElemType kAllTypes[] = {KvElemType::kF16, KvElemType::kF32, KvElemType::kQ8_0};

// Every (K type, V type) pair, llama.cpp's -ctk / -ctv: the alike ones and the mixed ones.
constexpr KvTypes kAllPairs[] = {KvElemType::kF16,
                                 KvElemType::kF32,
                                 KvElemType::kQ8_0,
                                 {KvElemType::kQ8_0, KvElemType::kF16},
                                 {KvElemType::kF16, KvElemType::kQ8_0},
                                 {KvElemType::kQ8_0, KvElemType::kF32},
                                 {KvElemType::kF32, KvElemType::kQ8_0},
                                 {KvElemType::kF16, KvElemType::kF32},
                                 {KvElemType::kF32, KvElemType::kF16}};

const char* TypeName(KvElemType type) {
  return type == KvElemType::kF16 ? "f16" : type == KvElemType::kF32 ? "f32" : "q8_0";
}

std::string TypeName(KvTypes types) {
  if (types.k == types.v) return TypeName(types.k);
  return std::string("k ") + TypeName(types.k) + " v " + TypeName(types.v);
}

// The query the scores use (attention.h): q itself, or for a q8_0 cache q rounded to q8_0
// blocks, as QuantizeRow and DequantizeRow make it.
std::vector<float> ScoreQuery(const float* q, int d_k, KvElemType type) {
  std::vector<float> out(q, q + d_k);
  if (type == KvElemType::kQ8_0) {
    std::vector<uint8_t> blocks(KvBytes(type, d_k));
    QuantizeRow(GgmlType::kQ8_0, q, blocks.data(), d_k);
    DequantizeRow(GgmlType::kQ8_0, blocks.data(), out.data(), d_k);
  }
  return out;
}

// Whether a q8_0 K (V) can hold rows of d_k (d_v) elements at this stride (whole blocks).
bool Fits(KvTypes types, int d_k, int d_v, int64_t stride) {
  auto fits = [&](KvElemType type, int d) {
    return type != KvElemType::kQ8_0 || (d % 32 == 0 && stride % 32 == 0);
  };
  return fits(types.k, d_k) && fits(types.v, d_v);
}

struct Expected {
  std::vector<double> out;  // (d_v)
  std::vector<double> tol;  // (d_v)
};

Expected Reference(const float* q, const Cache& k, const Cache& v, int64_t n_pos, float scale) {
  std::vector<double> s(n_pos);
  double e = 0, smax = -INFINITY, smin = INFINITY;
  for (int64_t j = 0; j < n_pos; ++j) {
    double dot = 0, mag = 0;
    for (int c = 0; c < k.d; ++c) {
      dot += static_cast<double>(q[c]) * k.at(j, c);
      mag += std::fabs(static_cast<double>(q[c]) * k.at(j, c));
    }
    s[j] = scale * dot;
    e = std::max(e, (k.d + 2) * kU * std::fabs(scale) * mag);
    smax = std::max(smax, s[j]);
    smin = std::min(smin, s[j]);
  }
  double l = 0;
  std::vector<double> w(n_pos);
  for (int64_t j = 0; j < n_pos; ++j) l += w[j] = std::exp(s[j] - smax);
  const double tiles = static_cast<double>((n_pos + kAttendTile - 1) / kAttendTile);
  const double lambda = 2 * e + (tiles + 1) * (kExpErr + kU * (smax - smin + 2 * e));
  const double grow = std::exp(2 * lambda);
  Expected r;
  r.out.assign(v.d, 0.0);
  r.tol.assign(v.d, 0.0);
  for (int i = 0; i < v.d; ++i) {
    double a = 0, vmax = 0;
    for (int64_t j = 0; j < n_pos; ++j) {
      r.out[i] += w[j] / l * v.at(j, i);
      a += w[j] / l * std::fabs(v.at(j, i));
      vmax = std::max(vmax, std::fabs(static_cast<double>(v.at(j, i))));
    }
    r.tol[i] = a * ((grow - 1) + grow * (2 * n_pos + 2 * tiles + 4) * kU) +
               static_cast<double>(n_pos) * std::ldexp(1.0, -125) * vmax;
  }
  return r;
}

struct Shape {
  int64_t n_pos;
  int d_k, d_v;
  float q_gain;  // larger: sharper softmax
  float rise;    // > 0: scores grow with the position (later tiles raise the maximum);
                 // < 0: they fall (later weights underflow)
};

std::string Name(const Shape& s, KvTypes type) {
  return "n_pos " + std::to_string(s.n_pos) + " d_k " + std::to_string(s.d_k) + " d_v " +
         std::to_string(s.d_v) + " gain " + std::to_string(s.q_gain) + " rise " +
         std::to_string(s.rise) + " " + TypeName(type);
}

class AttentionTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    isa_ = GetParam();
    if (!IsaSupported(isa_)) GTEST_SKIP() << IsaName(isa_) << " not supported on this CPU";
  }
  Isa isa_;
};

TEST_P(AttentionTest, MatchesDefinition) {
  const Shape shapes[] = {
      {1, 128, 128, 1, 0},
      {2, 5, 3, 1, 0},
      {7, 17, 33, 1, 0},
      {63, 64, 80, 1, 0},
      {64, 128, 128, 1, 0},
      {65, 96, 265, 1, 0},
      {130, 128, 128, 1, 0},
      {301, 40, 24, 3, 0},
      {200, 128, 128, 8, 0},
      {257, 64, 64, 1, 0.05f},
      {257, 64, 64, 1, -0.05f},
      {150, 128, 128, 1, 2.0f},
      {150, 128, 128, 1, -2.0f},
      // q8_0 rows of an odd number of blocks (AVX-512 takes blocks two at a time).
      {65, 96, 96, 1, 0},
      {33, 32, 64, 1, 0},
      // DeepSeek's MLA: latent rows of 512 + 64 rope dims, V their first 512.
      {70, 576, 512, 1, 0},
      {130, 576, 576, 2, 0}};
  std::mt19937 rng(42);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  double worst = 0;
  for (KvTypes type : kAllPairs) {
    // q8_0: the whole-block shapes, with a block of gap between rows.
    const bool k_q8 = type.k == KvElemType::kQ8_0, v_q8 = type.v == KvElemType::kQ8_0;
    for (const Shape& sh : shapes) {
      if (!Fits(type, sh.d_k, sh.d_v, 32)) continue;
      SCOPED_TRACE(Name(sh, type));
      // q at an odd float offset (not vector aligned), NaN after its end.
      std::vector<float> qbuf(sh.d_k + 9, std::nanf(""));
      float* q = qbuf.data() + 1;
      double qn = 0;
      for (int c = 0; c < sh.d_k; ++c) {
        q[c] = sh.q_gain * gauss(rng);
        qn += static_cast<double>(q[c]) * q[c];
      }
      std::vector<float> kv(sh.n_pos * sh.d_k), vv(sh.n_pos * sh.d_v);
      for (int64_t j = 0; j < sh.n_pos; ++j) {
        for (int c = 0; c < sh.d_k; ++c) {
          // rise * j * q / |q| * sqrt(d_k) adds ~rise * j to the scaled score.
          kv[j * sh.d_k + c] = gauss(rng) + static_cast<float>(sh.rise * j * q[c] / std::sqrt(qn) *
                                                               std::sqrt(sh.d_k));
        }
      }
      for (float& x : vv) x = gauss(rng);
      const Cache k = MakeCache(kv, sh.n_pos, sh.d_k, sh.d_k + (k_q8 ? 32 : 3), type.k);
      const Cache v = MakeCache(vv, sh.n_pos, sh.d_v, sh.d_v + (v_q8 ? 32 : 5), type.v);
      const float scale = 1.0f / std::sqrt(static_cast<float>(sh.d_k));
      // The scratch the header asks for, then 16 floats that must stay untouched.
      const int64_t n_scratch = std::min(sh.n_pos, kAttendTile);
      std::vector<float> out(sh.d_v + 16, -5.0f), scratch(n_scratch + 16, 1e30f);
      AttendHead(isa_, q, k.data(), v.data(), type, k.stride, v.stride, sh.n_pos, sh.d_k, sh.d_v,
                 scale, out.data() + 1, scratch.data());
      for (int64_t i = n_scratch; i < n_scratch + 16; ++i) EXPECT_EQ(scratch[i], 1e30f) << i;
      const Expected ref = Reference(ScoreQuery(q, sh.d_k, type.k).data(), k, v, sh.n_pos, scale);
      EXPECT_EQ(out[0], -5.0f);
      for (int i = 0; i < sh.d_v; ++i) {
        const double err = std::fabs(out[1 + i] - ref.out[i]);
        ASSERT_LE(err, ref.tol[i])
            << "element " << i << " got " << out[1 + i] << " want " << ref.out[i];
        worst = std::max(worst, err / ref.tol[i]);
      }
      for (int i = sh.d_v + 1; i < sh.d_v + 16; ++i) EXPECT_EQ(out[i], -5.0f) << i;
    }
  }
  std::printf("  %s: worst |err| / tolerance %.3f\n", std::string(IsaName(isa_)).c_str(), worst);
}

TEST_P(AttentionTest, HandDerivedValues) {
  // One position: p = exp(0) = 1, L = 1, out = V[0] exactly.
  // Two equal keys: weights 1/2 each; out = (V0 + V1) * 0.5, exact for these values.
  // Keys with scores 0 and ln 3: weights 1/4, 3/4 (ln 3 rounded to float: off by ~1e-7).
  const float q[2] = {1.0f, 0.0f};
  const float k[4] = {0.0f, 7.0f, 0.0f, -7.0f};  // both scores 0
  const float v[6] = {1.0f, -2.0f, 0.5f, 3.0f, 4.0f, -0.5f};
  float out[3], scratch[2];
  AttendHead(isa_, q, k, v, KvElemType::kF32, 2, 3, 1, 2, 3, 1.0f, out, scratch);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 0.5f);
  AttendHead(isa_, q, k, v, KvElemType::kF32, 2, 3, 2, 2, 3, 1.0f, out, scratch);
  EXPECT_EQ(out[0], 2.0f);
  EXPECT_EQ(out[1], 1.0f);
  EXPECT_EQ(out[2], 0.0f);
  const float k3[4] = {0.0f, 1.0f, static_cast<float>(std::log(3.0)), 1.0f};
  AttendHead(isa_, q, k3, v, KvElemType::kF32, 2, 3, 2, 2, 3, 1.0f, out, scratch);
  EXPECT_NEAR(out[0], 0.25 * 1.0 + 0.75 * 3.0, 1e-6);
  EXPECT_NEAR(out[1], 0.25 * -2.0 + 0.75 * 4.0, 1e-6);
  EXPECT_NEAR(out[2], 0.25 * 0.5 + 0.75 * -0.5, 1e-6);
}

TEST_P(AttentionTest, ExpAccuracy) {
  // Two positions with scores 0 and -x (x = k / 64, exact; d_k = 1, q = 1, scale = 1: the
  // scores and s - M are exact) and V = 0, 1: out = e^-x / (1 + e^-x). The only roundings
  // are exp(-x) (e_exp), 1 + p, 1 / L and the product: |out / ref - 1| <= e_exp + 3u.
  const float q[1] = {1.0f};
  const float v[2] = {0.0f, 1.0f};
  double worst = 0;
  for (int i = 0; i <= 64 * 87; i += 7) {
    const float x = static_cast<float>(i) / 64;
    const float k[2] = {0.0f, -x};
    float out[1], scratch[2];
    AttendHead(isa_, q, k, v, KvElemType::kF32, 1, 1, 2, 1, 1, 1.0f, out, scratch);
    const double p = std::exp(-static_cast<double>(x));
    const double rel = std::fabs(out[0] / (p / (1 + p)) - 1);
    ASSERT_LE(rel, kExpErr + 3 * kU) << "x " << x;
    worst = std::max(worst, rel);
  }
  std::printf("  %s: worst relative error %.2e (bound %.2e)\n", std::string(IsaName(isa_)).c_str(),
              worst, kExpErr + 3 * kU);
}

TEST_P(AttentionTest, DeterministicAndIndependentOfScratch) {
  // The same inputs give the same bits whatever the scratch and output held before, and a
  // prefix of the cache gives the same result as a cache that ends there (nothing past n_pos
  // is read).
  const int64_t n_pos = 150;
  std::mt19937 rng(7);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  for (KvElemType type : kAllTypes) {
    const int d = type == KvElemType::kQ8_0 ? 96 : 72;  // whole blocks for q8_0
    std::vector<float> q(d), kv(n_pos * d), vv(n_pos * d);
    for (float& x : q) x = gauss(rng);
    for (float& x : kv) x = gauss(rng);
    for (float& x : vv) x = gauss(rng);
    const Cache k = MakeCache(kv, n_pos, d, d, type), v = MakeCache(vv, n_pos, d, d, type);
    for (int64_t n : {int64_t{1}, int64_t{64}, int64_t{99}, n_pos}) {
      std::vector<float> out1(d, 0.0f), out2(d, std::nanf("")), s1(kAttendTile, 0.0f),
          s2(kAttendTile, std::nanf(""));
      AttendHead(isa_, q.data(), k.data(), v.data(), type, d, d, n, d, d, 0.1f, out1.data(),
                 s1.data());
      AttendHead(isa_, q.data(), k.data(), v.data(), type, d, d, n, d, d, 0.1f, out2.data(),
                 s2.data());
      const Cache kp = MakeCache(kv, n, d, d, type), vp = MakeCache(vv, n, d, d, type);
      std::vector<float> out3(d);
      AttendHead(isa_, q.data(), kp.data(), vp.data(), type, d, d, n, d, d, 0.1f, out3.data(),
                 s2.data());
      for (int i = 0; i < d; ++i) {
        ASSERT_EQ(Bits(out1[i]), Bits(out2[i])) << "n_pos " << n << " element " << i;
        ASSERT_EQ(Bits(out1[i]), Bits(out3[i])) << "n_pos " << n << " element " << i;
      }
    }
  }
}

TEST_P(AttentionTest, GroupOfHeadsGivesEachHeadsOwnBits) {
  // AttendHeads (a GQA group's queries over shared rows) equals AttendHead for each query,
  // bit for bit: across group sizes that split into passes of 4 in different ways, tile
  // edges, a tail chunk in d_k and d_v, strides wider than a row, and every pair of K and V
  // element types.
  struct GroupShape {
    int d_k, d_v;
    int64_t stride;
  };
  std::mt19937 rng(11);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  for (const GroupShape& g :
       {GroupShape{128, 128, 128}, GroupShape{72, 80, 96}, GroupShape{16, 40, 40},
        GroupShape{100, 100, 512}, GroupShape{64, 96, 160}}) {
    for (int64_t n_pos : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{65}, int64_t{200}}) {
      const int d_kv = std::max(g.d_k, g.d_v);
      std::vector<float> kv(n_pos * d_kv), vv(n_pos * d_kv);
      for (float& x : kv) x = gauss(rng);
      for (float& x : vv) x = gauss(rng);
      for (KvTypes type : kAllPairs) {
        if (!Fits(type, g.d_k, g.d_v, g.stride)) continue;
        const Cache k = MakeCache(kv, n_pos, g.d_k, g.stride, type.k);
        const Cache v = MakeCache(vv, n_pos, g.d_v, g.stride, type.v);
        for (int n_q : {1, 2, 3, 4, 5, 8, 11}) {
          std::vector<float> q(n_q * g.d_k);
          for (float& x : q) x = gauss(rng);
          const int64_t tile = std::min(n_pos, kAttendTile);
          std::vector<float> got(n_q * g.d_v, std::nanf("")), scratch(n_q * tile, std::nanf(""));
          AttendHeads(isa_, q.data(), g.d_k, n_q, k.data(), v.data(), type, g.stride, g.stride,
                      n_pos, g.d_k, g.d_v, 0.09f, got.data(), g.d_v, scratch.data());
          for (int i = 0; i < n_q; ++i) {
            std::vector<float> want(g.d_v), s(tile);
            AttendHead(isa_, q.data() + i * g.d_k, k.data(), v.data(), type, g.stride, g.stride,
                       n_pos, g.d_k, g.d_v, 0.09f, want.data(), s.data());
            for (int e = 0; e < g.d_v; ++e) {
              ASSERT_EQ(Bits(got[i * g.d_v + e]), Bits(want[e]))
                  << "d_k " << g.d_k << " d_v " << g.d_v << " n_pos " << n_pos << " "
                  << TypeName(type) << " n_q " << n_q << " query " << i << " element " << e;
            }
          }
        }
      }
    }
  }
}

TEST_P(AttentionTest, ConsecutiveTokensGiveEachQueryItsOwnBits) {
  // AttendTokens (a prompt's consecutive tokens, token i over one more position than token
  // i - 1, each with a group of heads) equals AttendHead for each (token, head), bit for bit:
  // token counts that split into passes of 4 unevenly, runs that start just before, at and
  // after a tile edge (so the tokens share 0, 1 or 2 whole tiles and end in different ones),
  // a tail chunk in d_k and d_v, wide strides, every pair of K and V element types.
  struct TokenShape {
    int d_k, d_v;
    int64_t stride;
  };
  std::mt19937 rng(12);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  for (const TokenShape& g : {TokenShape{128, 128, 128}, TokenShape{72, 80, 96},
                              TokenShape{16, 40, 40}, TokenShape{64, 96, 160}}) {
    for (int64_t n_pos : {int64_t{1}, int64_t{5}, int64_t{62}, int64_t{64}, int64_t{65},
                          int64_t{127}, int64_t{190}}) {
      const int max_tok = 9;
      const int64_t rows = n_pos + max_tok - 1;
      const int d_kv = std::max(g.d_k, g.d_v);
      std::vector<float> kv(rows * d_kv), vv(rows * d_kv);
      for (float& x : kv) x = gauss(rng);
      for (float& x : vv) x = gauss(rng);
      for (KvTypes type : kAllPairs) {
        if (!Fits(type, g.d_k, g.d_v, g.stride)) continue;
        const Cache k = MakeCache(kv, rows, g.d_k, g.stride, type.k);
        const Cache v = MakeCache(vv, rows, g.d_v, g.stride, type.v);
        for (int n_head : {1, 3}) {
          for (int n_tok : {1, 2, 3, 5, max_tok}) {
            const int n_q = n_head * n_tok;
            std::vector<float> q(n_q * g.d_k);
            for (float& x : q) x = gauss(rng);
            const int64_t tile = std::min(n_pos + n_tok - 1, kAttendTile);
            std::vector<float> got(n_q * g.d_v, std::nanf("")), scratch(n_q * tile, std::nanf(""));
            const AttendQueries qs{q.data(),
                                   int64_t{n_head} * g.d_k,
                                   g.d_k,
                                   got.data(),
                                   int64_t{n_head} * g.d_v,
                                   g.d_v,
                                   n_head,
                                   n_tok,
                                   n_pos};
            AttendTokens(isa_, qs, k.data(), v.data(), type, g.stride, g.stride, g.d_k, g.d_v,
                         0.09f, scratch.data());
            for (int i = 0; i < n_q; ++i) {
              const int t = i / n_head;
              std::vector<float> want(g.d_v), s(kAttendTile);
              AttendHead(isa_, q.data() + i * g.d_k, k.data(), v.data(), type, g.stride, g.stride,
                         n_pos + t, g.d_k, g.d_v, 0.09f, want.data(), s.data());
              for (int e = 0; e < g.d_v; ++e) {
                ASSERT_EQ(Bits(got[i * g.d_v + e]), Bits(want[e]))
                    << "d_k " << g.d_k << " d_v " << g.d_v << " n_pos " << n_pos << " "
                    << TypeName(type) << " heads " << n_head << " tokens " << n_tok << " query "
                    << i << " element " << e;
              }
            }
          }
        }
      }
    }
  }
}

// gpt-oss's sinks: a head's sink logit z joins the softmax's denominator, out = sum_j
// e^(s_j) V[j] / (sum_j e^(s_j) + e^z), i.e. the sinkless output times L / (L + e^(z - M))
// (M the largest score). A sink of -inf is no sink, bit for bit.
TEST_P(AttentionTest, SinksTakeTheirShareOfTheSoftmax) {
  std::mt19937 rng(7);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  const int d = 64, n_head = 3;
  for (int64_t n_pos : {int64_t{1}, int64_t{70}, int64_t{130}}) {
    for (KvTypes type : kAllPairs) {
      if (!Fits(type, d, d, d)) continue;
      SCOPED_TRACE("n_pos " + std::to_string(n_pos) + " " + TypeName(type));
      std::vector<float> kv(n_pos * d), vv(n_pos * d), q(n_head * d);
      for (float& x : kv) x = gauss(rng);
      for (float& x : vv) x = gauss(rng);
      for (float& x : q) x = 2.0f * gauss(rng);
      const Cache k = MakeCache(kv, n_pos, d, d, type.k);
      const Cache v = MakeCache(vv, n_pos, d, d, type.v);
      const float scale = 0.125f;
      auto run = [&](const float* sinks) {
        std::vector<float> out(n_head * d), scratch(n_head * kAttendTile);
        AttendQueries qs{q.data(), 0, d, out.data(), 0, d, n_head, 1, n_pos};
        qs.sinks = sinks;
        AttendTokens(isa_, qs, k.data(), v.data(), type, d, d, d, d, scale, scratch.data());
        return out;
      };
      const std::vector<float> none = run(nullptr);
      const float no_sinks[n_head] = {-INFINITY, -INFINITY, -INFINITY};
      const std::vector<float> minus_inf = run(no_sinks);
      for (int i = 0; i < n_head * d; ++i) ASSERT_EQ(Bits(none[i]), Bits(minus_inf[i])) << i;
      const float sinks[n_head] = {0.5f, -3.0f, 40.0f};  // the last takes nearly everything
      const std::vector<float> got = run(sinks);
      for (int h = 0; h < n_head; ++h) {
        const std::vector<float> qh = ScoreQuery(q.data() + h * d, d, type.k);
        const Expected ref = Reference(qh.data(), k, v, n_pos, scale);
        double m = -INFINITY, l = 0;
        for (int64_t j = 0; j < n_pos; ++j) {
          double dot = 0;
          for (int c = 0; c < d; ++c) dot += static_cast<double>(qh[c]) * k.at(j, c);
          m = std::max(m, scale * dot);
        }
        for (int64_t j = 0; j < n_pos; ++j) {
          double dot = 0;
          for (int c = 0; c < d; ++c) dot += static_cast<double>(qh[c]) * k.at(j, c);
          l += std::exp(scale * dot - m);
        }
        const double share = l / (l + std::exp(sinks[h] - m));
        for (int i = 0; i < d; ++i) {
          const double want = ref.out[i] * share;
          ASSERT_NEAR(got[h * d + i], want, ref.tol[i] * share + 4e-7 * std::fabs(want) + 1e-30)
              << "head " << h << " element " << i;
        }
      }
    }
  }
}

TEST_P(AttentionTest, MlaLatentRowsServeAsKAndV) {
  // MLA's cache: one row of kv_lora_rank + rope dims (576) per position, K the whole row and V
  // its first 512 values, the same bytes. Four heads of four consecutive tokens at once give
  // each query AttendHead's bits, and the q8_0 variant takes 576-wide queries (18 blocks).
  constexpr int kDk = 576, kDv = 512;
  std::mt19937 rng(576);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  const int64_t n_pos = 100, n_tok = 4, n_head = 4, rows = n_pos + n_tok - 1;
  std::vector<float> kv(rows * kDk);
  for (float& x : kv) x = gauss(rng);
  for (KvElemType type : kAllTypes) {
    const Cache c = MakeCache(kv, rows, kDk, kDk, type);
    std::vector<float> q(n_head * n_tok * kDk);
    for (float& x : q) x = gauss(rng) * 0.1f;
    std::vector<float> got(n_head * n_tok * kDv, std::nanf("")),
        scratch(n_head * n_tok * kAttendTile, std::nanf(""));
    const AttendQueries qs{q.data(),
                           n_head * kDk,
                           kDk,
                           got.data(),
                           n_head * kDv,
                           kDv,
                           static_cast<int>(n_head),
                           static_cast<int>(n_tok),
                           n_pos};
    AttendTokens(isa_, qs, c.data(), c.data(), {type, type}, kDk, kDk, kDk, kDv, 0.07f,
                 scratch.data());
    for (int i = 0; i < n_head * n_tok; ++i) {
      std::vector<float> want(kDv), s(kAttendTile);
      AttendHead(isa_, q.data() + i * kDk, c.data(), c.data(), {type, type}, kDk, kDk,
                 n_pos + i / n_head, kDk, kDv, 0.07f, want.data(), s.data());
      for (int e = 0; e < kDv; ++e) {
        ASSERT_EQ(Bits(got[i * kDv + e]), Bits(want[e])) << TypeName(type) << " query " << i;
      }
    }
  }
}

TEST_P(AttentionTest, SameBitsOnAnyThreadInAnyOrder) {
  // The engine runs (token, head) items on any thread in any order: items computed in order
  // on one thread and in reverse order on 4 concurrent threads (each with its own scratch)
  // give the same bits. Each item is a query over its own prefix of a shared cache, as the
  // tokens of a prompt are.
  const int64_t n_ctx = 200;
  const int d = 64, n_items = 48;
  std::mt19937 rng(11);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::vector<float> q(n_items * d), kv(n_ctx * d), vv(n_ctx * d);
  for (float& x : q) x = gauss(rng);
  for (float& x : kv) x = gauss(rng);
  for (float& x : vv) x = gauss(rng);
  const Cache k = MakeCache(kv, n_ctx, d, d, KvElemType::kF16);
  const Cache v = MakeCache(vv, n_ctx, d, d, KvElemType::kF16);
  const auto n_pos = [&](int item) { return 1 + (item * 37) % n_ctx; };
  std::vector<float> serial(n_items * d), parallel(n_items * d, std::nanf(""));
  std::vector<float> s(kAttendTile);
  for (int item = 0; item < n_items; ++item) {
    AttendHead(isa_, q.data() + item * d, k.data(), v.data(), KvElemType::kF16, d, d, n_pos(item),
               d, d, 0.125f, serial.data() + item * d, s.data());
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<float> scratch(kAttendTile, std::nanf(""));
      for (int item = n_items - 1 - t; item >= 0; item -= 4) {
        AttendHead(isa_, q.data() + item * d, k.data(), v.data(), KvElemType::kF16, d, d,
                   n_pos(item), d, d, 0.125f, parallel.data() + item * d, scratch.data());
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int i = 0; i < n_items * d; ++i) {
    ASSERT_EQ(Bits(serial[i]), Bits(parallel[i])) << "item " << i / d << " element " << i % d;
  }
}

TEST_P(AttentionTest, VariantsAgree) {
  // Every variant against the scalar one: both are within the tolerance of the definition, so
  // within twice it of each other (a cross-check of the dispatcher and the reference).
  if (isa_ == Isa::kScalar) GTEST_SKIP() << "this is the scalar variant";
  const int64_t n_pos = 90;
  const int d = 128;
  std::mt19937 rng(3);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::vector<float> q(d), kv(n_pos * d), vv(n_pos * d);
  for (float& x : q) x = gauss(rng);
  for (float& x : kv) x = gauss(rng);
  for (float& x : vv) x = gauss(rng);
  for (KvTypes type : kAllPairs) {
    const Cache k = MakeCache(kv, n_pos, d, d, type.k), v = MakeCache(vv, n_pos, d, d, type.v);
    std::vector<float> a(d), b(d), s(kAttendTile);
    AttendHead(isa_, q.data(), k.data(), v.data(), type, d, d, n_pos, d, d, 0.09f, a.data(),
               s.data());
    AttendHead(Isa::kScalar, q.data(), k.data(), v.data(), type, d, d, n_pos, d, d, 0.09f, b.data(),
               s.data());
    const Expected ref = Reference(ScoreQuery(q.data(), d, type.k).data(), k, v, n_pos, 0.09f);
    for (int i = 0; i < d; ++i) {
      EXPECT_LE(std::fabs(a[i] - b[i]), 2 * ref.tol[i]) << TypeName(type) << " " << i;
    }
  }
}

// The KV store writes Fp32ToFp16's bits in every variant: random bit patterns (every class:
// normals, f16 subnormals and underflow, overflow, inf, NaN with payloads), ties at the f16
// rounding boundaries, and lengths with every tail.
TEST_P(AttentionTest, StoreKvGivesFp32ToFp16Bits) {
  std::mt19937 rng(5);
  std::vector<float> x;
  for (int i = 0; i < 4000; ++i) {
    const uint32_t bits = rng();
    // Bias the exponent to the f16 range half of the time, so normals/subnormals are common.
    const uint32_t e = i % 2 ? (rng() % 48 + 97) << 23 : bits & 0x7F800000u;
    x.push_back(std::bit_cast<float>((bits & 0x807FFFFFu) | e));
  }
  for (uint32_t h = 0; h < 0x7C00u; h += 97) {  // exact midpoints between neighbouring halves
    const float lo = Fp16ToFp32(static_cast<uint16_t>(h));
    const float hi = Fp16ToFp32(static_cast<uint16_t>(h + 1));
    x.push_back(lo + (hi - lo) / 2);
    x.push_back(-(lo + (hi - lo) / 2));
  }
  for (float f : {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 1e9f, -INFINITY, INFINITY, NAN, -NAN,
                  std::bit_cast<float>(0x7F800001u), std::bit_cast<float>(0xFFBFFFFFu)}) {
    x.push_back(f);
  }
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{9}, int64_t{17},
                    static_cast<int64_t>(x.size())}) {
    std::vector<uint16_t> got(n + 1, 0xABCD);
    StoreKv(isa_, x.data(), n, KvElemType::kF16, got.data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(got[i], Fp32ToFp16(x[i]))
          << "element " << i << " bits 0x" << std::hex << std::bit_cast<uint32_t>(x[i]);
    }
    EXPECT_EQ(got[n], 0xABCD) << "wrote past n=" << n;
  }
  std::vector<float> f32(5);
  StoreKv(isa_, x.data(), 5, KvElemType::kF32, f32.data());
  EXPECT_EQ(std::memcmp(f32.data(), x.data(), 5 * sizeof(float)), 0);
}

// q8_0 rows are quant/quantize.h's Q8_0 blocks, bit for bit, in every variant (values of
// many magnitudes; whole blocks only), except that a block holding an infinity or a NaN gets a
// NaN scale.
TEST_P(AttentionTest, StoreKvGivesQuantizeRowQ8Blocks) {
  std::mt19937 rng(6);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::vector<float> x(32 * 40);
  for (size_t i = 0; i < x.size(); ++i) x[i] = gauss(rng) * std::ldexp(1.0f, int(i / 32) - 20);
  x[5] = INFINITY;
  x[40] = NAN;
  for (int i = 64; i < 96; ++i) x[i] = 0.0f;
  for (int64_t n : {int64_t{0}, int64_t{32}, int64_t{96}, static_cast<int64_t>(x.size())}) {
    const int64_t bytes = KvBytes(KvElemType::kQ8_0, n);
    ASSERT_EQ(bytes, n / 32 * 34);
    std::vector<uint8_t> got(bytes + 1, 0xAB), want(bytes);
    StoreKv(isa_, x.data(), n, KvElemType::kQ8_0, got.data());
    QuantizeRow(GgmlType::kQ8_0, x.data(), want.data(), n);
    for (int64_t b : {0, 1}) {  // x[5] = inf, x[40] = NaN
      if (b < n / 32) std::memcpy(want.data() + 34 * b, "\x00\x7E", 2);
    }
    ASSERT_TRUE(std::equal(want.begin(), want.end(), got.begin())) << "n " << n;
    EXPECT_EQ(got[bytes], 0xAB) << "wrote past n=" << n;
  }
}

// As with f16, a NaN in the query or in a V row reaches the output of a q8_0 cache (the engine
// finds bad weights by the NaN they leave in the logits), rather than vanishing in rounding.
TEST_P(AttentionTest, Q8KeepsNaNs) {
  const int d = 64, n_pos = 3;
  std::vector<float> q(d, 0.5f), rows(n_pos * d, 0.25f), out(d);
  std::vector<float> s(n_pos);
  std::vector<uint8_t> k(KvBytes(KvElemType::kQ8_0, n_pos * d)), v(k.size());
  for (int j = 0; j < n_pos; ++j) {
    StoreKv(isa_, rows.data() + j * d, d, KvElemType::kQ8_0, k.data() + j * 68);
    StoreKv(isa_, rows.data() + j * d, d, KvElemType::kQ8_0, v.data() + j * 68);
  }
  AttendHead(isa_, q.data(), k.data(), v.data(), KvElemType::kQ8_0, d, d, n_pos, d, d, 0.1f,
             out.data(), s.data());
  for (float o : out) ASSERT_NEAR(o, 0.25f, 1e-3f);  // all keys alike: V (as rounded)
  q[40] = NAN;
  AttendHead(isa_, q.data(), k.data(), v.data(), KvElemType::kQ8_0, d, d, n_pos, d, d, 0.1f,
             out.data(), s.data());
  for (float o : out) EXPECT_TRUE(std::isnan(o)) << "NaN in the query";
  q[40] = 0.5f;
  rows[d + 3] = NAN;  // position 1, V element 3: its block (elements 0..31) turns NaN
  StoreKv(isa_, rows.data() + d, d, KvElemType::kQ8_0, v.data() + 68);
  AttendHead(isa_, q.data(), k.data(), v.data(), KvElemType::kQ8_0, d, d, n_pos, d, d, 0.1f,
             out.data(), s.data());
  for (int i = 0; i < d; ++i) {
    EXPECT_EQ(std::isnan(out[i]), i < 32) << "NaN in V, element " << i;
  }
}

TEST(AttentionDeathTest, RejectsEmptyRange) {
  const float q[1] = {1.0f}, k[1] = {1.0f}, v[1] = {1.0f};
  float out[1], s[1];
  EXPECT_DEATH(AttendHead(Isa::kScalar, q, k, v, KvElemType::kF32, 1, 1, 0, 1, 1, 1.0f, out, s),
               "check failed");
}

TEST(AttentionDeathTest, RejectsQ8RowsOfPartBlocks) {
  std::vector<float> q(48, 1.0f), out(48), s(1);
  std::vector<uint8_t> k(34 * 4), v(34 * 4);
  EXPECT_DEATH(AttendHead(Isa::kScalar, q.data(), k.data(), v.data(), KvElemType::kQ8_0, 64, 64, 1,
                          48, 32, 1.0f, out.data(), s.data()),
               "whole blocks");
  EXPECT_DEATH(AttendHead(Isa::kScalar, q.data(), k.data(), v.data(), KvElemType::kQ8_0, 48, 32, 1,
                          32, 32, 1.0f, out.data(), s.data()),
               "whole blocks");
  EXPECT_DEATH(StoreKv(Isa::kScalar, q.data(), 48, KvElemType::kQ8_0, k.data()), "whole blocks");
  // Mixed types: only the q8_0 side is held to whole blocks.
  const KvTypes k_q8{KvElemType::kQ8_0, KvElemType::kF32};
  const KvTypes v_q8{KvElemType::kF32, KvElemType::kQ8_0};
  EXPECT_DEATH(AttendHead(Isa::kScalar, q.data(), k.data(), v.data(), v_q8, 48, 48, 1, 48, 48, 1.0f,
                          out.data(), s.data()),
               "q8_0 V rows and strides must be whole blocks");
  EXPECT_DEATH(AttendHead(Isa::kScalar, q.data(), k.data(), v.data(), k_q8, 48, 48, 1, 48, 48, 1.0f,
                          out.data(), s.data()),
               "q8_0 K rows and strides must be whole blocks");
}

INSTANTIATE_TEST_SUITE_P(AllVariants, AttentionTest, ::testing::ValuesIn(kAllIsas),
                         [](const ::testing::TestParamInfo<Isa>& info) {
                           return std::string(IsaName(info.param));
                         });

}  // namespace
}  // namespace mt
