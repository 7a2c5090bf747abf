// Scalar variant: the reference of the integer path, in plain C++ (any CPU).
//
// Per (row, token) and weight block, the integer sum of code products is exact; it is then
// scaled in float and added to one float accumulator, block after block. The float ops per
// (row, token) do not depend on the other rows or tokens, hence batch invariance.
#include <cmath>
#include <cstring>

#include "kernels/matmul_internal.h"
#include "quant/blocks.h"
#include "quant/dequant.h"
#include "quant/float16.h"

namespace mt::kernels {
namespace {

// ---- Activation quantization (the definition every variant reproduces bit for bit) -----

// The code of v = x * (127 / amax): clamped as x86 maxps/minps do (NaN -> -127), then
// rounded half to even (as cvtps2dq under the default rounding mode).
int8_t Code(float v) {
  v = v > -127.0f ? v : -127.0f;
  v = v < 127.0f ? v : 127.0f;
  return static_cast<int8_t>(std::nearbyint(v));
}

// Quantizes n floats; returns d.
float QuantBlock(const float* x, int n, int8_t* q) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    amax = amax > a ? amax : a;
  }
  const float d = amax / 127.0f;
  const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
  for (int i = 0; i < n; ++i) q[i] = Code(x[i] * id);
  return d;
}

void QuantizeQ8_0(const float* x, int64_t cols, uint8_t* dst) {
  const int64_t nb = cols / 32, nbp = Q8_0PaddedBlocks(cols);
  auto* qs = reinterpret_cast<int8_t*>(dst);
  auto* d = reinterpret_cast<float*>(dst + Q8_0ScaleOffset(nbp));
  auto* sum = reinterpret_cast<float*>(dst + Q8_0SumOffset(nbp));
  for (int64_t b = 0; b < nb; ++b) {
    d[b] = QuantBlock(x + 32 * b, 32, qs + 32 * b);
    int s = 0;
    for (int i = 0; i < 32; ++i) s += qs[32 * b + i];
    sum[b] = d[b] * static_cast<float>(s);
  }
  for (int64_t b = nb; b < nbp; ++b) {
    std::memset(qs + 32 * b, 0, 32);
    d[b] = 0.0f;
    sum[b] = 0.0f;
  }
}

void QuantizeQ8_K(const float* x, int64_t cols, uint8_t* dst) {
  auto* blocks = reinterpret_cast<ActBlockQ8K*>(dst);
  for (int64_t b = 0; b < cols / 256; ++b) {
    ActBlockQ8K& o = blocks[b];
    o.d = QuantBlock(x + 256 * b, 256, o.qs);
    for (int j = 0; j < 16; ++j) {
      int s = 0;
      for (int i = 0; i < 16; ++i) s += o.qs[16 * j + i];
      o.bsum[j] = static_cast<int16_t>(s);
      o.bd[j] = o.d * static_cast<float>(s);
    }
  }
}

// ---- Weight decoding ---------------------------------------------------------------------

template <typename Block>
Block LoadBlock(const uint8_t* row, int64_t index) {
  Block b;
  std::memcpy(&b, row + index * static_cast<int64_t>(sizeof(Block)), sizeof(Block));
  return b;
}

// Sub-block scales and mins of a Q4_K / Q5_K block (see BlockQ4_K).
void UnpackScalesK4(const uint8_t s[12], int sc[8], int m[8]) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 63;
    m[j] = s[j + 4] & 63;
    sc[j + 4] = (s[j + 8] & 15) | ((s[j] >> 6) << 4);
    m[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
  }
}

// A decoded K-quant super-block: codes in element order and the float scales.
struct DecodedK {
  uint8_t q[256];  // Q4_K 0..15, Q5_K 0..31, Q6_K 0..63
  int sc[16];      // Q4_K/Q5_K: 8 sub-block scales; Q6_K: 16 signed scales
  int m[8];        // Q4_K/Q5_K: 8 sub-block mins
  float d, dmin;
};

