#include "quant/dequant.h"

#include <bit>
#include <cstring>

#include "base/check.h"
#include "quant/blocks.h"
#include "quant/dequant_iq.h"
#include "quant/float16.h"
#include "quant/lowbit.h"

namespace mt {
namespace {

// Blocks are copied out of the byte stream: rows may sit at any offset in a file mapping.
template <typename Block>
Block LoadBlock(const uint8_t* src, int64_t index) {
  Block b;
  std::memcpy(&b, src + index * static_cast<int64_t>(sizeof(Block)), sizeof(Block));
  return b;
}

// The arithmetic below follows ggml's reference order operation by operation (float
// products, no fused multiply-add) so that results are bit-identical. Products are kept in
// their own statements where a sum follows, so the compiler cannot contract them to FMA.

void DequantF16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    dst[i] = Fp16ToFp32(h);
  }
}

void DequantBf16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    dst[i] = Bf16ToFp32(h);
  }
}

void DequantQ8_0(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, dst += kQK) {
    const auto blk = LoadBlock<BlockQ8_0>(src, b);
    const float d = Fp16ToFp32(blk.d);
    for (int i = 0; i < kQK; ++i) dst[i] = static_cast<float>(blk.qs[i]) * d;
  }
}

void DequantQ4_0(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, dst += kQK) {
    const auto blk = LoadBlock<BlockQ4_0>(src, b);
    const float d = Fp16ToFp32(blk.d);
    for (int j = 0; j < kQK / 2; ++j) {
      dst[j] = static_cast<float>((blk.qs[j] & 0xF) - 8) * d;
      dst[j + kQK / 2] = static_cast<float>((blk.qs[j] >> 4) - 8) * d;
    }
  }
}

void DequantQ4_1(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, dst += kQK) {
    const auto blk = LoadBlock<BlockQ4_1>(src, b);
    const float d = Fp16ToFp32(blk.d);
    const float m = Fp16ToFp32(blk.m);
    for (int j = 0; j < kQK / 2; ++j) {
      const float lo = static_cast<float>(blk.qs[j] & 0xF) * d;
      const float hi = static_cast<float>(blk.qs[j] >> 4) * d;
      dst[j] = lo + m;
      dst[j + kQK / 2] = hi + m;
    }
  }
}

// Fifth bit of element i (0..31) of a Q5_0/Q5_1 block, as 0 or 16.
int Q5HighBit(const uint8_t qh[4], int i) { return ((qh[i / 8] >> (i % 8)) & 1) << 4; }

void DequantQ5_0(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, dst += kQK) {
    const auto blk = LoadBlock<BlockQ5_0>(src, b);
    const float d = Fp16ToFp32(blk.d);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = ((blk.qs[j] & 0xF) | Q5HighBit(blk.qh, j)) - 16;
      const int q1 = ((blk.qs[j] >> 4) | Q5HighBit(blk.qh, j + kQK / 2)) - 16;
      dst[j] = static_cast<float>(q0) * d;
      dst[j + kQK / 2] = static_cast<float>(q1) * d;
    }
  }
}

void DequantQ5_1(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, dst += kQK) {
    const auto blk = LoadBlock<BlockQ5_1>(src, b);
    const float d = Fp16ToFp32(blk.d);
    const float m = Fp16ToFp32(blk.m);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = (blk.qs[j] & 0xF) | Q5HighBit(blk.qh, j);
      const int q1 = (blk.qs[j] >> 4) | Q5HighBit(blk.qh, j + kQK / 2);
      const float lo = static_cast<float>(q0) * d;
      const float hi = static_cast<float>(q1) * d;
      dst[j] = lo + m;
      dst[j + kQK / 2] = hi + m;
    }
  }
}

// Power-of-two scale 2^(e - 128): ggml's E8M0 scale halved, to pair with the doubled
// e2m1 table. e = 0 and 1 give f32 subnormals (2^-128, 2^-127); ggml ignores e = 255 (NaN in
// the OCP spec) and so do we: it gives 2^127.
float Mxfp4HalfScale(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
  return std::bit_cast<float>(bits);
}

void DequantMxfp4(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, dst += kQK) {
    const auto blk = LoadBlock<BlockMxfp4>(src, b);
    const float d = Mxfp4HalfScale(blk.e);
    for (int j = 0; j < kQK / 2; ++j) {
      dst[j] = static_cast<float>(kMxfp4Values[blk.qs[j] & 0xF]) * d;
      dst[j + kQK / 2] = static_cast<float>(kMxfp4Values[blk.qs[j] >> 4]) * d;
    }
  }
}

// Sub-block s (0..7) scale and min of a Q4_K/Q5_K block; see BlockQ4_K.
void UnpackScaleMinK4(const uint8_t scales[12], int s, int* sc, int* m) {
  if (s < 4) {
    *sc = scales[s] & 63;
    *m = scales[s + 4] & 63;
  } else {
    *sc = (scales[s + 4] & 0xF) | ((scales[s - 4] >> 6) << 4);
    *m = (scales[s + 4] >> 4) | ((scales[s] >> 6) << 4);
  }
}

