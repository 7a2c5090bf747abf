#include "quant/quantize.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "quant/blocks.h"
#include "quant/float16.h"
#include "quant/lowbit.h"
#include "quant/quantize_iq.h"

namespace mt {
namespace {

// Approach: every format stores integer codes q and a few scales. For each block (or
// sub-block) we try a small set of candidate scales, re-fit each by least squares to the
// codes it produced, and keep the one with the least squared error measured the way the
// dequantizer will reconstruct it (f16-rounded scales, same products). All loops are
// sequential and free of randomness, so the output is a pure function of the input.

float RoundF16(float x) { return Fp16ToFp32(Fp32ToFp16(x)); }

// Nearest integer to v, clamped to [lo, hi]. NaN maps to lo, so non-finite input gives
// valid (if meaningless) codes instead of undefined behaviour.
int QuantizeClamped(float v, int lo, int hi) {
  const float flo = static_cast<float>(lo), fhi = static_cast<float>(hi);
  const float c = v >= flo ? (v <= fhi ? v : fhi) : flo;
  // Half away from zero, with a plain truncating conversion (std::nearbyint is a library
  // call on baseline x86-64 and dominated the quantizers' run time).
  return static_cast<int>(c >= 0.0f ? c + 0.5f : c - 0.5f);
}

template <typename T>
void StoreBlock(const T& block, uint8_t* dst, int64_t index) {
  std::memcpy(dst + index * static_cast<int64_t>(sizeof(T)), &block, sizeof(T));
}

// ---- Symmetric codes: x ~ d * q, q in [-qneg, qpos] ----

// Squared error of x ~ d * q with q chosen nearest. `q` receives the codes.
double SymmetricError(const float* x, int n, float d, int qneg, int qpos, int* q) {
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  double err = 0.0;
  for (int i = 0; i < n; ++i) {
    q[i] = QuantizeClamped(x[i] * id, -qneg, qpos);
    const double r = static_cast<double>(x[i]) - static_cast<double>(d * static_cast<float>(q[i]));
    err += r * r;
  }
  return err;
}

// Returns the scale d (after `round_scale`, e.g. to f16) that minimises the squared error
// over a small candidate set; writes the codes for it to `q`.
// Candidates: the signed extreme value x_m mapped to code -qneg + t/4 or to qpos - t/4 for
// t = 0..7 (larger steps, fewer clipped codes), each also re-fitted by least squares.
template <typename RoundScale>
float FitSymmetric(const float* x, int n, int qneg, int qpos, RoundScale round_scale, int* q) {
  std::fill(q, q + n, 0);  // the answer if no candidate is finite (inf input)
  float xm = 0.0f, amax = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      xm = x[i];
    }
  }
  if (amax == 0.0f) return 0.0f;
  int tmp[kQK_K];
  double best_err = -1.0;
  float best_d = 0.0f;
  auto consider = [&](float d) {
    d = round_scale(d);
    if (!std::isfinite(d)) return;
    double err = SymmetricError(x, n, d, qneg, qpos, tmp);
    if (best_err < 0.0 || err < best_err) {
      best_err = err;
      best_d = d;
      std::copy(tmp, tmp + n, q);
    }
    // Least-squares refit for these codes: d* = sum(x q) / sum(q q).
    double sxq = 0.0, sqq = 0.0;
    for (int i = 0; i < n; ++i) {
      sxq += static_cast<double>(x[i]) * tmp[i];
      sqq += static_cast<double>(tmp[i]) * tmp[i];
    }
    if (sqq > 0.0) {
      const float d2 = round_scale(static_cast<float>(sxq / sqq));
      if (!std::isfinite(d2)) return;
      err = SymmetricError(x, n, d2, qneg, qpos, tmp);
      if (err < best_err) {
        best_err = err;
        best_d = d2;
        std::copy(tmp, tmp + n, q);
      }
    }
  };
  for (int t = 0; t < 8; ++t) {
    const float step = 0.25f * static_cast<float>(t);
    consider(xm / (-static_cast<float>(qneg) + step));
    consider(xm / (static_cast<float>(qpos) - step));
  }
  return best_d;
}

// ---- Affine codes: x ~ d * q + m, q in [0, qmax], d >= 0 ----

struct Affine {
  float d = 0.0f;
  float m = 0.0f;
};