void DecodeQ4_K(const uint8_t* row, int64_t b, DecodedK* o) {
  const auto blk = LoadBlock<BlockQ4_K>(row, b);
  o->d = Fp16ToFp32(blk.d);
  o->dmin = Fp16ToFp32(blk.dmin);
  UnpackScalesK4(blk.scales, o->sc, o->m);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      o->q[64 * c + l] = blk.qs[32 * c + l] & 15;
      o->q[64 * c + 32 + l] = blk.qs[32 * c + l] >> 4;
    }
  }
}

void DecodeQ5_K(const uint8_t* row, int64_t b, DecodedK* o) {
  const auto blk = LoadBlock<BlockQ5_K>(row, b);
  o->d = Fp16ToFp32(blk.d);
  o->dmin = Fp16ToFp32(blk.dmin);
  UnpackScalesK4(blk.scales, o->sc, o->m);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      const int h0 = (blk.qh[l] >> (2 * c)) & 1, h1 = (blk.qh[l] >> (2 * c + 1)) & 1;
      o->q[64 * c + l] = static_cast<uint8_t>((blk.qs[32 * c + l] & 15) | (h0 << 4));
      o->q[64 * c + 32 + l] = static_cast<uint8_t>((blk.qs[32 * c + l] >> 4) | (h1 << 4));
    }
  }
}

void DecodeQ6_K(const uint8_t* row, int64_t b, DecodedK* o) {
  const auto blk = LoadBlock<BlockQ6_K>(row, b);
  o->d = Fp16ToFp32(blk.d);
  for (int j = 0; j < 16; ++j) o->sc[j] = blk.scales[j];
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = blk.ql + 64 * h;
    const uint8_t* qh = blk.qh + 32 * h;
    uint8_t* q = o->q + 128 * h;
    for (int l = 0; l < 32; ++l) {
      q[l] = static_cast<uint8_t>((ql[l] & 15) | ((qh[l] & 3) << 4));
      q[l + 32] = static_cast<uint8_t>((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4));
      q[l + 64] = static_cast<uint8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
      q[l + 96] = static_cast<uint8_t>((ql[l + 32] >> 4) | ((qh[l] >> 6) << 4));
    }
  }
}

// A decoded 32-block: x = w * d (+ m for Q4_1/Q5_1), w the integer code (signed, or
// unsigned 0..31 for the formats with a minimum).
struct Decoded32 {
  int8_t w[32];
  float d;
  float m;
};

void DecodeQ8_0(const uint8_t* row, int64_t b, Decoded32* o) {
  const auto blk = LoadBlock<BlockQ8_0>(row, b);
  o->d = Fp16ToFp32(blk.d);
  std::memcpy(o->w, blk.qs, 32);
}

void DecodeQ4_0(const uint8_t* row, int64_t b, Decoded32* o) {
  const auto blk = LoadBlock<BlockQ4_0>(row, b);
  o->d = Fp16ToFp32(blk.d);
  for (int j = 0; j < 16; ++j) {
    o->w[j] = static_cast<int8_t>((blk.qs[j] & 15) - 8);
    o->w[j + 16] = static_cast<int8_t>((blk.qs[j] >> 4) - 8);
  }
}

