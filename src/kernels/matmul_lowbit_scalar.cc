// Scalar variant of the Q2_K, Q3_K and IQ4_XS products: the reference the SIMD variants
// (matmul_lowbit_avx2.cc, matmul_lowbit_avx512.cc) are tested against. Activations are kQ8_K
// (ActBlockQ8K: codes a, scale da, sums of 16 codes bsum).
//
// Per (row, token) and super-block, exact integer sums, then fixed float steps (no FMA: this
// file is built with -ffp-contract=off):
//   Q2_K   (x = d * sc[j] * q - dmin * m[j], j = e / 16, q 0..3, sc and m 0..15):
//            S = sum_j sc[j] * sum_{e in j} q a          (|S| < 2^21)
//            M = sum_j m[j] * bsum[j]                     (|M| < 2^19)
//            f += (d * da) * S;  f -= (dmin * da) * M
//   Q3_K   (x = d * sc[j] * (q - 4), j = e / 16, q 0..7, sc -32..31):
//            S = sum_j sc[j] * (sum_{e in j} q a - 4 * bsum[j])    (|S| < 2^24)
//            f += (d * da) * S
//   IQ4_XS (x = d * sc[j] * v[q], j = e / 32, v = kIq4nlValues, sc -32..31):
//            S = sum_j sc[j] * sum_{e in j} v[q] a    (|S| < 2^28; float(S) rounds)
//            f += (d * da) * S
#include <cstring>

#include "kernels/matmul_internal.h"
#include "quant/blocks.h"
#include "quant/float16.h"

namespace mt::kernels {
namespace {

constexpr int kTokGroup = 8;  // tokens sharing one decode of a super-block

// A decoded super-block: codes in element order, integer sub-block scales and mins.
struct DecodedLow {
  int8_t q[256];  // Q2_K 0..3, Q3_K 0..7, IQ4_XS the value kIq4nlValues[code]
  int sc[16];     // Q2_K 0..15, Q3_K -32..31 (16 sub-blocks); IQ4_XS -32..31 (8)
  int m[16];      // Q2_K mins 0..15
  float d, dmin;
};

template <typename Block>
Block LoadBlock(const uint8_t* row, int64_t index) {
  Block b;
  std::memcpy(&b, row + index * static_cast<int64_t>(sizeof(Block)), sizeof(Block));
  return b;
}

// The 2-bit field of element e in Q2_K / Q3_K's qs (BlockQ2_K).
int Low2(const uint8_t* qs, int e) {
  return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

void DecodeQ2_K(const uint8_t* row, int64_t b, DecodedLow* o) {
  const auto blk = LoadBlock<BlockQ2_K>(row, b);
  o->d = Fp16ToFp32(blk.d);
  o->dmin = Fp16ToFp32(blk.dmin);
  for (int j = 0; j < 16; ++j) {
    o->sc[j] = blk.scales[j] & 15;
    o->m[j] = blk.scales[j] >> 4;
  }
  for (int e = 0; e < 256; ++e) o->q[e] = static_cast<int8_t>(Low2(blk.qs, e));
}

void DecodeQ3_K(const uint8_t* row, int64_t b, DecodedLow* o) {
  const auto blk = LoadBlock<BlockQ3_K>(row, b);
  o->d = Fp16ToFp32(blk.d);
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? blk.scales[j] & 15 : blk.scales[j - 8] >> 4;
    o->sc[j] = (low | ((blk.scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
  }
  for (int e = 0; e < 256; ++e) {
    o->q[e] = static_cast<int8_t>(Low2(blk.qs, e) | ((blk.hmask[e % 32] >> (e / 32)) & 1) << 2);
  }
}

void DecodeIQ4_XS(const uint8_t* row, int64_t b, DecodedLow* o) {
  const auto blk = LoadBlock<BlockIQ4_XS>(row, b);
  o->d = Fp16ToFp32(blk.d);
  for (int j = 0; j < 8; ++j) {
    o->sc[j] =
        (((blk.scales_l[j / 2] >> (4 * (j % 2))) & 15) | ((blk.scales_h >> (2 * j)) & 3) << 4) - 32;
    for (int l = 0; l < 16; ++l) {
      o->q[32 * j + l] = kIq4nlValues[blk.qs[16 * j + l] & 15];
      o->q[32 * j + 16 + l] = kIq4nlValues[blk.qs[16 * j + l] >> 4];
    }
  }
}

int32_t Dot(const int8_t* w, const int8_t* a, int n) {
  int32_t s = 0;
  for (int i = 0; i < n; ++i) s += w[i] * a[i];
  return s;
}

// One (row, token) super-block's contribution: f updated as the header says.
float Accumulate(GgmlType type, const DecodedLow& dec, const ActBlockQ8K& ab, float f) {
  int32_t s = 0;
  switch (type) {
    case GgmlType::kQ2_K: {
      int32_t m = 0;
      for (int j = 0; j < 16; ++j) {
        s += dec.sc[j] * Dot(dec.q + 16 * j, ab.qs + 16 * j, 16);
        m += dec.m[j] * ab.bsum[j];
      }
      const float ds = dec.d * ab.d, dm = dec.dmin * ab.d;
      const float ps = ds * static_cast<float>(s), pm = dm * static_cast<float>(m);
      f += ps;
      f -= pm;
      return f;
    }
    case GgmlType::kQ3_K:
      for (int j = 0; j < 16; ++j) {
        s += dec.sc[j] * (Dot(dec.q + 16 * j, ab.qs + 16 * j, 16) - 4 * ab.bsum[j]);
      }
      break;
    default:  // IQ4_XS
      for (int j = 0; j < 8; ++j) s += dec.sc[j] * Dot(dec.q + 32 * j, ab.qs + 32 * j, 32);
      break;
  }
  const float ds = dec.d * ab.d;
  const float p = ds * static_cast<float>(s);
  f += p;
  return f;
}

void Row(const WeightView& w, const ActView& a, int64_t r, float* y, int64_t y_stride,
         void (*decode)(const uint8_t*, int64_t, DecodedLow*)) {
  const uint8_t* row = w.data + r * w.row_bytes;
  DecodedLow dec;
  for (int64_t t0 = 0; t0 < a.n_tok; t0 += kTokGroup) {
    const int nt = static_cast<int>(a.n_tok - t0 < kTokGroup ? a.n_tok - t0 : kTokGroup);
    float acc[kTokGroup] = {};
    for (int64_t b = 0; b < w.cols / 256; ++b) {
      decode(row, b, &dec);
      for (int i = 0; i < nt; ++i) {
        const auto* tok = reinterpret_cast<const ActBlockQ8K*>(a.data + (t0 + i) * a.token_stride);
        acc[i] = Accumulate(w.type, dec, tok[b], acc[i]);
      }
    }
    for (int i = 0; i < nt; ++i) y[(t0 + i) * y_stride + r] = acc[i];
  }
}

}  // namespace

bool MatMulLowBitScalar(const WeightView& w, const ActView& a, float* y, int64_t y_stride,
                        int64_t r0, int64_t r1) {
  void (*decode)(const uint8_t*, int64_t, DecodedLow*) = nullptr;
  switch (w.type) {
    case GgmlType::kQ2_K:
      decode = DecodeQ2_K;
      break;
    case GgmlType::kQ3_K:
      decode = DecodeQ3_K;
      break;
    case GgmlType::kIQ4_XS:
      decode = DecodeIQ4_XS;
      break;
    default:
      return false;
  }
  for (int64_t r = r0; r < r1; ++r) Row(w, a, r, y, y_stride, decode);
  return true;
}

}  // namespace mt::kernels
