// Quantizers of Q2_K, Q3_K, IQ4_NL and IQ4_XS (quant/lowbit.h): the algorithms of llama.cpp's
// reference quantizers (ggml-quants.c), written out again here, with every float operation
// in ggml's order so that the bytes come out the same. Where ggml computes in float we do
// too (no double, no FMA: products stay in statements of their own where a sum follows, and
// the quant library is built without -mfma), and rounding to an integer goes through ggml's
// "add 1.5 * 2^23" trick (NearestInt), which is round-half-to-even for |v| < 2^22.
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/float16.h"
#include "quant/lowbit.h"

namespace mt::lowbit {
namespace {

// Below this a group of elements counts as all zero (ggml's GROUP_MAX_EPS).
constexpr float kGroupMaxEps = 1e-15f;

// Nearest integer of v, ties to even, for |v| < 2^22 (the float's low mantissa bits after
// adding 1.5 * 2^23). Larger magnitudes and NaN give some integer, never undefined behaviour;
// callers clamp it.
int NearestInt(float v) {
  const float biased = v + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &biased, 4);
  return (bits & 0x007FFFFF) - 0x00400000;
}

int Clamp(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

template <typename T>
void Store(const T& block, uint8_t* dst, int64_t index) {
  std::memcpy(dst + index * static_cast<int64_t>(sizeof(T)), &block, sizeof(T));
}

// Packs 256 two-bit codes into Q2_K / Q3_K's qs (see BlockQ2_K).
void PackLow2(const uint8_t q[kQK_K], uint8_t qs[64]) {
  for (int n = 0; n < 2; ++n) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t* e = q + 128 * n + l;
      qs[32 * n + l] = static_cast<uint8_t>(e[0] | e[32] << 2 | e[64] << 4 | e[96] << 6);
    }
  }
}

// ---- Q2_K ------------------------------------------------------------------------------

// ggml's make_qkx2_quants for Q2_K's sub-blocks: x ~ scale * q - min_out, q in 0..nmax,
// weighted absolute error (weights w), over the start (the range on nmax steps) and nstep + 1
// further step counts rmin + rdelta * i + nmax, each least-squares refitted (min capped at
// 0). Writes the codes to q and the min (>= 0) to *min_out; returns the scale.
float FitQ2Sub(const float* x, const float* w, int n, int nmax, float rmin, float rdelta, int nstep,
               uint8_t* q, float* min_out) {
  float lo = x[0], hi = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < lo) lo = x[i];
    if (x[i] > hi) hi = x[i];
    sum_w += w[i];
    const float wx = w[i] * x[i];
    sum_x += wx;
  }
  if (lo > 0) lo = 0;
  if (hi == lo) {
    for (int i = 0; i < n; ++i) q[i] = 0;
    *min_out = -lo;
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / (hi - lo);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    q[i] = static_cast<uint8_t>(Clamp(NearestInt(iscale * (x[i] - lo)), 0, nmax));
    const float p = scale * static_cast<float>(q[i]);
    const float diff = p + lo - x[i];
    const float err = w[i] * std::fabs(diff);
    best_error += err;
  }
  uint8_t aux[kQK_K];
  for (int is = 0; is <= nstep; ++is) {
    const float step = rdelta * static_cast<float>(is);
    iscale = (rmin + step + static_cast<float>(nmax)) / (hi - lo);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = Clamp(NearestInt(iscale * (x[i] - lo)), 0, nmax);
      aux[i] = static_cast<uint8_t>(l);
      const float wl = w[i] * static_cast<float>(l);
      sum_l += wl;
      const float wll = wl * static_cast<float>(l);
      sum_l2 += wll;
      const float wlx = wl * x[i];
      sum_xl += wlx;
    }
    const float a = sum_w * sum_l2, b = sum_l * sum_l;
    const float det = a - b;
    if (det > 0) {
      const float s1 = sum_w * sum_xl, s2 = sum_x * sum_l;
      float this_scale = (s1 - s2) / det;
      const float m1 = sum_l2 * sum_x, m2 = sum_l * sum_xl;
      float this_min = (m1 - m2) / det;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        const float p = this_scale * static_cast<float>(aux[i]);
        const float diff = p + this_min - x[i];
        const float err = w[i] * std::fabs(diff);
        cur_error += err;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) q[i] = aux[i];
        best_error = cur_error;
        scale = this_scale;
        lo = this_min;
      }
    }
  }
  *min_out = -lo;
  return scale;
}

}  // namespace

