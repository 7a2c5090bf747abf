#include "quant/quantize_iq.h"

#include <climits>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "quant/blocks_iq.h"
#include "quant/float16.h"
#include "quant/iq_grids.h"

namespace mt {
namespace {

// ---- Nearest grid points ------------------------------------------------------------------
//
// A grid's coordinates each take one of a few levels, so the product lattice of all level
// combinations contains the grid. Rounding each coordinate of a target to its nearest level
// gives the nearest lattice point; if it is on the grid, it is the nearest grid point. Else
// the answer is searched among a short list made once per lattice point: the grid points at
// the two smallest distances from it (llama.cpp's neighbour lists are of the same kind).

struct Lattice {
  int coords = 0;               // 8, or 4 (IQ3)
  int n_levels = 0;             // 3, or 8 (IQ3)
  float level[8] = {};          // the level values, ascending
  float mid[7] = {};            // midpoints between neighbouring levels
  std::vector<float> point;     // (points, coords): the grid's points
  std::vector<uint32_t> start;  // lattice point p: candidates cand[start[p] .. start[p + 1])
  std::vector<uint16_t> cand;   // grid indices
};

Lattice BuildLattice(IqGridId id) {
  Lattice lat;
  const bool iq3 = id == IqGridId::kIq3Xxs || id == IqGridId::kIq3S;
  const int* levels = id == IqGridId::kIq3Xxs ? kIq3XxsLevels
                      : id == IqGridId::kIq3S ? kIq3SLevels
                      : id == IqGridId::kIq1S ? kIq1Levels
                                              : kIq2Levels;
  lat.coords = iq3 ? 4 : 8;
  lat.n_levels = iq3 ? 8 : 3;
  const int bits = iq3 ? 3 : 2;
  for (int i = 0; i < lat.n_levels; ++i) lat.level[i] = static_cast<float>(levels[i]);
  for (int i = 0; i + 1 < lat.n_levels; ++i) lat.mid[i] = 0.5f * (lat.level[i] + lat.level[i + 1]);
  int lattice_size = 1;
  for (int k = 0; k < lat.coords; ++k) lattice_size *= lat.n_levels;
  const int n_points = IqGridPoints(id);
  std::vector<int> point_level(n_points * lat.coords);
  std::vector<int> on_grid(lattice_size, -1);
  lat.point.resize(n_points * lat.coords);
  for (int i = 0; i < n_points; ++i) {
    const int code = IqGridLevelIndex(id, i);
    int p = 0;
    for (int k = 0, mul = 1; k < lat.coords; ++k, mul *= lat.n_levels) {
      const int l = (code >> (bits * k)) & ((1 << bits) - 1);
      point_level[i * lat.coords + k] = levels[l];
      lat.point[i * lat.coords + k] = static_cast<float>(levels[l]);
      p += l * mul;
    }
    on_grid[p] = i;
  }
  lat.start.resize(lattice_size + 1);
  std::vector<int> dist(n_points);
  for (int p = 0; p < lattice_size; ++p) {
    lat.start[p] = static_cast<uint32_t>(lat.cand.size());
    if (on_grid[p] >= 0) {
      lat.cand.push_back(static_cast<uint16_t>(on_grid[p]));
      continue;
    }
    int pl[8];
    for (int k = 0, q = p; k < lat.coords; ++k, q /= lat.n_levels) pl[k] = levels[q % lat.n_levels];
    int d0 = INT_MAX, d1 = INT_MAX;  // the two smallest distinct squared distances (exact)
    for (int i = 0; i < n_points; ++i) {
      int d = 0;
      for (int k = 0; k < lat.coords; ++k) {
        const int e = pl[k] - point_level[i * lat.coords + k];
        d += e * e;
      }
      dist[i] = d;
      if (d < d0) {
        d1 = d0;
        d0 = d;
      } else if (d > d0 && d < d1) {
        d1 = d;
      }
    }
    for (int i = 0; i < n_points; ++i) {
      if (dist[i] <= d1) lat.cand.push_back(static_cast<uint16_t>(i));
    }
  }
  lat.start[lattice_size] = static_cast<uint32_t>(lat.cand.size());
  return lat;
}

// Built on first use (thread-safe static initialization), one grid at a time.
const Lattice& LatticeOf(IqGridId id) {
  switch (id) {
    case IqGridId::kIq2Xxs: {
      static const Lattice lat = BuildLattice(id);
      return lat;
    }
    case IqGridId::kIq2Xs: {
      static const Lattice lat = BuildLattice(id);
      return lat;
    }
    case IqGridId::kIq2S: {
      static const Lattice lat = BuildLattice(id);
      return lat;
    }
    case IqGridId::kIq3Xxs: {
      static const Lattice lat = BuildLattice(id);
      return lat;
    }
    case IqGridId::kIq3S: {
      static const Lattice lat = BuildLattice(id);
      return lat;
    }
    case IqGridId::kIq1S:
      break;
  }
  static const Lattice lat = BuildLattice(IqGridId::kIq1S);
  return lat;
}

// The grid point nearest to t[0 .. coords) among the candidates of t's rounded lattice point;
// its squared distance to t goes to *err. A NaN target gives the first candidate.
int Nearest(const Lattice& lat, const float* t, float* err) {
  int p = 0;
  for (int k = 0, mul = 1; k < lat.coords; ++k, mul *= lat.n_levels) {
    int l = 0;
    while (l + 1 < lat.n_levels && t[k] > lat.mid[l]) ++l;
    p += l * mul;
  }
  int best = lat.cand[lat.start[p]];
  float best_err = INFINITY;
  for (uint32_t c = lat.start[p]; c < lat.start[p + 1]; ++c) {
    const float* g = lat.point.data() + static_cast<size_t>(lat.cand[c]) * lat.coords;
    float e = 0.0f;
    for (int k = 0; k < lat.coords; ++k) e += (t[k] - g[k]) * (t[k] - g[k]);
    if (e < best_err) {
      best_err = e;
      best = lat.cand[c];
    }
  }
  *err = best_err;
  return best;
}

// ---- Formats ------------------------------------------------------------------------------

enum class Signs : uint8_t {
  kParity7,  // 7 stored sign bits, the 8th their parity (IQ2_XXS, IQ2_XS, IQ3_XXS)
  kAll8,     // 8 stored sign bits (IQ2_S, IQ3_S)
  kNone,     // no signs: IQ1's grid is signed, plus a delta of +-1/8
};

// x = D * L * w (quant/blocks_iq.h). In the units the search works in, x ~ sc * v with v the
// signed level value (IQ2/IQ3: w itself, sc = D * L; IQ1: grid coordinate + delta, with
// delta = +-1/8, sc = 8 D L).
struct Format {
  GgmlType type;
  IqGridId grid;
  int sub;         // elements per odd scale L: 16 or 32
  int ls_max;      // L = 2 ls + 1, ls in [0, ls_max]
  float d_factor;  // D = d * d_factor
  Signs signs;
  int delta_unit;  // IQ1: elements sharing one delta (32 or 8)
  float unit;      // sc / (D * L): 1, or 8 (IQ1)
};

const Format& FormatOf(GgmlType type) {
  static const Format kFormats[] = {
      {GgmlType::kIQ2_XXS, IqGridId::kIq2Xxs, 32, 15, 0.125f, Signs::kParity7, 0, 1.0f},
      {GgmlType::kIQ2_XS, IqGridId::kIq2Xs, 16, 15, 0.125f, Signs::kParity7, 0, 1.0f},
      {GgmlType::kIQ2_S, IqGridId::kIq2S, 16, 15, 0.125f, Signs::kAll8, 0, 1.0f},
      {GgmlType::kIQ3_XXS, IqGridId::kIq3Xxs, 32, 15, 0.25f, Signs::kParity7, 0, 1.0f},
      {GgmlType::kIQ3_S, IqGridId::kIq3S, 32, 15, 1.0f, Signs::kAll8, 0, 1.0f},
      {GgmlType::kIQ1_S, IqGridId::kIq1S, 32, 7, 0.125f, Signs::kNone, 32, 8.0f},
      {GgmlType::kIQ1_M, IqGridId::kIq1S, 16, 7, 0.125f, Signs::kNone, 8, 8.0f},
  };
  for (const Format& f : kFormats) {
    if (f.type == type) return f;
  }
  MT_CHECK_MSG(false, "QuantizeIqRow: not an IQ lattice type");
  return kFormats[0];
}

// The codes of one super-block.
struct Codes {
  uint16_t index[32][2];  // grid index of each group (IQ3: of its two halves)
  uint8_t sign[32];       // sign bits of each group (bit j: element j negative)
  bool delta_neg[32];     // IQ1: the group's delta is -1/8
};

// The super-block being quantized and what does not depend on the scales.
struct Work {
  const Format* f;
  const Lattice* lat;
  const float* x;    // 256 values
  float basis[256];  // IQ2/IQ3: s_i * x_i with the chosen signs s_i (>= 0 but for a parity
                     // flip); IQ1: x itself
  uint8_t sign[32];
};

// Chooses each group's signs (IQ2/IQ3): the elements' own; with 7-bit signs and an odd count
// of negatives, the smallest magnitude is flipped (its value then comes out with the wrong
// sign, but small).
void ChooseSigns(Work* w) {
  for (int g = 0; g < 32; ++g) {
    const float* x = w->x + 8 * g;
    int bits = 0;
    for (int j = 0; j < 8; ++j) bits |= (x[j] < 0.0f ? 1 : 0) << j;
    if (w->f->signs == Signs::kParity7 && __builtin_popcount(bits) % 2 == 1) {
      int jmin = 0;
      for (int j = 1; j < 8; ++j) {
        if (std::fabs(x[j]) < std::fabs(x[jmin])) jmin = j;
      }
      bits ^= 1 << jmin;
    }
    w->sign[g] = static_cast<uint8_t>(bits);
    for (int j = 0; j < 8; ++j) w->basis[8 * g + j] = (bits >> j) & 1 ? -x[j] : x[j];
  }
  if (w->f->signs == Signs::kNone) {
    std::memset(w->sign, 0, sizeof(w->sign));
    std::memcpy(w->basis, w->x, sizeof(w->basis));
  }
}

// Codes for group g with scale sc (> 0, finite) and, for IQ1, delta sign `neg`. Returns the
// squared error in x's units and adds sum(x v) and sum(v v) to *xv, *vv (for a refit).
float FitGroup(const Work& w, int g, float sc, bool neg, Codes* c, double* xv, double* vv) {
  const Lattice& lat = *w.lat;
  const float inv = 1.0f / sc;
  const float shift = w.f->signs == Signs::kNone ? (neg ? -0.125f : 0.125f) : 0.0f;
  float t[8];
  for (int j = 0; j < 8; ++j) t[j] = w.basis[8 * g + j] * inv - shift;
  float err = 0.0f;
  for (int h = 0; h < 8 / lat.coords; ++h) {
    float e;
    const int i = Nearest(lat, t + h * lat.coords, &e);
    c->index[g][h] = static_cast<uint16_t>(i);
    err += e;
    const float* p = lat.point.data() + static_cast<size_t>(i) * lat.coords;
    for (int k = 0; k < lat.coords; ++k) {
      const double v = static_cast<double>(p[k]) + shift;
      *xv += static_cast<double>(w.basis[8 * g + h * lat.coords + k]) * v;
      *vv += v * v;
    }
  }
  c->delta_neg[g] = neg;
  return err * sc * sc;
}

// Codes for the groups of sub-block j with scale sc; IQ1 picks the better delta per delta
// unit. Returns the squared error; *xv, *vv as FitGroup's for the chosen codes.
double FitSub(const Work& w, int j, float sc, Codes* c, double* xv, double* vv) {
  const int g0 = j * w.f->sub / 8, g1 = g0 + w.f->sub / 8;
  *xv = *vv = 0.0;
  if (!(sc > 0.0f) || !std::isfinite(sc)) {  // a zero (or broken) sub-block: every code 0
    double err = 0.0;
    for (int g = g0; g < g1; ++g) {
      c->index[g][0] = c->index[g][1] = 0;
      c->delta_neg[g] = false;
      for (int k = 0; k < 8; ++k) err += static_cast<double>(w.x[8 * g + k]) * w.x[8 * g + k];
    }
    return err;
  }
  if (w.f->signs != Signs::kNone) {
    double err = 0.0;
    for (int g = g0; g < g1; ++g) err += FitGroup(w, g, sc, false, c, xv, vv);
    return err;
  }
  const int unit_groups = w.f->delta_unit / 8;
  double err = 0.0;
  for (int u = g0; u < g1; u += unit_groups) {
    Codes alt;
    double e[2] = {0.0, 0.0}, uxv[2] = {0.0, 0.0}, uvv[2] = {0.0, 0.0};
    for (int g = u; g < u + unit_groups; ++g) {
      e[0] += FitGroup(w, g, sc, false, c, &uxv[0], &uvv[0]);
      e[1] += FitGroup(w, g, sc, true, &alt, &uxv[1], &uvv[1]);
    }
    const int pick = e[1] < e[0] ? 1 : 0;
    if (pick == 1) {
      for (int g = u; g < u + unit_groups; ++g) {
        c->index[g][0] = alt.index[g][0];
        c->delta_neg[g] = true;
      }
    }
    err += e[pick];
    *xv += uxv[pick];
    *vv += uvv[pick];
  }
  return err;
}

// The scale of sub-block j with the least squared error among candidates sc = amax / (vmax r)
// (vmax the largest |v|, r in the effort's list), each refitted by least squares.
float BestSubScale(const Work& w, int j, QuantEffort effort) {
  float amax = 0.0f;
  for (int i = j * w.f->sub; i < (j + 1) * w.f->sub; ++i) amax = std::fmax(amax, std::fabs(w.x[i]));
  if (!(amax > 0.0f) || !std::isfinite(amax)) return 0.0f;
  const Lattice& lat = *w.lat;
  const float vmax = lat.level[lat.n_levels - 1] + (w.f->signs == Signs::kNone ? 0.125f : 0.0f);
  static constexpr float kBestR[] = {0.60f, 0.65f, 0.70f, 0.75f, 0.80f, 0.85f, 0.90f, 0.95f,
                                     1.00f, 1.05f, 1.10f, 1.15f, 1.20f, 1.25f, 1.30f, 1.35f};
  static constexpr float kFastR[] = {0.75f, 0.90f, 1.05f, 1.20f};
  const float* rs = effort == QuantEffort::kBest ? kBestR : kFastR;
  const int n = effort == QuantEffort::kBest ? 16 : 4;
  double best_err = INFINITY;
  float best_sc = amax / vmax;
  Codes c;
  for (int k = 0; k < n; ++k) {
    const float sc = amax / (vmax * rs[k]);
    double xv, vv;
    const double err = FitSub(w, j, sc, &c, &xv, &vv);
    if (err < best_err) {
      best_err = err;
      best_sc = sc;
    }
    if (vv > 0.0 && xv > 0.0) {
      const float refit = static_cast<float>(xv / vv);
      const double err2 = FitSub(w, j, refit, &c, &xv, &vv);
      if (err2 < best_err) {
        best_err = err2;
        best_sc = refit;
      }
    }
  }
  return best_sc;
}

// Integer in [lo, hi] nearest to v (NaN -> lo).
int RoundClamped(float v, int lo, int hi) {
  const float c = v >= static_cast<float>(lo)
                      ? (v <= static_cast<float>(hi) ? v : static_cast<float>(hi))
                      : static_cast<float>(lo);
  return static_cast<int>(c + 0.5f);
}

struct Result {
  uint16_t d;  // f16
  int ls[16];  // per sub-block (8 or 16 of them)
  Codes codes;
  double err;
};

// Codes for every sub-block with the scales D (from f16 d) and ls; returns the error and adds
// to the refit sums of D (x ~ D * (unit L v)).
double FitAll(const Work& w, uint16_t d, const int* ls, Codes* c, double* xu, double* uu) {
  const float big_d = Fp16ToFp32(d) * w.f->d_factor;
  const int n_sub = 256 / w.f->sub;
  double err = 0.0;
  *xu = *uu = 0.0;
  for (int j = 0; j < n_sub; ++j) {
    const float l = w.f->unit * static_cast<float>(2 * ls[j] + 1);
    double xv, vv;
    err += FitSub(w, j, big_d * l, c, &xv, &vv);
    *xu += l * xv;
    *uu += static_cast<double>(l) * l * vv;
  }
  return err;
}

Result QuantizeSuperBlock(const Format& f, const float* x, QuantEffort effort) {
  Work w;
  w.f = &f;
  w.lat = &LatticeOf(f.grid);
  w.x = x;
  ChooseSigns(&w);
  const int n_sub = 256 / f.sub;
  float sc[16];
  float sc_max = 0.0f;
  for (int j = 0; j < n_sub; ++j) {
    sc[j] = BestSubScale(w, j, effort);
    sc_max = std::fmax(sc_max, sc[j]);
  }
  Result r{};
  const float l_max = static_cast<float>(2 * f.ls_max + 1);
  // D puts the largest sub-scale at the top odd L; each sub-block takes the nearest odd L.
  const float d0 = sc_max / (f.unit * l_max);
  r.d = Fp32ToFp16(d0 / f.d_factor);
  const float big_d = Fp16ToFp32(r.d) * f.d_factor;
  for (int j = 0; j < n_sub; ++j) {
    r.ls[j] =
        big_d > 0.0f ? RoundClamped((sc[j] / (f.unit * big_d) - 1.0f) * 0.5f, 0, f.ls_max) : 0;
  }
  double xu, uu;
  r.err = FitAll(w, r.d, r.ls, &r.codes, &xu, &uu);
  // One least-squares refit of D for these codes, kept if the codes it then gives are better.
  if (uu > 0.0 && xu > 0.0) {
    Result r2 = r;
    r2.d = Fp32ToFp16(static_cast<float>(xu / uu) / f.d_factor);
    r2.err = FitAll(w, r2.d, r2.ls, &r2.codes, &xu, &uu);
    if (r2.err < r.err) r = r2;
  }
  for (int g = 0; g < 32; ++g) r.codes.sign[g] = w.sign[g];
  return r;
}

// ---- Packing ------------------------------------------------------------------------------

void Put32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }

void Pack(const Format& f, const Result& r, uint8_t* dst) {
  const Codes& c = r.codes;
  switch (f.type) {
    case GgmlType::kIQ2_XXS: {
      BlockIq2Xxs b{};
      b.d = r.d;
      auto* qs = reinterpret_cast<uint8_t*>(b.qs);
      for (int ib = 0; ib < 8; ++ib) {
        uint32_t w0 = 0, w1 = static_cast<uint32_t>(r.ls[ib]) << 28;
        for (int l = 0; l < 4; ++l) {
          w0 |= static_cast<uint32_t>(c.index[4 * ib + l][0] & 0xFF) << (8 * l);
          w1 |= static_cast<uint32_t>(c.sign[4 * ib + l] & 127) << (7 * l);
        }
        Put32(qs + 8 * ib, w0);
        Put32(qs + 8 * ib + 4, w1);
      }
      std::memcpy(dst, &b, sizeof(b));
      return;
    }
    case GgmlType::kIQ2_XS: {
      BlockIq2Xs b{};
      b.d = r.d;
      for (int g = 0; g < 32; ++g) {
        b.qs[g] = static_cast<uint16_t>((c.index[g][0] & 511) | (c.sign[g] & 127) << 9);
      }
      for (int ib = 0; ib < 8; ++ib)
        b.scales[ib] = static_cast<uint8_t>(r.ls[2 * ib] | r.ls[2 * ib + 1] << 4);
      std::memcpy(dst, &b, sizeof(b));
      return;
    }
    case GgmlType::kIQ2_S: {
      BlockIq2S b{};
      b.d = r.d;
      for (int g = 0; g < 32; ++g) {
        b.qs[g] = static_cast<uint8_t>(c.index[g][0] & 0xFF);
        b.qs[32 + g] = c.sign[g];
        b.qh[g / 4] |= static_cast<uint8_t>(((c.index[g][0] >> 8) & 3) << (2 * (g % 4)));
      }
      for (int ib = 0; ib < 8; ++ib)
        b.scales[ib] = static_cast<uint8_t>(r.ls[2 * ib] | r.ls[2 * ib + 1] << 4);
      std::memcpy(dst, &b, sizeof(b));
      return;
    }
    case GgmlType::kIQ3_XXS: {
      BlockIq3Xxs b{};
      b.d = r.d;
      for (int g = 0; g < 32; ++g) {
        b.qs[2 * g] = static_cast<uint8_t>(c.index[g][0]);
        b.qs[2 * g + 1] = static_cast<uint8_t>(c.index[g][1]);
      }
      for (int ib = 0; ib < 8; ++ib) {
        uint32_t w = static_cast<uint32_t>(r.ls[ib]) << 28;
        for (int l = 0; l < 4; ++l) w |= static_cast<uint32_t>(c.sign[4 * ib + l] & 127) << (7 * l);
        Put32(b.qs + 64 + 4 * ib, w);
      }
      std::memcpy(dst, &b, sizeof(b));
      return;
    }
    case GgmlType::kIQ3_S: {
      BlockIq3S b{};
      b.d = r.d;
      for (int g = 0; g < 32; ++g) {
        for (int h = 0; h < 2; ++h) {
          b.qs[2 * g + h] = static_cast<uint8_t>(c.index[g][h] & 0xFF);
          b.qh[g / 4] |= static_cast<uint8_t>(((c.index[g][h] >> 8) & 1) << (2 * (g % 4) + h));
        }
        b.signs[g] = c.sign[g];
      }
      for (int ib = 0; ib < 8; ++ib)
        b.scales[ib / 2] |= static_cast<uint8_t>(r.ls[ib] << (4 * (ib % 2)));
      std::memcpy(dst, &b, sizeof(b));
      return;
    }
    case GgmlType::kIQ1_S: {
      BlockIq1S b{};
      b.d = r.d;
      for (int ib = 0; ib < 8; ++ib) {
        uint32_t qh = static_cast<uint32_t>(r.ls[ib]) << 12 | (c.delta_neg[4 * ib] ? 0x8000u : 0u);
        for (int l = 0; l < 4; ++l) {
          const int g = 4 * ib + l;
          b.qs[g] = static_cast<uint8_t>(c.index[g][0] & 0xFF);
          qh |= static_cast<uint32_t>((c.index[g][0] >> 8) & 7) << (3 * l);
        }
        b.qh[ib] = static_cast<uint16_t>(qh);
      }
      std::memcpy(dst, &b, sizeof(b));
      return;
    }
    default: {  // IQ1_M
      BlockIq1M b{};
      for (int g = 0; g < 32; ++g) {
        b.qs[g] = static_cast<uint8_t>(c.index[g][0] & 0xFF);
        const int nibble = ((c.index[g][0] >> 8) & 7) | (c.delta_neg[g] ? 8 : 0);
        b.qh[g / 2] |= static_cast<uint8_t>(nibble << (4 * (g % 2)));
      }
      uint16_t s[4] = {};
      for (int j = 0; j < 16; ++j) s[j / 4] |= static_cast<uint16_t>(r.ls[j] << (3 * (j % 4)));
      for (int m = 0; m < 4; ++m) s[m] |= static_cast<uint16_t>(((r.d >> (4 * m)) & 0xF) << 12);
      std::memcpy(b.scales, s, 8);
      std::memcpy(dst, &b, sizeof(b));
      return;
    }
  }
}

}  // namespace

bool IsIqLatticeType(GgmlType type) {
  switch (type) {
    case GgmlType::kIQ2_XXS:
    case GgmlType::kIQ2_XS:
    case GgmlType::kIQ2_S:
    case GgmlType::kIQ3_XXS:
    case GgmlType::kIQ3_S:
    case GgmlType::kIQ1_S:
    case GgmlType::kIQ1_M:
      return true;
    default:
      return false;
  }
}

void QuantizeIqRow(GgmlType type, const float* x, uint8_t* dst, int64_t n, QuantEffort effort) {
  const Format& f = FormatOf(type);
  const uint64_t block_bytes = TraitsOf(type).type_size;
  for (int64_t b = 0; b < n / 256; ++b) {
    const Result r = QuantizeSuperBlock(f, x + 256 * b, effort);
    Pack(f, r, dst + b * block_bytes);
  }
}

}  // namespace mt