// Squared error of x ~ d * q + m (product rounded to float first, as the dequantizers do).
double AffineError(const float* x, int n, Affine a, int qmax, int* q) {
  const float id = a.d > 0.0f ? 1.0f / a.d : 0.0f;
  double err = 0.0;
  for (int i = 0; i < n; ++i) {
    q[i] = QuantizeClamped((x[i] - a.m) * id, 0, qmax);
    const float p = a.d * static_cast<float>(q[i]);
    const double r = static_cast<double>(x[i]) - static_cast<double>(p + a.m);
    err += r * r;
  }
  return err;
}

// Fits (d, m) over candidates: the range [lo, hi] spread over qmax + t/4 steps for
// t = -4..4, then least-squares refits of (d, m) for the codes each produced. With
// `m_nonpositive`, m is kept <= 0 (K-quants store -m as an unsigned 6-bit value).
// `round_ab` rounds a candidate to what the format can store. Writes the best codes to q.
template <typename RoundAffine>
Affine FitAffine(const float* x, int n, int qmax, bool m_nonpositive, RoundAffine round_ab,
                 int* q) {
  std::fill(q, q + n, 0);  // the answer if no candidate is finite (inf input)
  float lo = x[0], hi = x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  if (m_nonpositive) lo = std::min(lo, 0.0f);
  if (!(hi > lo)) return round_ab(Affine{0.0f, lo});  // constant block (or NaN): value m
  int tmp[kQK_K];
  double best_err = -1.0;
  Affine best;
  auto evaluate = [&](Affine a) -> bool {
    a = round_ab(a);
    if (!(a.d >= 0.0f) || !std::isfinite(a.d) || !std::isfinite(a.m)) return false;
    const double err = AffineError(x, n, a, qmax, tmp);
    if (best_err < 0.0 || err < best_err) {
      best_err = err;
      best = a;
      std::copy(tmp, tmp + n, q);
    }
    return true;
  };
  for (int t = -4; t <= 4; ++t) {
    Affine a{(hi - lo) / (static_cast<float>(qmax) + 0.25f * static_cast<float>(t)), lo};
    // Alternate: codes for (d, m), then (d, m) by least squares for those codes.
    for (int iter = 0; iter < 3; ++iter) {
      if (!evaluate(a)) break;
      double sq = 0, sqq = 0, sx = 0, sxq = 0;
      for (int i = 0; i < n; ++i) {
        sq += tmp[i];
        sqq += static_cast<double>(tmp[i]) * tmp[i];
        sx += x[i];
        sxq += static_cast<double>(x[i]) * tmp[i];
      }
      const double det = n * sqq - sq * sq;
      if (det <= 0.0) break;  // all codes equal: nothing to refit
      double d = (n * sxq - sq * sx) / det;
      double m = (sqq * sx - sq * sxq) / det;
      if (m_nonpositive && m > 0.0) {
        m = 0.0;
        d = sxq / sqq;
      }
      if (d <= 0.0) break;
      a = Affine{static_cast<float>(d), static_cast<float>(m)};
    }
  }
  return best;
}

// ---- Fast mode (QuantEffort::kFast): one direct scale per (sub-)block ----
//
// Codes lo..hi with step d cover [(lo - 1/2) d, (hi + 1/2) d]: every value in there is within
// d / 2 of a code. Each block's step comes from its min and max so that they map a quarter
// step beyond the end codes, to lo - 1/4 and hi + 1/4 (kOvershoot). Wherever the format
// stores a scale coarsely (f16, 6- or 8-bit multiples of a super-scale) the stored value is
// rounded *up*, which only widens the grid. So nothing clips and every element is within
// half the stored step, up to float rounding. The per-element loops run over fixed-size
// arrays with selects instead of branches, so that clang vectorizes them.
//
// Why a quarter: with n elements in a block of range R and codes 0..qmax, the n - 2 inner
// errors are about uniform in +-d/2 (variance d^2 / 12) and the two extremes err by a d,
// where d = R / (qmax + 2a). The mean squared error ((n - 2) / 12 + 2 a^2) d^2 / n is least
// at a = (n - 2) / (12 qmax): 0.17 for Q4_1, 0.08 for Q5_1. Measured on 256k N(0, 1) values,
// a = 0 (min and max on codes, the classic choice) is up to 3 % worse in RMS error and
// a = 1/2 (extremes on cell edges) up to 6 %; a = 1/4 is within 1 % of the best a for every
// format here (the K-quants, whose 6-bit offsets shift the grid, gain from the slack).
constexpr float kOvershoot = 0.25f;

// v clamped to [lo, hi] (NaN -> lo), then rounded half up; lo and hi are integers. Clamping
// first keeps the float -> int conversion defined for any input.
inline int FastRound(float v, float lo, float hi) {
  const float c = v >= lo ? (v <= hi ? v : hi) : lo;
  return static_cast<int>(c - lo + 0.5f) + static_cast<int>(lo);
}

