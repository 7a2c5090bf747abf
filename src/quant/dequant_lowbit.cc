// Reference dequantizers of Q2_K, Q3_K, IQ4_NL and IQ4_XS (quant/lowbit.h). The float
// operations follow ggml's dequantize_row_* one by one (float products, no fused multiply-add),
// so the results are bit-identical; a product is kept in its own statement where a
// difference follows, so the compiler cannot contract the two into an FMA.
#include <cstring>

#include "quant/blocks.h"
#include "quant/float16.h"
#include "quant/lowbit.h"

namespace mt::lowbit {
namespace {

template <typename Block>
Block LoadBlock(const uint8_t* src, int64_t index) {
  Block b;
  std::memcpy(&b, src + index * static_cast<int64_t>(sizeof(Block)), sizeof(Block));
  return b;
}

// The 2-bit field of element e (0..255) in a Q2_K / Q3_K qs array (see BlockQ2_K).
int Low2(const uint8_t qs[64], int e) {
  const int n = e / 128, k = (e % 128) / 32, l = e % 32;
  return (qs[32 * n + l] >> (2 * k)) & 3;
}

// sc[j] + 32 (0..63) of a Q3_K block (see BlockQ3_K).
int Q3Scale(const uint8_t scales[12], int j) {
  const int low = j < 8 ? scales[j] & 15 : scales[j - 8] >> 4;
  const int high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
  return low | high << 4;
}

}  // namespace

void DequantQ2_K(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, dst += kQK_K) {
    const auto blk = LoadBlock<BlockQ2_K>(src, b);
    const float d = Fp16ToFp32(blk.d);
    const float dmin = Fp16ToFp32(blk.dmin);
    for (int j = 0; j < 16; ++j) {
      const float scale = d * static_cast<float>(blk.scales[j] & 15);
      const float offset = dmin * static_cast<float>(blk.scales[j] >> 4);
      for (int e = 16 * j; e < 16 * j + 16; ++e) {
        const float p = scale * static_cast<float>(Low2(blk.qs, e));
        dst[e] = p - offset;
      }
    }
  }
}

void DequantQ3_K(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, dst += kQK_K) {
    const auto blk = LoadBlock<BlockQ3_K>(src, b);
    const float d = Fp16ToFp32(blk.d);
    for (int j = 0; j < 16; ++j) {
      const float scale = d * static_cast<float>(Q3Scale(blk.scales, j) - 32);
      for (int e = 16 * j; e < 16 * j + 16; ++e) {
        const int high = (blk.hmask[e % 32] >> (e / 32)) & 1;
        dst[e] = scale * static_cast<float>((Low2(blk.qs, e) | high << 2) - 4);
      }
    }
  }
}

void DequantIQ4_NL(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, dst += kQK) {
    const auto blk = LoadBlock<BlockIQ4_NL>(src, b);
    const float d = Fp16ToFp32(blk.d);
    for (int j = 0; j < kQK / 2; ++j) {
      dst[j] = d * static_cast<float>(kIq4nlValues[blk.qs[j] & 15]);
      dst[j + kQK / 2] = d * static_cast<float>(kIq4nlValues[blk.qs[j] >> 4]);
    }
  }
}

void DequantIQ4_XS(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, dst += kQK_K) {
    const auto blk = LoadBlock<BlockIQ4_XS>(src, b);
    const float d = Fp16ToFp32(blk.d);
    for (int j = 0; j < 8; ++j) {
      const int ls = ((blk.scales_l[j / 2] >> (4 * (j % 2))) & 15) | ((blk.scales_h >> (2 * j)) & 3)
                                                                         << 4;
      const float scale = d * static_cast<float>(ls - 32);
      const uint8_t* qs = blk.qs + 16 * j;
      for (int l = 0; l < 16; ++l) {
        dst[32 * j + l] = scale * static_cast<float>(kIq4nlValues[qs[l] & 15]);
        dst[32 * j + 16 + l] = scale * static_cast<float>(kIq4nlValues[qs[l] >> 4]);
      }
    }
  }
}

}  // namespace mt::lowbit