// Per super-block: each sub-block of 16 fitted as x ~ s q - m (q in 0..3, weights |x|); the
// 16 scales and the 16 mins each to 4 bits against an f16 super-scale (largest -> 15); then
// every code re-derived against the stored scale and min, except in sub-blocks whose stored
// scale is 0, which keep the fit's codes.
void QuantizeQ2_K(const float* x, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    uint8_t q[kQK_K];
    float scales[16], mins[16];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; ++j) {
      float w[16];
      for (int l = 0; l < 16; ++l) w[l] = std::fabs(x[16 * j + l]);
      scales[j] = FitQ2Sub(x + 16 * j, w, 16, 3, -0.5f, 0.1f, 15, q + 16 * j, &mins[j]);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    BlockQ2_K blk{};
    if (max_scale > 0) {
      const float iscale = 15.0f / max_scale;
      for (int j = 0; j < 16; ++j)
        blk.scales[j] = static_cast<uint8_t>(NearestInt(iscale * scales[j]));
      blk.d = Fp32ToFp16(max_scale / 15.0f);
    } else {
      blk.d = Fp32ToFp16(0.0f);
    }
    if (max_min > 0) {
      const float iscale = 15.0f / max_min;
      for (int j = 0; j < 16; ++j) {
        blk.scales[j] |= static_cast<uint8_t>(NearestInt(iscale * mins[j]) << 4);
      }
      blk.dmin = Fp32ToFp16(max_min / 15.0f);
    } else {
      blk.dmin = Fp32ToFp16(0.0f);
    }
    const float d = Fp16ToFp32(blk.d), dmin = Fp16ToFp32(blk.dmin);
    for (int j = 0; j < 16; ++j) {
      const float scale = d * static_cast<float>(blk.scales[j] & 15);
      if (scale == 0) continue;
      const float offset = dmin * static_cast<float>(blk.scales[j] >> 4);
      for (int l = 0; l < 16; ++l) {
        q[16 * j + l] =
            static_cast<uint8_t>(Clamp(NearestInt((x[16 * j + l] + offset) / scale), 0, 3));
      }
    }
    PackLow2(q, blk.qs);
    Store(blk, dst, b);
  }
}

// ---- Q3_K ------------------------------------------------------------------------------