// Smallest integer >= v, clamped to [0, hi] (NaN -> 0).
int CeilClamped(float v, int hi) {
  const float c = v >= 0.0f ? (v <= static_cast<float>(hi) ? v : static_cast<float>(hi)) : 0.0f;
  const int i = static_cast<int>(c);
  return static_cast<float>(i) < c ? i + 1 : i;
}

// The smallest f16 >= v (inf above the f16 range; NaN stays NaN).
uint16_t Fp16Up(float v) {
  const uint16_t h = Fp32ToFp16(v);
  if (!(Fp16ToFp32(h) < v)) return h;
  // One f16 step towards +inf: the magnitude grows for positive h, shrinks for negative h.
  return static_cast<uint16_t>((h & 0x8000u) ? h - 1 : h + 1);
}

// The largest f16 <= v.
uint16_t Fp16Down(float v) { return static_cast<uint16_t>(Fp16Up(-v) ^ 0x8000u); }

// The f16 of least magnitude >= |v|, with v's sign.
uint16_t Fp16AwayFromZero(float v) { return v < 0.0f ? Fp16Down(v) : Fp16Up(v); }

struct MinMax {
  float lo = 0.0f;
  float hi = 0.0f;
};

// Min and max of kN floats (kN a multiple of 8); NaNs are skipped, and an all-NaN block gives
// {0, 0}. Eight independent lanes let the loop vectorize (one float min/max chain does not
// without -ffast-math).
template <int kN>
MinMax BlockMinMax(const float* x) {
  float lo[8], hi[8];
  for (int j = 0; j < 8; ++j) {
    lo[j] = INFINITY;
    hi[j] = -INFINITY;
  }
  for (int i = 0; i < kN; i += 8) {
    for (int j = 0; j < 8; ++j) {
      lo[j] = x[i + j] < lo[j] ? x[i + j] : lo[j];
      hi[j] = x[i + j] > hi[j] ? x[i + j] : hi[j];
    }
  }
  MinMax r{lo[0], hi[0]};
  for (int j = 1; j < 8; ++j) {
    r.lo = lo[j] < r.lo ? lo[j] : r.lo;
    r.hi = hi[j] > r.hi ? hi[j] : r.hi;
  }
  if (!(r.lo <= r.hi)) return MinMax{};
  return r;
}

// Symmetric codes q in [-qneg, qpos], qneg = qpos + 1, x ~ d q: the step that maps the side
// of [r.lo, r.hi] with the larger magnitude `big` to the longer, negative end (d < 0
// mirrors) and neither side past its end code + kOvershoot:
// |d| = max(big / (qneg + 1/4), small / (qpos + 1/4)).
float FastSymmetricStep(MinMax r, int qneg, int qpos) {
  const float neg = r.lo < 0.0f ? -r.lo : 0.0f, pos = r.hi > 0.0f ? r.hi : 0.0f;
  const float big = std::max(neg, pos), small = std::min(neg, pos);
  const float d = std::max(big / (static_cast<float>(qneg) + kOvershoot),
                           small / (static_cast<float>(qpos) + kOvershoot));
  return neg >= pos ? d : -d;
}

// Q4_0 / Q5_0 block: codes q = u - qneg in [-qneg, qneg - 1]. Returns the f16 step, rounded
// away from zero. Writes u in [0, 2 qneg - 1].
uint16_t FastSymmetricBlock(const float* x, int qneg, int u[kQK]) {
  const uint16_t h = Fp16AwayFromZero(FastSymmetricStep(BlockMinMax<kQK>(x), qneg, qneg - 1));
  const float d = Fp16ToFp32(h);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const float lo = static_cast<float>(-qneg), hi = static_cast<float>(qneg - 1);
  for (int i = 0; i < kQK; ++i) u[i] = FastRound(x[i] * id, lo, hi) + qneg;
  return h;
}

