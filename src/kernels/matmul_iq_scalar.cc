// IQ lattice types (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M; quant/blocks_iq.h),
// scalar variant: the reference of their integer path, in plain C++.
//
// Every one of them is, per super-block of 256 (quant/blocks_iq.h), x_c = D * L_j * w_c with
// w_c a signed integer (IQ2/IQ3: grid byte * sign, |w| <= 62; IQ1: 8 * grid coordinate +- 1,
// |w| <= 9), L_j an odd integer scale per 16 elements j (<= 31) and D = d / 8, d / 4 or d. With
// the activations a (int8) and their scale da (ActBlockQ8K), per (row, token) and super-block:
//   S = sum_j L_j * sum_{c in j} w_c a_c          (exact int32: |S| < 2^26)
//   f += (D * da) * S                             (a product, then a sum)
// The SIMD variants compute the same S in other orders (exact), and fold it in float per lane.
#include <cstring>

#include "kernels/matmul_internal.h"
#include "quant/blocks_iq.h"
#include "quant/float16.h"
#include "quant/iq_grids.h"

namespace mt::kernels {
namespace {

// One super-block in the integer form above.
struct DecodedIq {
  int8_t w[256];  // signed integer weights, in element order
  int l[16];      // odd scale of each 16 elements
  float d;        // D
};

template <typename Block>
Block LoadBlock(const uint8_t* row, int64_t index) {
  Block b;
  std::memcpy(&b, row + index * static_cast<int64_t>(sizeof(Block)), sizeof(Block));
  return b;
}

uint32_t Word32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// w = byte j of the grid entry, negated where bit j of signs is set.
void SignedGroup(uint64_t entry, int signs, int8_t* w) {
  for (int j = 0; j < 8; ++j) {
    const int g = static_cast<int>((entry >> (8 * j)) & 0xFF);
    w[j] = static_cast<int8_t>((signs >> j) & 1 ? -g : g);
  }
}

// IQ1: w = 8 * (int8 grid coordinate) + (negative delta ? -1 : 1).
void Iq1Group(uint64_t entry, bool negative_delta, int8_t* w) {
  for (int j = 0; j < 8; ++j) {
    const int g = static_cast<int8_t>(entry >> (8 * j));
    w[j] = static_cast<int8_t>(8 * g + (negative_delta ? -1 : 1));
  }
}

void DecodeIq2Xxs(const uint8_t* row, int64_t b, DecodedIq* o) {
  const auto blk = LoadBlock<BlockIq2Xxs>(row, b);
  o->d = Fp16ToFp32(blk.d) * 0.125f;
  for (int ib = 0; ib < 8; ++ib) {
    const uint32_t w0 = Word32(blk.qs + 4 * ib), w1 = Word32(blk.qs + 4 * ib + 2);
    o->l[2 * ib] = o->l[2 * ib + 1] = 2 * static_cast<int>(w1 >> 28) + 1;
    for (int l = 0; l < 4; ++l) {
      SignedGroup(kIq2XxsGrid.entry[(w0 >> (8 * l)) & 0xFF], kIqSigns.sign[(w1 >> (7 * l)) & 127],
                  o->w + 32 * ib + 8 * l);
    }
  }
}

void DecodeIq2Xs(const uint8_t* row, int64_t b, DecodedIq* o) {
  const auto blk = LoadBlock<BlockIq2Xs>(row, b);
  o->d = Fp16ToFp32(blk.d) * 0.125f;
  for (int ib = 0; ib < 8; ++ib) {
    o->l[2 * ib] = 2 * (blk.scales[ib] & 0xF) + 1;
    o->l[2 * ib + 1] = 2 * (blk.scales[ib] >> 4) + 1;
  }
  for (int g = 0; g < 32; ++g) {
    SignedGroup(kIq2XsGrid.entry[blk.qs[g] & 511], kIqSigns.sign[blk.qs[g] >> 9], o->w + 8 * g);
  }
}

void DecodeIq2S(const uint8_t* row, int64_t b, DecodedIq* o) {
  const auto blk = LoadBlock<BlockIq2S>(row, b);
  o->d = Fp16ToFp32(blk.d) * 0.125f;
  for (int ib = 0; ib < 8; ++ib) {
    o->l[2 * ib] = 2 * (blk.scales[ib] & 0xF) + 1;
    o->l[2 * ib + 1] = 2 * (blk.scales[ib] >> 4) + 1;
  }
  for (int g = 0; g < 32; ++g) {
    const int index = blk.qs[g] | (((blk.qh[g / 4] >> (2 * (g % 4))) & 3) << 8);
    SignedGroup(kIq2SGrid.entry[index], blk.qs[32 + g], o->w + 8 * g);
  }
}

void DecodeIq3Xxs(const uint8_t* row, int64_t b, DecodedIq* o) {
  const auto blk = LoadBlock<BlockIq3Xxs>(row, b);
  o->d = Fp16ToFp32(blk.d) * 0.25f;
  for (int ib = 0; ib < 8; ++ib) {
    const uint32_t w = Word32(blk.qs + 64 + 4 * ib);
    o->l[2 * ib] = o->l[2 * ib + 1] = 2 * static_cast<int>(w >> 28) + 1;
    for (int l = 0; l < 4; ++l) {
      const int g = 4 * ib + l;
      const uint64_t entry =
          kIq3XxsGrid.entry[blk.qs[2 * g]] | uint64_t{kIq3XxsGrid.entry[blk.qs[2 * g + 1]]} << 32;
      SignedGroup(entry, kIqSigns.sign[(w >> (7 * l)) & 127], o->w + 8 * g);
    }
  }
}

void DecodeIq3S(const uint8_t* row, int64_t b, DecodedIq* o) {
  const auto blk = LoadBlock<BlockIq3S>(row, b);
  o->d = Fp16ToFp32(blk.d);
  for (int ib = 0; ib < 8; ++ib) {
    o->l[2 * ib] = o->l[2 * ib + 1] = 2 * ((blk.scales[ib / 2] >> (4 * (ib % 2))) & 0xF) + 1;
  }
  for (int g = 0; g < 32; ++g) {
    const int i0 = blk.qs[2 * g] | (((blk.qh[g / 4] >> (2 * (g % 4))) & 1) << 8);
    const int i1 = blk.qs[2 * g + 1] | (((blk.qh[g / 4] >> (2 * (g % 4) + 1)) & 1) << 8);
    const uint64_t entry = kIq3SGrid.entry[i0] | uint64_t{kIq3SGrid.entry[i1]} << 32;
    SignedGroup(entry, blk.signs[g], o->w + 8 * g);
  }
}

void DecodeIq1S(const uint8_t* row, int64_t b, DecodedIq* o) {
  const auto blk = LoadBlock<BlockIq1S>(row, b);
  o->d = Fp16ToFp32(blk.d) * 0.125f;
  for (int ib = 0; ib < 8; ++ib) {
    const int qh = blk.qh[ib];
    o->l[2 * ib] = o->l[2 * ib + 1] = 2 * ((qh >> 12) & 7) + 1;
    for (int l = 0; l < 4; ++l) {
      const int index = blk.qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8);
      Iq1Group(kIq1SGrid.entry[index], (qh & 0x8000) != 0, o->w + 32 * ib + 8 * l);
    }
  }
}

void DecodeIq1M(const uint8_t* row, int64_t b, DecodedIq* o) {
  const auto blk = LoadBlock<BlockIq1M>(row, b);
  uint16_t s[4];
  std::memcpy(s, blk.scales, 8);
  o->d = Fp16ToFp32(static_cast<uint16_t>((s[0] >> 12) | ((s[1] >> 8) & 0x00F0) |
                                          ((s[2] >> 4) & 0x0F00) | (s[3] & 0xF000))) *
         0.125f;
  for (int j = 0; j < 16; ++j) o->l[j] = 2 * ((s[j / 4] >> (3 * (j % 4))) & 7) + 1;
  for (int g = 0; g < 32; ++g) {
    const int h = blk.qh[g / 2] >> (4 * (g % 2));
    Iq1Group(kIq1SGrid.entry[blk.qs[g] | ((h & 7) << 8)], (h & 8) != 0, o->w + 8 * g);
  }
}

constexpr int kTokGroup = 8;  // tokens sharing one decode of a super-block

void RowIq(const WeightView& w, const ActView& a, int64_t r, float* y, int64_t y_stride,
           void (*decode)(const uint8_t*, int64_t, DecodedIq*)) {
  const uint8_t* row = w.data + r * w.row_bytes;
  DecodedIq dec;
  for (int64_t t0 = 0; t0 < a.n_tok; t0 += kTokGroup) {
    const int nt = static_cast<int>(a.n_tok - t0 < kTokGroup ? a.n_tok - t0 : kTokGroup);
    float acc[kTokGroup] = {};
    for (int64_t b = 0; b < w.cols / 256; ++b) {
      decode(row, b, &dec);
      for (int i = 0; i < nt; ++i) {
        const ActBlockQ8K& ab =
            reinterpret_cast<const ActBlockQ8K*>(a.data + (t0 + i) * a.token_stride)[b];
        int32_t s = 0;
        for (int j = 0; j < 16; ++j) {
          int32_t sj = 0;
          for (int c = 16 * j; c < 16 * j + 16; ++c) sj += dec.w[c] * ab.qs[c];
          s += dec.l[j] * sj;
        }
        const float ds = dec.d * ab.d;
        const float p = ds * static_cast<float>(s);
        acc[i] += p;
      }
    }
    for (int i = 0; i < nt; ++i) y[(t0 + i) * y_stride + r] = acc[i];
  }
}

}  // namespace

bool MatMulIqScalar(const WeightView& w, const ActView& a, float* y, int64_t y_stride, int64_t r0,
                    int64_t r1) {
  void (*decode)(const uint8_t*, int64_t, DecodedIq*);
  switch (w.type) {
    case GgmlType::kIQ2_XXS:
      decode = DecodeIq2Xxs;
      break;
    case GgmlType::kIQ2_XS:
      decode = DecodeIq2Xs;
      break;
    case GgmlType::kIQ2_S:
      decode = DecodeIq2S;
      break;
    case GgmlType::kIQ3_XXS:
      decode = DecodeIq3Xxs;
      break;
    case GgmlType::kIQ3_S:
      decode = DecodeIq3S;
      break;
    case GgmlType::kIQ1_S:
      decode = DecodeIq1S;
      break;
    case GgmlType::kIQ1_M:
      decode = DecodeIq1M;
      break;
    default:
      return false;
  }
  for (int64_t r = r0; r < r1; ++r) RowIq(w, a, r, y, y_stride, decode);
  return true;
}

}  // namespace mt::kernels
