#include "quant/dequant_iq.h"

#include <cstring>

#include "quant/blocks_iq.h"
#include "quant/float16.h"
#include "quant/iq_grids.h"

namespace mt {
namespace {

template <typename Block>
Block LoadBlock(const uint8_t* src, int64_t index) {
  Block b;
  std::memcpy(&b, src + index * static_cast<int64_t>(sizeof(Block)), sizeof(Block));
  return b;
}

uint32_t Word32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Coordinate j of a grid entry (one byte each).
uint8_t Coord(uint64_t entry, int j) { return static_cast<uint8_t>(entry >> (8 * j)); }

// One group of 8: x[j] = (db * g[j]) * (bit j of signs ? -1 : 1), as ggml writes it.
void SignedGroup(float db, uint64_t entry, uint8_t signs, float* y) {
  for (int j = 0; j < 8; ++j) {
    y[j] = db * static_cast<float>(Coord(entry, j)) * ((signs >> j) & 1 ? -1.0f : 1.0f);
  }
}

}  // namespace

void DequantIq2Xxs(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const auto blk = LoadBlock<BlockIq2Xxs>(src, b);
    const float d = Fp16ToFp32(blk.d);
    for (int ib = 0; ib < 8; ++ib, dst += 32) {
      const uint32_t w0 = Word32(blk.qs + 4 * ib), w1 = Word32(blk.qs + 4 * ib + 2);
      const float db = d * (0.5f + static_cast<float>(w1 >> 28)) * 0.25f;
      for (int l = 0; l < 4; ++l) {
        SignedGroup(db, kIq2XxsGrid.entry[(w0 >> (8 * l)) & 0xFF],
                    kIqSigns.sign[(w1 >> (7 * l)) & 127], dst + 8 * l);
      }
    }
  }
}

void DequantIq2Xs(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const auto blk = LoadBlock<BlockIq2Xs>(src, b);
    const float d = Fp16ToFp32(blk.d);
    for (int ib = 0; ib < 8; ++ib, dst += 32) {
      const float db[2] = {d * (0.5f + static_cast<float>(blk.scales[ib] & 0xF)) * 0.25f,
                           d * (0.5f + static_cast<float>(blk.scales[ib] >> 4)) * 0.25f};
      for (int l = 0; l < 4; ++l) {
        const uint16_t q = blk.qs[4 * ib + l];
        SignedGroup(db[l / 2], kIq2XsGrid.entry[q & 511], kIqSigns.sign[q >> 9], dst + 8 * l);
      }
    }
  }
}

void DequantIq2S(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const auto blk = LoadBlock<BlockIq2S>(src, b);
    const float d = Fp16ToFp32(blk.d);
    for (int ib = 0; ib < 8; ++ib, dst += 32) {
      const float db[2] = {d * (0.5f + static_cast<float>(blk.scales[ib] & 0xF)) * 0.25f,
                           d * (0.5f + static_cast<float>(blk.scales[ib] >> 4)) * 0.25f};
      for (int l = 0; l < 4; ++l) {
        const int g = 4 * ib + l;
        const int index = blk.qs[g] | (((blk.qh[ib] >> (2 * l)) & 3) << 8);
        SignedGroup(db[l / 2], kIq2SGrid.entry[index], blk.qs[32 + g], dst + 8 * l);
      }
    }
  }
}

void DequantIq3Xxs(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const auto blk = LoadBlock<BlockIq3Xxs>(src, b);
    const float d = Fp16ToFp32(blk.d);
    for (int ib = 0; ib < 8; ++ib, dst += 32) {
      const uint32_t w = Word32(blk.qs + 64 + 4 * ib);
      const float db = d * (0.5f + static_cast<float>(w >> 28)) * 0.5f;
      for (int l = 0; l < 4; ++l) {
        const int g = 4 * ib + l;
        const uint64_t entry =
            kIq3XxsGrid.entry[blk.qs[2 * g]] | uint64_t{kIq3XxsGrid.entry[blk.qs[2 * g + 1]]} << 32;
        SignedGroup(db, entry, kIqSigns.sign[(w >> (7 * l)) & 127], dst + 8 * l);
      }
    }
  }
}

void DequantIq3S(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const auto blk = LoadBlock<BlockIq3S>(src, b);
    const float d = Fp16ToFp32(blk.d);
    for (int ib = 0; ib < 8; ++ib, dst += 32) {
      const int ls = (blk.scales[ib / 2] >> (4 * (ib % 2))) & 0xF;
      const float db = d * static_cast<float>(1 + 2 * ls);
      for (int l = 0; l < 4; ++l) {
        const int g = 4 * ib + l;
        const int i0 = blk.qs[2 * g] | (((blk.qh[ib] >> (2 * l)) & 1) << 8);
        const int i1 = blk.qs[2 * g + 1] | (((blk.qh[ib] >> (2 * l + 1)) & 1) << 8);
        const uint64_t entry = kIq3SGrid.entry[i0] | uint64_t{kIq3SGrid.entry[i1]} << 32;
        SignedGroup(db, entry, blk.signs[g], dst + 8 * l);
      }
    }
  }
}

// IQ1: x[j] = dl * (g[j] + delta), g[j] the int8 grid coordinate, delta = +-1/8.
void DequantIq1S(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const auto blk = LoadBlock<BlockIq1S>(src, b);
    const float d = Fp16ToFp32(blk.d);
    for (int ib = 0; ib < 8; ++ib, dst += 32) {
      const int qh = blk.qh[ib];
      const float dl = d * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
      const float delta = (qh & 0x8000) ? -0.125f : 0.125f;
      for (int l = 0; l < 4; ++l) {
        const uint64_t entry = kIq1SGrid.entry[blk.qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8)];
        for (int j = 0; j < 8; ++j) {
          dst[8 * l + j] = dl * (static_cast<float>(static_cast<int8_t>(Coord(entry, j))) + delta);
        }
      }
    }
  }
}

void DequantIq1M(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const auto blk = LoadBlock<BlockIq1M>(src, b);
    uint16_t s[4];
    std::memcpy(s, blk.scales, 8);
    const uint16_t d_bits = static_cast<uint16_t>((s[0] >> 12) | ((s[1] >> 8) & 0x00F0) |
                                                  ((s[2] >> 4) & 0x0F00) | (s[3] & 0xF000));
    const float d = Fp16ToFp32(d_bits);
    for (int g = 0; g < 32; ++g, dst += 8) {
      const int k = g / 2;  // 16-element sub-block
      const float dl = d * static_cast<float>(2 * ((s[k / 4] >> (3 * (k % 4))) & 7) + 1);
      const int h = blk.qh[g / 2] >> (4 * (g % 2));
      const float delta = (h & 8) ? -0.125f : 0.125f;
      const uint64_t entry = kIq1SGrid.entry[blk.qs[g] | ((h & 7) << 8)];
      for (int j = 0; j < 8; ++j) {
        dst[j] = dl * (static_cast<float>(static_cast<int8_t>(Coord(entry, j))) + delta);
      }
    }
  }
}

}  // namespace mt