// Q4_1 / Q5_1 block, x ~ d q + m, q in [0, qmax]. With d0 = (hi - lo) / (qmax + 1/2), code
// 0 at lo + d0 / 4 puts lo at code -1/4 and hi at qmax + 1/4. m is rounded down to f16, then
// d is the smallest f16 with m + (qmax + 1/4) d >= hi; that is d >= d0, so lo stays at code
// -1/4 or above. Writes the codes to u.
void FastAffineBlock(const float* x, int qmax, int u[kQK], uint16_t* d_f16, uint16_t* m_f16) {
  const MinMax r = BlockMinMax<kQK>(x);
  const float d0 = (r.hi - r.lo) / (static_cast<float>(qmax) + 2.0f * kOvershoot);
  *m_f16 = Fp16Down(r.lo + kOvershoot * d0);
  const float m = Fp16ToFp32(*m_f16);
  *d_f16 = Fp16Up((r.hi - m) / (static_cast<float>(qmax) + kOvershoot));
  const float d = Fp16ToFp32(*d_f16);
  const float id = d > 0.0f ? 1.0f / d : 0.0f;
  for (int i = 0; i < kQK; ++i) u[i] = FastRound((x[i] - m) * id, 0.0f, static_cast<float>(qmax));
}

// ---- Per-format quantizers ----

void QuantizeF16(const float* x, uint8_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = Fp32ToFp16(x[i]);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}

void QuantizeBf16(const float* x, uint8_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = Fp32ToBf16(x[i]);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}

// Q8_0: d = amax / 127 rounded to f16, q = round(x / d). Eight bits leave little to gain
// from a search, and this keeps the error bound simple: |x - d q| <= d / 2.
void QuantizeQ8_0(const float* x, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    float amax = 0.0f;
    for (int i = 0; i < kQK; ++i) amax = std::max(amax, std::fabs(x[i]));
    BlockQ8_0 blk{};
    blk.d = Fp32ToFp16(amax / 127.0f);
    const float d = Fp16ToFp32(blk.d);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < kQK; ++i)
      blk.qs[i] = static_cast<int8_t>(QuantizeClamped(x[i] * id, -127, 127));
    StoreBlock(blk, dst, b);
  }
}

// Q4_0 / Q5_0: symmetric codes q in [-qneg, qneg - 1] stored as u = q + qneg, f16 block
// scale. Returns the scale's f16 bits and writes u.
uint16_t FitSymmetricBlock(const float* x, int qneg, QuantEffort effort, int u[kQK]) {
  if (effort == QuantEffort::kFast) return FastSymmetricBlock(x, qneg, u);
  const uint16_t d = Fp32ToFp16(FitSymmetric(x, kQK, qneg, qneg - 1, RoundF16, u));
  for (int i = 0; i < kQK; ++i) u[i] += qneg;
  return d;
}

void SetQ5HighBits(const int* u, uint8_t qh[4]) {  // u: 32 codes in 0..31
  uint32_t bits = 0;                               // bit i = bit 4 of u[i]
  for (int i = 0; i < kQK; ++i) bits |= static_cast<uint32_t>((u[i] >> 4) & 1) << i;
  std::memcpy(qh, &bits, 4);  // little-endian (blocks.h), so qh[i / 8] bit i % 8 = bit i
}

void PackNibbles32(const int* u, uint8_t qs[16]) {  // low 4 bits of 32 codes
  for (int j = 0; j < kQK / 2; ++j) {
    qs[j] = static_cast<uint8_t>((u[j] & 0xF) | ((u[j + kQK / 2] & 0xF) << 4));
  }
}

void QuantizeQ4_0(const float* x, uint8_t* dst, int64_t n, QuantEffort effort) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    int u[kQK];
    BlockQ4_0 blk{};
    blk.d = FitSymmetricBlock(x, 8, effort, u);
    PackNibbles32(u, blk.qs);
    StoreBlock(blk, dst, b);
  }
}

void QuantizeQ5_0(const float* x, uint8_t* dst, int64_t n, QuantEffort effort) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    int u[kQK];
    BlockQ5_0 blk{};
    blk.d = FitSymmetricBlock(x, 16, effort, u);
    SetQ5HighBits(u, blk.qh);
    PackNibbles32(u, blk.qs);
    StoreBlock(blk, dst, b);
  }
}

Affine RoundAffineF16(Affine a) { return Affine{RoundF16(a.d), RoundF16(a.m)}; }

// Q4_1 / Q5_1: affine codes in [0, qmax]; writes the f16 scale and offset and the codes.
void FitAffineBlock(const float* x, int qmax, QuantEffort effort, int q[kQK], uint16_t* d,
                    uint16_t* m) {
  if (effort == QuantEffort::kFast) {
    FastAffineBlock(x, qmax, q, d, m);
    return;
  }
  const Affine a = FitAffine(x, kQK, qmax, /*m_nonpositive=*/false, RoundAffineF16, q);
  *d = Fp32ToFp16(a.d);
  *m = Fp32ToFp16(a.m);
}