namespace {

// ggml's make_q3_quants (with its rmse refinement) for a sub-block of 16, codes -nmax..nmax-1:
// start from the step that puts the element of largest magnitude on -nmax, then up to 5
// passes that move single codes where that raises (sum w x q)^2 / sum w q^2 (w = x^2).
// Writes the codes + nmax to q; returns the least-squares scale of the final codes.
float FitQ3Sub(const float* x, int n, int nmax, int8_t* q) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) q[i] = 0;
    return 0.0f;
  }
  const float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = Clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1);
    q[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    const float wx = w * x[i];
    const float wxl = wx * static_cast<float>(l);
    sumlx += wxl;
    const float wl = w * static_cast<float>(l);
    const float wll = wl * static_cast<float>(l);
    suml2 += wll;
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      const float wx = w * x[i];
      const float old_xl = wx * static_cast<float>(q[i]);
      float slx = sumlx - old_xl;
      if (slx > 0) {
        const float wl = w * static_cast<float>(q[i]);
        const float old_ll = wl * static_cast<float>(q[i]);
        float sl2 = suml2 - old_ll;
        const float num = x[i] * sl2;
        const int new_l = Clamp(NearestInt(num / slx), -nmax, nmax - 1);
        if (new_l != q[i]) {
          const float new_xl = wx * static_cast<float>(new_l);
          slx += new_xl;
          const float wn = w * static_cast<float>(new_l);
          const float new_ll = wn * static_cast<float>(new_l);
          sl2 += new_ll;
          const float lhs = slx * slx * suml2, rhs = sumlx * sumlx * sl2;
          if (sl2 > 0 && lhs > rhs) {
            q[i] = static_cast<int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (n_changed == 0) break;
  }
  for (int i = 0; i < n; ++i) q[i] = static_cast<int8_t>(q[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

}  // namespace

// Per super-block: each sub-block of 16 fitted symmetrically (codes -4..3), the 16 signed
// scales to 6 bits against an f16 super-scale (the largest magnitude -> -32), then every
// code re-derived against its stored scale (sub-blocks whose stored scale is 0 keep the fit's
// codes).
void QuantizeQ3_K(const float* x, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    int8_t q[kQK_K];
    float scales[16];
    float max_scale = 0, amax = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = FitQ3Sub(x + 16 * j, 16, 4, q + 16 * j);
      const float a = std::fabs(scales[j]);
      if (a > amax) {
        amax = a;
        max_scale = scales[j];
      }
    }
    BlockQ3_K blk{};
    if (max_scale != 0) {
      const float iscale = -32.0f / max_scale;
      for (int j = 0; j < 16; ++j) {
        // ggml keeps the rounded value in an int8_t before clamping it.
        const int8_t r = static_cast<int8_t>(NearestInt(iscale * scales[j]));
        const int l = Clamp(r, -32, 31) + 32;
        if (j < 8) {
          blk.scales[j] = static_cast<uint8_t>(l & 15);
        } else {
          blk.scales[j - 8] |= static_cast<uint8_t>((l & 15) << 4);
        }
        blk.scales[8 + j % 4] |= static_cast<uint8_t>((l >> 4) << (2 * (j / 4)));
      }
      blk.d = Fp32ToFp16(1 / iscale);
    } else {
      blk.d = Fp32ToFp16(0.0f);
    }
    const float d_all = Fp16ToFp32(blk.d);
    for (int j = 0; j < 16; ++j) {
      const int low = j < 8 ? blk.scales[j] & 15 : blk.scales[j - 8] >> 4;
      const int sc = (low | ((blk.scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
      const float d = d_all * static_cast<float>(sc);
      if (d == 0) continue;
      for (int l = 0; l < 16; ++l) {
        q[16 * j + l] = static_cast<int8_t>(Clamp(NearestInt(x[16 * j + l] / d), -4, 3) + 4);
      }
    }
    uint8_t low[kQK_K];
    for (int e = 0; e < kQK_K; ++e) {
      // High bit of element e: bit e / 32 of hmask[e % 32] (see BlockQ3_K).
      if (q[e] > 3) blk.hmask[e % 32] |= static_cast<uint8_t>(1 << (e / 32));
      low[e] = static_cast<uint8_t>(q[e] > 3 ? q[e] - 4 : q[e]);
    }
    PackLow2(low, blk.qs);
    Store(blk, dst, b);
  }
}

// ---- IQ4_NL and IQ4_XS -----------------------------------------------------------------

namespace {

// The index of the kIq4nlValues entry nearest v (ggml's best_index_int8: ties go up; NaN
// gives 15).
int NearestIq4(float v) {
  const int8_t* t = kIq4nlValues;
  if (v <= t[0]) return 0;
  if (v >= t[15]) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (v < t[mid]) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return v - static_cast<float>(t[hi - 1]) < static_cast<float>(t[hi]) - v ? hi - 1 : hi;
}

// One block of 32 (ggml's quantize_row_iq4_nl_impl, no importance weights, 7 tries): the
// scale that puts the largest magnitude on the grid's end, least-squares refitted with
// weights x^2, and 15 more starts (steps -134..-120 over the signed maximum) kept where they
// raise (sum w x v)^2 / sum w v^2. Returns the scale (0 for an all-zero block).
float FitIq4Block(const float* x) {
  float w[32];
  for (int j = 0; j < 32; ++j) w[j] = x[j] * x[j];
  float amax = 0, max = 0;
  for (int j = 0; j < 32; ++j) {
    const float ax = std::fabs(x[j]);
    if (ax > amax) {
      amax = ax;
      max = x[j];
    }
  }
  if (amax < kGroupMaxEps) return 0.0f;
  constexpr int kTries = 7;
  const float v0 = static_cast<float>(kIq4nlValues[0]);
  float d = -max / v0;
  float id = 1 / d;
  float sumqx = 0, sumq2 = 0;
  for (int j = 0; j < 32; ++j) {
    const float v = static_cast<float>(kIq4nlValues[NearestIq4(id * x[j])]);
    const float wv = w[j] * v;
    const float wvx = wv * x[j];
    sumqx += wvx;
    const float wvv = wv * v;
    sumq2 += wvv;
  }
  d = sumq2 > 0 ? sumqx / sumq2 : 0.0f;
  float best = d * sumqx;
  for (int itry = -kTries; itry <= kTries; ++itry) {
    id = static_cast<float>(itry + kIq4nlValues[0]) / max;
    sumqx = sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
      const float v = static_cast<float>(kIq4nlValues[NearestIq4(id * x[j])]);
      const float wv = w[j] * v;
      const float wvx = wv * x[j];
      sumqx += wvx;
      const float wvv = wv * v;
      sumq2 += wvv;
    }
    const float lhs = sumqx * sumqx, rhs = best * sumq2;
    if (sumq2 > 0 && lhs > rhs) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

// 32 codes for x against the inverse step id, packed as IQ4_NL / IQ4_XS sub-blocks are.
void PackIq4(const float* x, float id, uint8_t qs[16]) {
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>(NearestIq4(id * x[j]) | NearestIq4(id * x[j + 16]) << 4);
  }
}

}  // namespace

void QuantizeIQ4_NL(const float* x, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    const float d = FitIq4Block(x);
    BlockIQ4_NL blk{};
    blk.d = Fp32ToFp16(d);
    PackIq4(x, d != 0 ? 1 / d : 0.0f, blk.qs);
    Store(blk, dst, b);
  }
}

// Per super-block: each sub-block of 32 fitted as in IQ4_NL, the 8 scales to 6 bits against
// an f16 super-scale (the largest magnitude -> -32; codes against the unrounded super-scale,
// as ggml does).
void QuantizeIQ4_XS(const float* x, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    float scales[8];
    float max_scale = 0, amax_scale = 0;
    for (int j = 0; j < 8; ++j) {
      scales[j] = FitIq4Block(x + 32 * j);
      const float a = std::fabs(scales[j]);
      if (a > amax_scale) {
        amax_scale = a;
        max_scale = scales[j];
      }
    }
    BlockIQ4_XS blk{};
    const float d = -max_scale / 32;
    blk.d = Fp32ToFp16(d);
    const float id = d != 0 ? 1 / d : 0.0f;
    for (int j = 0; j < 8; ++j) {
      const int l = Clamp(NearestInt(id * scales[j]), -32, 31);
      const float dl = d * static_cast<float>(l);
      PackIq4(x + 32 * j, dl != 0 ? 1 / dl : 0.0f, blk.qs + 16 * j);
      const int ls = l + 32;
      blk.scales_l[j / 2] |= static_cast<uint8_t>((ls & 15) << (4 * (j % 2)));
      blk.scales_h |= static_cast<uint16_t>((ls >> 4) << (2 * j));
    }
    Store(blk, dst, b);
  }
}

}  // namespace mt::lowbit