void DequantQ4_K(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, dst += kQK_K) {
    const auto blk = LoadBlock<BlockQ4_K>(src, b);
    const float d = Fp16ToFp32(blk.d);
    const float dmin = Fp16ToFp32(blk.dmin);
    for (int s = 0; s < 8; ++s) {
      int sc, m;
      UnpackScaleMinK4(blk.scales, s, &sc, &m);
      const float scale = d * static_cast<float>(sc);
      const float offset = dmin * static_cast<float>(m);
      const uint8_t* qs = blk.qs + 32 * (s / 2);
      const int nibble_shift = 4 * (s % 2);
      for (int l = 0; l < 32; ++l) {
        const float p = scale * static_cast<float>((qs[l] >> nibble_shift) & 0xF);
        dst[32 * s + l] = p - offset;
      }
    }
  }
}

void DequantQ5_K(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, dst += kQK_K) {
    const auto blk = LoadBlock<BlockQ5_K>(src, b);
    const float d = Fp16ToFp32(blk.d);
    const float dmin = Fp16ToFp32(blk.dmin);
    for (int s = 0; s < 8; ++s) {
      int sc, m;
      UnpackScaleMinK4(blk.scales, s, &sc, &m);
      const float scale = d * static_cast<float>(sc);
      const float offset = dmin * static_cast<float>(m);
      const uint8_t* qs = blk.qs + 32 * (s / 2);
      const int nibble_shift = 4 * (s % 2);
      for (int l = 0; l < 32; ++l) {
        const int q = ((qs[l] >> nibble_shift) & 0xF) | (((blk.qh[l] >> s) & 1) << 4);
        const float p = scale * static_cast<float>(q);
        dst[32 * s + l] = p - offset;
      }
    }
  }
}

void DequantQ6_K(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, dst += kQK_K) {
    const auto blk = LoadBlock<BlockQ6_K>(src, b);
    const float d = Fp16ToFp32(blk.d);
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128;  // half
      const int r = e % 128;  // 0..127 within the half
      const int l = r % 32;
      const int quarter = r / 32;  // 0..3: which of the four elements sharing ql/qh bytes
      const uint8_t ql = blk.ql[64 * h + l + 32 * (quarter % 2)];
      const int low = quarter < 2 ? (ql & 0xF) : (ql >> 4);
      const int high = (blk.qh[32 * h + l] >> (2 * quarter)) & 3;
      const int q = (low | (high << 4)) - 32;
      const float scale = d * static_cast<float>(blk.scales[e / 16]);
      dst[e] = scale * static_cast<float>(q);
    }
  }
}

}  // namespace

bool CanDequantize(GgmlType type) { return TraitsOf(type).dequantized; }

void DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n) {
  MT_CHECK_MSG(CanDequantize(type), "DequantizeRow: type has no reference dequantizer");
  MT_CHECK_MSG(n >= 0 && n % TraitsOf(type).block_size == 0,
               "DequantizeRow: n is not a multiple of the block size");
  const auto* bytes = static_cast<const uint8_t*>(src);
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(dst, bytes, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::kF16:
      return DequantF16(bytes, dst, n);
    case GgmlType::kBF16:
      return DequantBf16(bytes, dst, n);
    case GgmlType::kQ8_0:
      return DequantQ8_0(bytes, dst, n);
    case GgmlType::kQ4_0:
      return DequantQ4_0(bytes, dst, n);
    case GgmlType::kQ4_1:
      return DequantQ4_1(bytes, dst, n);
    case GgmlType::kQ5_0:
      return DequantQ5_0(bytes, dst, n);
    case GgmlType::kQ5_1:
      return DequantQ5_1(bytes, dst, n);
    case GgmlType::kQ4_K:
      return DequantQ4_K(bytes, dst, n);
    case GgmlType::kQ5_K:
      return DequantQ5_K(bytes, dst, n);
    case GgmlType::kQ6_K:
      return DequantQ6_K(bytes, dst, n);
    case GgmlType::kMXFP4:
      return DequantMxfp4(bytes, dst, n);
    case GgmlType::kQ2_K:
      return lowbit::DequantQ2_K(bytes, dst, n);
    case GgmlType::kQ3_K:
      return lowbit::DequantQ3_K(bytes, dst, n);
    case GgmlType::kIQ4_NL:
      return lowbit::DequantIQ4_NL(bytes, dst, n);
    case GgmlType::kIQ4_XS:
      return lowbit::DequantIQ4_XS(bytes, dst, n);
    case GgmlType::kIQ2_XXS:
      return DequantIq2Xxs(bytes, dst, n);
    case GgmlType::kIQ2_XS:
      return DequantIq2Xs(bytes, dst, n);
    case GgmlType::kIQ2_S:
      return DequantIq2S(bytes, dst, n);
    case GgmlType::kIQ3_XXS:
      return DequantIq3Xxs(bytes, dst, n);
    case GgmlType::kIQ3_S:
      return DequantIq3S(bytes, dst, n);
    case GgmlType::kIQ1_S:
      return DequantIq1S(bytes, dst, n);
    case GgmlType::kIQ1_M:
      return DequantIq1M(bytes, dst, n);
    default:
      MT_CHECK_MSG(false, "DequantizeRow: unreachable");
  }
}

}  // namespace mt