void QuantizeQ4_1(const float* x, uint8_t* dst, int64_t n, QuantEffort effort) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    int q[kQK];
    BlockQ4_1 blk{};
    FitAffineBlock(x, 15, effort, q, &blk.d, &blk.m);
    PackNibbles32(q, blk.qs);
    StoreBlock(blk, dst, b);
  }
}

void QuantizeQ5_1(const float* x, uint8_t* dst, int64_t n, QuantEffort effort) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    int q[kQK];
    BlockQ5_1 blk{};
    FitAffineBlock(x, 31, effort, q, &blk.d, &blk.m);
    SetQ5HighBits(q, blk.qh);
    PackNibbles32(q, blk.qs);
    StoreBlock(blk, dst, b);
  }
}

// MXFP4: the shared exponent e puts amax near the top of the e2m1 range. The OCP choice
// e = floor(log2(amax)) - 2 + 127 clips values above 1.5 * 2^floor(log2(amax)); one step
// larger never clips but is coarser. Try both, keep the smaller squared error.
int NearestMxfp4(float v, float d) {
  int best = 0;
  float best_err = std::fabs(v);  // code 0 is zero
  for (int c = 1; c < 16; ++c) {
    const float err = std::fabs(static_cast<float>(kMxfp4Values[c]) * d - v);
    if (err < best_err) {
      best = c;
      best_err = err;
    }
  }
  return best;
}

float Mxfp4HalfScaleOf(int e) {  // 2^(e - 128), as the dequantizer computes it
  return std::ldexp(1.0f, e - 128);
}

void QuantizeMxfp4(const float* x, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    float amax = 0.0f;
    for (int i = 0; i < kQK; ++i) amax = std::max(amax, std::fabs(x[i]));
    int e0 = 0;
    if (amax > 0.0f && std::isfinite(amax)) {
      int exp2;
      std::frexp(amax, &exp2);  // amax = f * 2^exp2, f in [0.5, 1): floor(log2) = exp2 - 1
      e0 = std::clamp(exp2 - 1 - 2 + 127, 0, 254);
    } else if (amax > 0.0f) {
      e0 = 254;
    }
    BlockMxfp4 best{};
    double best_err = -1.0;
    for (int e = e0; e <= std::min(e0 + 1, 254); ++e) {
      BlockMxfp4 blk{};
      blk.e = static_cast<uint8_t>(e);
      const float d = Mxfp4HalfScaleOf(e);
      double err = 0.0;
      int c[kQK];
      for (int i = 0; i < kQK; ++i) {
        c[i] = NearestMxfp4(x[i], d);
        const double r = static_cast<double>(x[i]) -
                         static_cast<double>(static_cast<float>(kMxfp4Values[c[i]]) * d);
        err += r * r;
      }
      PackNibbles32(c, blk.qs);
      if (best_err < 0.0 || err < best_err) {
        best_err = err;
        best = blk;
      }
    }
    StoreBlock(best, dst, b);
  }
}

// MXFP4, fast: the smallest shared exponent whose grid reaches the block's largest magnitude,
// 6 * 2^(e - 127) >= amax, so nothing clips; then the nearest e2m1 value by comparing with the
// midpoints between neighbours (0.25, 0.75, ..., 5 in units of 2^(e - 127)).
void QuantizeMxfp4Fast(const float* x, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    const MinMax r = BlockMinMax<kQK>(x);
    const float amax = std::max(-r.lo, r.hi);
    // e = ceil(log2(amax / 6)) + 127 from the float's bits: its exponent field, plus one
    // unless the mantissa is zero (an exact power of two). Zero gives 0, inf 255 -> 254.
    const uint32_t bits = std::bit_cast<uint32_t>(amax / 6.0f);
    const int e = std::min(static_cast<int>(bits >> 23) + ((bits & 0x7FFFFFu) != 0 ? 1 : 0), 254);
    const float inv_scale = std::ldexp(1.0f, 127 - e);  // 1 / 2^(e - 127), exact
    int c[kQK];
    for (int i = 0; i < kQK; ++i) {
      const float t = std::fabs(x[i]) * inv_scale;
      const int magnitude = (t >= 0.25f) + (t >= 0.75f) + (t >= 1.25f) + (t >= 1.75f) +
                            (t >= 2.5f) + (t >= 3.5f) + (t >= 5.0f);  // codes 0..7
      c[i] = magnitude | (x[i] < 0.0f ? 8 : 0);                       // bit 3: sign
    }
    BlockMxfp4 blk{};
    blk.e = static_cast<uint8_t>(e);
    PackNibbles32(c, blk.qs);
    StoreBlock(blk, dst, b);
  }
}