// 2^(e - 128): the E8M0 scale halved, to pair with the doubled e2m1 values.
float Mxfp4HalfScale(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Fifth bit of element i (0..31) of a Q5_0/Q5_1 block, as 0 or 16.
int Q5HighBit(const uint8_t qh[4], int i) { return ((qh[i / 8] >> (i % 8)) & 1) << 4; }

void DecodeQ4_1(const uint8_t* row, int64_t b, Decoded32* o) {
  const auto blk = LoadBlock<BlockQ4_1>(row, b);
  o->d = Fp16ToFp32(blk.d);
  o->m = Fp16ToFp32(blk.m);
  for (int j = 0; j < 16; ++j) {
    o->w[j] = static_cast<int8_t>(blk.qs[j] & 15);
    o->w[j + 16] = static_cast<int8_t>(blk.qs[j] >> 4);
  }
}

void DecodeQ5_0(const uint8_t* row, int64_t b, Decoded32* o) {
  const auto blk = LoadBlock<BlockQ5_0>(row, b);
  o->d = Fp16ToFp32(blk.d);
  for (int j = 0; j < 16; ++j) {
    o->w[j] = static_cast<int8_t>(((blk.qs[j] & 15) | Q5HighBit(blk.qh, j)) - 16);
    o->w[j + 16] = static_cast<int8_t>(((blk.qs[j] >> 4) | Q5HighBit(blk.qh, j + 16)) - 16);
  }
}

void DecodeQ5_1(const uint8_t* row, int64_t b, Decoded32* o) {
  const auto blk = LoadBlock<BlockQ5_1>(row, b);
  o->d = Fp16ToFp32(blk.d);
  o->m = Fp16ToFp32(blk.m);
  for (int j = 0; j < 16; ++j) {
    o->w[j] = static_cast<int8_t>((blk.qs[j] & 15) | Q5HighBit(blk.qh, j));
    o->w[j + 16] = static_cast<int8_t>((blk.qs[j] >> 4) | Q5HighBit(blk.qh, j + 16));
  }
}

void DecodeMxfp4(const uint8_t* row, int64_t b, Decoded32* o) {
  const auto blk = LoadBlock<BlockMxfp4>(row, b);
  o->d = Mxfp4HalfScale(blk.e);
  for (int j = 0; j < 16; ++j) {
    o->w[j] = kMxfp4Values[blk.qs[j] & 15];
    o->w[j + 16] = kMxfp4Values[blk.qs[j] >> 4];
  }
}

void DecodeIQ4_NL(const uint8_t* row, int64_t b, Decoded32* o) {
  const auto blk = LoadBlock<BlockIQ4_NL>(row, b);
  o->d = Fp16ToFp32(blk.d);
  for (int j = 0; j < 16; ++j) {
    o->w[j] = kIq4nlValues[blk.qs[j] & 15];
    o->w[j + 16] = kIq4nlValues[blk.qs[j] >> 4];
  }
}

// ---- Products ---------------------------------------------------------------------------

constexpr int kTokGroup = 8;  // tokens sharing one decode of a weight block

int32_t Dot(const uint8_t* q, const int8_t* a, int n) {
  int32_t s = 0;
  for (int i = 0; i < n; ++i) s += q[i] * a[i];
  return s;
}

int32_t Dot(const int8_t* w, const int8_t* a, int n) {
  int32_t s = 0;
  for (int i = 0; i < n; ++i) s += w[i] * a[i];
  return s;
}

const ActBlockQ8K* TokenQ8K(const ActView& a, int64_t t) {
  return reinterpret_cast<const ActBlockQ8K*>(a.data + t * a.token_stride);
}

// Q4_K and Q5_K: x = d * sc[s] * q - dmin * m[s] per sub-block s of 32.
//   sum_c x_c * a_c * da = (d * da) * S - (dmin * da) * M,
//   S = sum_s sc[s] * sum_{c in s} q_c a_c,  M = sum_s m[s] * sum_{c in s} a_c.
void RowK4(const WeightView& w, const ActView& a, int64_t r, float* y, int64_t y_stride,
           void (*decode)(const uint8_t*, int64_t, DecodedK*)) {
  const uint8_t* row = w.data + r * w.row_bytes;
  DecodedK dec;
  for (int64_t t0 = 0; t0 < a.n_tok; t0 += kTokGroup) {
    const int nt = static_cast<int>(a.n_tok - t0 < kTokGroup ? a.n_tok - t0 : kTokGroup);
    float acc[kTokGroup] = {};
    for (int64_t b = 0; b < w.cols / 256; ++b) {
      decode(row, b, &dec);
      for (int i = 0; i < nt; ++i) {
        const ActBlockQ8K& ab = TokenQ8K(a, t0 + i)[b];
        int32_t s = 0, m = 0;
        for (int sb = 0; sb < 8; ++sb) {
          s += dec.sc[sb] * Dot(dec.q + 32 * sb, ab.qs + 32 * sb, 32);
          m += dec.m[sb] * (ab.bsum[2 * sb] + ab.bsum[2 * sb + 1]);
        }
        const float ds = dec.d * ab.d, dm = dec.dmin * ab.d;
        const float ps = ds * static_cast<float>(s), pm = dm * static_cast<float>(m);
        acc[i] += ps;
        acc[i] -= pm;
      }
    }
    for (int i = 0; i < nt; ++i) y[(t0 + i) * y_stride + r] = acc[i];
  }
}

// Q6_K: x = d * sc[j] * (q - 32) per sub-block j of 16.
//   sum_c x_c * a_c * da = (d * da) * sum_j sc[j] * (sum_{c in j} q_c a_c - 32 * bsum[j]).
void RowQ6_K(const WeightView& w, const ActView& a, int64_t r, float* y, int64_t y_stride) {
  const uint8_t* row = w.data + r * w.row_bytes;
  DecodedK dec;
  for (int64_t t0 = 0; t0 < a.n_tok; t0 += kTokGroup) {
    const int nt = static_cast<int>(a.n_tok - t0 < kTokGroup ? a.n_tok - t0 : kTokGroup);
    float acc[kTokGroup] = {};
    for (int64_t b = 0; b < w.cols / 256; ++b) {
      DecodeQ6_K(row, b, &dec);
      for (int i = 0; i < nt; ++i) {
        const ActBlockQ8K& ab = TokenQ8K(a, t0 + i)[b];
        int32_t s = 0;
        for (int j = 0; j < 16; ++j) {
          s += dec.sc[j] * (Dot(dec.q + 16 * j, ab.qs + 16 * j, 16) - 32 * ab.bsum[j]);
        }
        const float ds = dec.d * ab.d;
        const float p = ds * static_cast<float>(s);
        acc[i] += p;
      }
    }
    for (int i = 0; i < nt; ++i) y[(t0 + i) * y_stride + r] = acc[i];
  }
}

// The 32-block formats: per block, (dw * da) * sum w_c a_c, plus for Q4_1/Q5_1 (has_min)
// the minimum term m * sum_c x_c = m * (da * sum_c a_c) = m * s.
void Row32(const WeightView& w, const ActView& a, int64_t r, float* y, int64_t y_stride,
           void (*decode)(const uint8_t*, int64_t, Decoded32*), bool has_min) {
  const uint8_t* row = w.data + r * w.row_bytes;
  const int64_t nb = w.cols / 32, nbp = Q8_0PaddedBlocks(w.cols);
  const int64_t d_off = Q8_0ScaleOffset(nbp), s_off = Q8_0SumOffset(nbp);
  Decoded32 dec{};
  for (int64_t t0 = 0; t0 < a.n_tok; t0 += kTokGroup) {
    const int nt = static_cast<int>(a.n_tok - t0 < kTokGroup ? a.n_tok - t0 : kTokGroup);
    float acc[kTokGroup] = {};
    for (int64_t b = 0; b < nb; ++b) {
      decode(row, b, &dec);
      for (int i = 0; i < nt; ++i) {
        const uint8_t* tok = a.data + (t0 + i) * a.token_stride;
        const auto* qs = reinterpret_cast<const int8_t*>(tok) + 32 * b;
        const float da = reinterpret_cast<const float*>(tok + d_off)[b];
        const float ds = dec.d * da;
        const float p = ds * static_cast<float>(Dot(dec.w, qs, 32));
        acc[i] += p;
        if (has_min) {
          const float pm = dec.m * reinterpret_cast<const float*>(tok + s_off)[b];
          acc[i] += pm;
        }
      }
    }
    for (int i = 0; i < nt; ++i) y[(t0 + i) * y_stride + r] = acc[i];
  }
}

// Float path (F32, F16, BF16): the weights in f32 (exactly), sum w_c x_c in order.
void RowF32(const WeightView& w, const ActView& a, int64_t r, float* y, int64_t y_stride) {
  const uint8_t* row = w.data + r * w.row_bytes;
  const uint64_t elem_bytes = TraitsOf(w.type).type_size;  // 4 or 2
  constexpr int64_t kChunk = 256;
  float buf[kChunk];
  for (int64_t t0 = 0; t0 < a.n_tok; t0 += kTokGroup) {
    const int nt = static_cast<int>(a.n_tok - t0 < kTokGroup ? a.n_tok - t0 : kTokGroup);
    float acc[kTokGroup] = {};
    for (int64_t c0 = 0; c0 < w.cols; c0 += kChunk) {
      const int64_t n = w.cols - c0 < kChunk ? w.cols - c0 : kChunk;
      DequantizeRow(w.type, row + c0 * elem_bytes, buf, n);
      for (int i = 0; i < nt; ++i) {
        const float* x = reinterpret_cast<const float*>(a.data + (t0 + i) * a.token_stride) + c0;
        for (int64_t c = 0; c < n; ++c) {
          const float p = buf[c] * x[c];
          acc[i] += p;
        }
      }
    }
    for (int i = 0; i < nt; ++i) y[(t0 + i) * y_stride + r] = acc[i];
  }
}

void MatMulScalar(const WeightView& w, const ActView& a, float* y, int64_t y_stride, int64_t r0,
                  int64_t r1) {
  if (MatMulLowBitScalar(w, a, y, y_stride, r0, r1)) return;  // Q2_K, Q3_K, IQ4_XS
  if (MatMulIqScalar(w, a, y, y_stride, r0, r1)) return;      // IQ2_XXS ... IQ1_M
  for (int64_t r = r0; r < r1; ++r) {
    switch (w.type) {
      case GgmlType::kQ4_K:
        RowK4(w, a, r, y, y_stride, DecodeQ4_K);
        break;
      case GgmlType::kQ5_K:
        RowK4(w, a, r, y, y_stride, DecodeQ5_K);
        break;
      case GgmlType::kQ6_K:
        RowQ6_K(w, a, r, y, y_stride);
        break;
      case GgmlType::kQ8_0:
        Row32(w, a, r, y, y_stride, DecodeQ8_0, false);
        break;
      case GgmlType::kQ4_0:
        Row32(w, a, r, y, y_stride, DecodeQ4_0, false);
        break;
      case GgmlType::kQ4_1:
        Row32(w, a, r, y, y_stride, DecodeQ4_1, true);
        break;
      case GgmlType::kQ5_0:
        Row32(w, a, r, y, y_stride, DecodeQ5_0, false);
        break;
      case GgmlType::kQ5_1:
        Row32(w, a, r, y, y_stride, DecodeQ5_1, true);
        break;
      case GgmlType::kMXFP4:
        Row32(w, a, r, y, y_stride, DecodeMxfp4, false);
        break;
      case GgmlType::kIQ4_NL:
        Row32(w, a, r, y, y_stride, DecodeIQ4_NL, false);
        break;
      default:  // F32, F16, BF16
        RowF32(w, a, r, y, y_stride);
        break;
    }
  }
}

float DotF32Scalar(const float* a, const float* b, int64_t n) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) acc[j] += a[i + j] * b[i + j];
  }
  for (int j = 0; i < n; ++i, ++j) acc[j] += a[i] * b[i];
  for (int w = 8; w >= 1; w /= 2) {
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  }
  return acc[0];
}

}  // namespace

const KernelTable& ScalarKernels() {
  static const KernelTable table{QuantizeQ8_0, QuantizeQ8_K, MatMulScalar, DotF32Scalar};
  return table;
}

}  // namespace mt::kernels