// Q4_K / Q5_K: fit each 32-element sub-block affinely with m <= 0, quantize the 8 scales
// and the 8 negated mins to 6 bits against f16 super-scales, then re-derive every code
// against the scale and min the dequantizer will actually use.
struct KQuantScales {
  uint16_t d, dmin;
  uint8_t scales[12];
  int q[kQK_K];  // codes in 0..qmax
};

void PackScaleMinK4(const int sc[8], const int m[8], uint8_t scales[12]) {
  std::memset(scales, 0, 12);
  for (int s = 0; s < 4; ++s) {
    scales[s] = static_cast<uint8_t>(sc[s]);
    scales[s + 4] = static_cast<uint8_t>(m[s]);
  }
  for (int s = 4; s < 8; ++s) {
    scales[s + 4] = static_cast<uint8_t>((sc[s] & 0xF) | ((m[s] & 0xF) << 4));
    scales[s - 4] |= static_cast<uint8_t>((sc[s] >> 4) << 6);
    scales[s] |= static_cast<uint8_t>((m[s] >> 4) << 6);
  }
}

KQuantScales FitKQuant(const float* x, int qmax) {
  float sub_d[8], sub_negm[8];
  int q[32];
  auto no_rounding = [](Affine a) { return a; };
  for (int s = 0; s < 8; ++s) {
    const Affine a = FitAffine(x + 32 * s, 32, qmax, /*m_nonpositive=*/true, no_rounding, q);
    sub_d[s] = a.d;
    sub_negm[s] = -a.m;
  }
  const float max_d = *std::max_element(sub_d, sub_d + 8);
  const float max_m = *std::max_element(sub_negm, sub_negm + 8);
  KQuantScales out{};
  out.d = Fp32ToFp16(max_d / 63.0f);
  out.dmin = Fp32ToFp16(max_m / 63.0f);
  const float d = Fp16ToFp32(out.d), dmin = Fp16ToFp32(out.dmin);
  const float id = d > 0.0f ? 1.0f / d : 0.0f;
  const float idmin = dmin > 0.0f ? 1.0f / dmin : 0.0f;
  int sc[8], m[8];
  for (int s = 0; s < 8; ++s) {
    sc[s] = QuantizeClamped(sub_d[s] * id, 0, 63);
    m[s] = QuantizeClamped(sub_negm[s] * idmin, 0, 63);
    const float scale = d * static_cast<float>(sc[s]);
    const float offset = dmin * static_cast<float>(m[s]);
    const float iscale = scale > 0.0f ? 1.0f / scale : 0.0f;
    for (int l = 0; l < 32; ++l) {
      out.q[32 * s + l] = QuantizeClamped((x[32 * s + l] + offset) * iscale, 0, qmax);
    }
  }
  PackScaleMinK4(sc, m, out.scales);
  return out;
}

// Q4_K / Q5_K, fast. Sub-block s (min lo_s, max hi_s) is fitted as in FastAffineBlock:
// code 0 at o_s = lo_s + S0_s / 4 with S0_s = (hi_s - lo_s) / (qmax + 1/2), except that the
// format has x ~ S q - M with M >= 0, so o_s is capped at 0. Then, each rounded up to a 6-bit
// multiple of an f16 super-scale (itself rounded up): first M_s >= -o_s, which keeps lo_s at
// code -1/4 or above, then S_s >= (hi_s + M_s) / (qmax + 1/4), which keeps hi_s at qmax + 1/4
// or below (and makes S_s >= S0_s, as the low end needs).
KQuantScales FitKQuantFast(const float* x, int qmax) {
  float neg_o[8], hi[8];  // -o_s >= 0 and the max of each sub-block
  float neg_o_max = 0.0f;
  for (int s = 0; s < 8; ++s) {
    const MinMax r = BlockMinMax<32>(x + 32 * s);
    const float o =
        r.lo + kOvershoot * (r.hi - r.lo) / (static_cast<float>(qmax) + 2.0f * kOvershoot);
    neg_o[s] = o < 0.0f ? -o : 0.0f;
    hi[s] = r.hi;
    neg_o_max = std::max(neg_o_max, neg_o[s]);
  }
  KQuantScales out{};
  out.dmin = Fp16Up(neg_o_max / 63.0f);
  const float dmin = Fp16ToFp32(out.dmin);
  int sc[8], m[8];
  float offset[8], step[8];  // M_s as the dequantizer computes it; S_s before rounding
  float step_max = 0.0f;
  for (int s = 0; s < 8; ++s) {
    m[s] = dmin > 0.0f ? CeilClamped(neg_o[s] / dmin, 63) : 0;
    offset[s] = dmin * static_cast<float>(m[s]);
    step[s] = (hi[s] + offset[s]) / (static_cast<float>(qmax) + kOvershoot);
    step_max = std::max(step_max, step[s]);
  }
  out.d = Fp16Up(step_max / 63.0f);
  const float d = Fp16ToFp32(out.d);
  for (int s = 0; s < 8; ++s) {
    sc[s] = d > 0.0f ? CeilClamped(step[s] / d, 63) : 0;
    const float scale = d * static_cast<float>(sc[s]);
    const float iscale = scale > 0.0f ? 1.0f / scale : 0.0f;
    for (int l = 0; l < 32; ++l) {
      out.q[32 * s + l] =
          FastRound((x[32 * s + l] + offset[s]) * iscale, 0.0f, static_cast<float>(qmax));
    }
  }
  PackScaleMinK4(sc, m, out.scales);
  return out;
}

KQuantScales FitKQuant(const float* x, int qmax, QuantEffort effort) {
  return effort == QuantEffort::kFast ? FitKQuantFast(x, qmax) : FitKQuant(x, qmax);
}

void QuantizeQ4_K(const float* x, uint8_t* dst, int64_t n, QuantEffort effort) {
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    const KQuantScales k = FitKQuant(x, 15, effort);
    BlockQ4_K blk{};
    blk.d = k.d;
    blk.dmin = k.dmin;
    std::memcpy(blk.scales, k.scales, 12);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        blk.qs[32 * c + l] = static_cast<uint8_t>(k.q[64 * c + l] | (k.q[64 * c + 32 + l] << 4));
      }
    }
    StoreBlock(blk, dst, b);
  }
}

void QuantizeQ5_K(const float* x, uint8_t* dst, int64_t n, QuantEffort effort) {
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    const KQuantScales k = FitKQuant(x, 31, effort);
    BlockQ5_K blk{};
    blk.d = k.d;
    blk.dmin = k.dmin;
    std::memcpy(blk.scales, k.scales, 12);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int lo = k.q[64 * c + l], hi = k.q[64 * c + 32 + l];
        blk.qs[32 * c + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
        // Sub-block s = 2c uses bit 2c of qh[l], sub-block 2c + 1 uses bit 2c + 1.
        blk.qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      }
    }
    StoreBlock(blk, dst, b);
  }
}

// Q6_K: symmetric fit per 16-element sub-block, 8-bit signed sub-scales against an f16
// super-scale (largest |sub-scale| -> 127), then codes re-derived against the final scales.
// Writes d and scales to `blk` and the codes + 32 (0..63) to q.
void FitQ6_K(const float* x, BlockQ6_K* blk, int q[kQK_K]) {
  float sub_d[16];
  auto no_rounding = [](float d) { return d; };
  float max_abs = 0.0f;
  for (int s = 0; s < 16; ++s) {
    sub_d[s] = FitSymmetric(x + 16 * s, 16, 32, 31, no_rounding, q + 16 * s);
    max_abs = std::max(max_abs, std::fabs(sub_d[s]));
  }
  blk->d = Fp32ToFp16(max_abs / 127.0f);
  const float d = Fp16ToFp32(blk->d);
  const float id = d > 0.0f ? 1.0f / d : 0.0f;
  for (int s = 0; s < 16; ++s) {
    const int sc = QuantizeClamped(sub_d[s] * id, -127, 127);
    blk->scales[s] = static_cast<int8_t>(sc);
    const float scale = d * static_cast<float>(sc);
    const float iscale = scale != 0.0f ? 1.0f / scale : 0.0f;
    for (int l = 0; l < 16; ++l) {
      q[16 * s + l] = QuantizeClamped(x[16 * s + l] * iscale, -32, 31) + 32;  // 0..63
    }
  }
}

// Q6_K, fast: each sub-block's step from FastSymmetricStep (codes -32..31), then the f16
// super-scale and the 8-bit sub-scales rounded up in magnitude (|sub-scale| <= 127).
void FitQ6_KFast(const float* x, BlockQ6_K* blk, int q[kQK_K]) {
  float step[16];
  float max_abs = 0.0f;
  for (int s = 0; s < 16; ++s) {
    step[s] = FastSymmetricStep(BlockMinMax<16>(x + 16 * s), 32, 31);
    max_abs = std::max(max_abs, std::fabs(step[s]));
  }
  blk->d = Fp16Up(max_abs / 127.0f);
  const float d = Fp16ToFp32(blk->d);
  for (int s = 0; s < 16; ++s) {
    const int magnitude = d > 0.0f ? CeilClamped(std::fabs(step[s]) / d, 127) : 0;
    const int sc = step[s] < 0.0f ? -magnitude : magnitude;
    blk->scales[s] = static_cast<int8_t>(sc);
    const float scale = d * static_cast<float>(sc);
    const float iscale = scale != 0.0f ? 1.0f / scale : 0.0f;
    for (int l = 0; l < 16; ++l) {
      q[16 * s + l] = FastRound(x[16 * s + l] * iscale, -32.0f, 31.0f) + 32;  // 0..63
    }
  }
}

void QuantizeQ6_K(const float* x, uint8_t* dst, int64_t n, QuantEffort effort) {
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    int q[kQK_K];
    BlockQ6_K blk{};
    if (effort == QuantEffort::kFast) {
      FitQ6_KFast(x, &blk, q);
    } else {
      FitQ6_K(x, &blk, q);
    }
    for (int h = 0; h < 2; ++h) {
      const int* qh_src = q + 128 * h;
      for (int l = 0; l < 32; ++l) {
        const int q0 = qh_src[l], q1 = qh_src[l + 32], q2 = qh_src[l + 64], q3 = qh_src[l + 96];
        blk.ql[64 * h + l] = static_cast<uint8_t>((q0 & 0xF) | ((q2 & 0xF) << 4));
        blk.ql[64 * h + l + 32] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
        blk.qh[32 * h + l] = static_cast<uint8_t>((q0 >> 4) | ((q1 >> 4) << 2) | ((q2 >> 4) << 4) |
                                                  ((q3 >> 4) << 6));
      }
    }
    StoreBlock(blk, dst, b);
  }
}

}  // namespace

bool CanQuantize(GgmlType type) { return TraitsOf(type).quantized; }

void QuantizeRow(GgmlType type, const float* src, void* dst, int64_t n, QuantEffort effort) {
  MT_CHECK_MSG(CanQuantize(type), "QuantizeRow: type has no quantizer");
  MT_CHECK_MSG(n >= 0 && n % TraitsOf(type).block_size == 0,
               "QuantizeRow: n is not a multiple of the block size");
  auto* bytes = static_cast<uint8_t*>(dst);
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(bytes, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::kF16:
      return QuantizeF16(src, bytes, n);
    case GgmlType::kBF16:
      return QuantizeBf16(src, bytes, n);
    case GgmlType::kQ8_0:
      return QuantizeQ8_0(src, bytes, n);
    case GgmlType::kQ4_0:
      return QuantizeQ4_0(src, bytes, n, effort);
    case GgmlType::kQ4_1:
      return QuantizeQ4_1(src, bytes, n, effort);
    case GgmlType::kQ5_0:
      return QuantizeQ5_0(src, bytes, n, effort);
    case GgmlType::kQ5_1:
      return QuantizeQ5_1(src, bytes, n, effort);
    case GgmlType::kQ4_K:
      return QuantizeQ4_K(src, bytes, n, effort);
    case GgmlType::kQ5_K:
      return QuantizeQ5_K(src, bytes, n, effort);
    case GgmlType::kQ6_K:
      return QuantizeQ6_K(src, bytes, n, effort);
    case GgmlType::kMXFP4:
      return effort == QuantEffort::kFast ? QuantizeMxfp4Fast(src, bytes, n)
                                          : QuantizeMxfp4(src, bytes, n);
    case GgmlType::kQ2_K:  // llama.cpp's algorithms, in both efforts (quant/lowbit.h)
      return lowbit::QuantizeQ2_K(src, bytes, n);
    case GgmlType::kQ3_K:
      return lowbit::QuantizeQ3_K(src, bytes, n);
    case GgmlType::kIQ4_NL:
      return lowbit::QuantizeIQ4_NL(src, bytes, n);
    case GgmlType::kIQ4_XS:
      return lowbit::QuantizeIQ4_XS(src, bytes, n);
    case GgmlType::kIQ2_XXS:
    case GgmlType::kIQ2_XS:
    case GgmlType::kIQ2_S:
    case GgmlType::kIQ3_XXS:
    case GgmlType::kIQ3_S:
    case GgmlType::kIQ1_S:
    case GgmlType::kIQ1_M:
      return QuantizeIqRow(type, src, bytes, n, effort);
    default:
      MT_CHECK_MSG(false, "QuantizeRow: unreachable");
  }
}

}  // namespace mt
