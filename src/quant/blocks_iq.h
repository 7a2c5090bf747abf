// The ggml block structs of the importance-matrix lattice types, byte for byte
// (ggml-common.h): IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M. Conventions as in
// quant/blocks.h (little-endian, f16 fields hold IEEE half bits, copy blocks out of raw bytes).
//
// Every type is a super-block of 256 elements in 32 groups of 8 (group G = elements 8G ..
// 8G + 7). Each group is one point of a grid (quant/iq_grids.h: IQ2 and IQ1 grids give 8
// values, IQ3 grids 4, so an IQ3 group takes two points), times signs (IQ2/IQ3: the grids hold
// magnitudes) or plus a small shift (IQ1), times a sub-block scale. The values, per group
// element j (0..7), with g = the grid byte and s = the element's sign (+1 or -1):
//   IQ2_XXS  x = d * (0.5 + ls) * 0.25 * g * s      ls: 4 bits per 32 elements
//   IQ2_XS   x = d * (0.5 + ls) * 0.25 * g * s      ls: 4 bits per 16 elements
//   IQ2_S    x = d * (0.5 + ls) * 0.25 * g * s      ls: 4 bits per 16 elements
//   IQ3_XXS  x = d * (0.5 + ls) * 0.5 * g * s       ls: 4 bits per 32 elements
//   IQ3_S    x = d * (1 + 2 ls) * g * s             ls: 4 bits per 32 elements
//   IQ1_S    x = d * (2 ls + 1) * (g + delta)       ls: 3 bits per 32, g in {-1, 0, 1},
//                                                   delta = +-1/8 per 32 elements
//   IQ1_M    x = d * (2 ls + 1) * (g + delta)       ls: 3 bits per 16, delta = +-1/8 per group
// (ggml's float expressions, which quant/dequant.h reproduces bit for bit.) Every one is
// D * L * w with an odd integer L = 2 ls + 1, a signed integer w = g * s (IQ1: 8 g + 8 delta)
// and D = d / 8 (IQ2, IQ1), d / 4 (IQ3_XXS) or d (IQ3_S): the kernels' integer form.
//
// "7-bit signs" (IQ2_XXS, IQ2_XS, IQ3_XXS): a group's signs are stored as 7 bits; the 8th
// (element 7) is their parity, so that a group has an even number of minus signs
// (kIqSigns in quant/iq_grids.h). Bit j of the sign byte set = element j negative.
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/blocks.h"

namespace mt {

// ggml block_iq2_xxs (2.0625 bits per weight). For each 32 elements b (0..7), qs[4b .. 4b + 3]
// read as two little-endian uint32 words w0, w1:
//   w0 byte l (l = 0..3): grid index (iq2xxs grid, 256 entries) of group 4b + l
//   w1 bits 7l .. 7l + 6: 7-bit signs of group 4b + l;  w1 bits 28..31: ls of the 32
struct BlockIq2Xxs {
  uint16_t d;              // f16 super-scale
  uint16_t qs[kQK_K / 8];  // (32) 8 x (4 grid indices, 4 x 7-bit signs + 4-bit ls)
};
static_assert(sizeof(BlockIq2Xxs) == 66);

// ggml block_iq2_xs (2.3125 bpw). qs[G] for group G: bits 0..8 grid index (iq2xs grid, 512
// entries), bits 9..15 its 7-bit signs. scales[b]: low nibble = ls of elements 32b .. 32b + 15,
// high nibble = ls of 32b + 16 .. 32b + 31.
struct BlockIq2Xs {
  uint16_t d;                  // f16 super-scale
  uint16_t qs[kQK_K / 8];      // (32) 9-bit grid index | 7-bit signs << 9, per group
  uint8_t scales[kQK_K / 32];  // (8) two 4-bit ls per 32 elements
};
static_assert(sizeof(BlockIq2Xs) == 74);
static_assert(offsetof(BlockIq2Xs, scales) == 66);

// ggml block_iq2_s (2.5625 bpw). Group G: grid index (iq2s grid, 1024 entries) = qs[G] |
// ((qh[G / 4] >> 2 (G % 4)) & 3) << 8; its 8 sign bits (all stored, no parity) = qs[32 + G].
// scales as in BlockIq2Xs.
struct BlockIq2S {
  uint16_t d;                  // f16 super-scale
  uint8_t qs[kQK_K / 4];       // (64) low 8 bits of the 32 grid indices, then 32 sign bytes
  uint8_t qh[kQK_K / 32];      // (8) high 2 bits of the indices, four groups per byte
  uint8_t scales[kQK_K / 32];  // (8) two 4-bit ls per 32 elements
};
static_assert(sizeof(BlockIq2S) == 82);
static_assert(offsetof(BlockIq2S, qh) == 66 && offsetof(BlockIq2S, scales) == 74);

// ggml block_iq3_xxs (3.0625 bpw). qs[0..63]: grid indices (iq3xxs grid, 256 entries of 4
// values), two per group: qs[2G] = elements 8G .. 8G + 3, qs[2G + 1] = 8G + 4 .. 8G + 7. Then
// qs[64 + 4b .. 64 + 4b + 3] as a little-endian uint32 w per 32 elements b: bits 7l .. 7l + 6 =
// 7-bit signs of group 4b + l, bits 28..31 = ls of the 32.
struct BlockIq3Xxs {
  uint16_t d;                 // f16 super-scale
  uint8_t qs[3 * kQK_K / 8];  // (96) 64 grid indices, then 8 x (4 x 7-bit signs + ls)
};
static_assert(sizeof(BlockIq3Xxs) == 98);

// ggml block_iq3_s (3.4375 bpw). Grid index (iq3s grid, 512 entries of 4 values) of half h
// (0, 1) of group G: qs[2G + h] | ((qh[G / 4] >> (2 (G % 4) + h)) & 1) << 8. signs[G]: the
// group's 8 sign bits. scales[k]: low nibble = ls of elements 64k .. 64k + 31, high nibble =
// 64k + 32 .. 64k + 63.
struct BlockIq3S {
  uint16_t d;                  // f16 super-scale
  uint8_t qs[kQK_K / 4];       // (64) low 8 bits of the 64 grid indices
  uint8_t qh[kQK_K / 32];      // (8) their 9th bits, 8 per byte (one byte per 32 elements)
  uint8_t signs[kQK_K / 8];    // (32) one sign byte per group
  uint8_t scales[kQK_K / 64];  // (4) two 4-bit ls per 64 elements
};
static_assert(sizeof(BlockIq3S) == 110);
static_assert(offsetof(BlockIq3S, qh) == 66 && offsetof(BlockIq3S, signs) == 74 &&
              offsetof(BlockIq3S, scales) == 106);

// ggml block_iq1_s (1.5625 bpw). Per 32 elements b, qh[b]: bits 3l .. 3l + 2 = high 3 bits of
// the grid index (iq1s grid, 2048 entries) of group 4b + l, whose low 8 bits are qs[4b + l];
// bits 12..14 = ls; bit 15 set = delta -1/8 (else +1/8) for the 32 elements.
struct BlockIq1S {
  uint16_t d;               // f16 super-scale
  uint8_t qs[kQK_K / 8];    // (32) low 8 bits of the grid indices
  uint16_t qh[kQK_K / 32];  // (8) 4 x 3 high index bits, 3-bit ls, delta sign
};
static_assert(sizeof(BlockIq1S) == 50);
static_assert(offsetof(BlockIq1S, qh) == 34);

// ggml block_iq1_m (1.75 bpw); no separate d field. Group G: grid index (iq1s grid) = qs[G] |
// ((qh[G / 2] >> 4 (G % 2)) & 7) << 8; bit 3 + 4 (G % 2) of qh[G / 2] set = delta -1/8 (else
// +1/8) for the group. scales as four little-endian uint16 s[0..3]: bits 3k .. 3k + 2 of
// s[m] (k = 0..3) = ls of elements 64m + 16k .. 64m + 16k + 15; bits 12..15 of s[0], s[1],
// s[2], s[3] = bits 0-3, 4-7, 8-11, 12-15 of the f16 super-scale d.
struct BlockIq1M {
  uint8_t qs[kQK_K / 8];       // (32) low 8 bits of the grid indices
  uint8_t qh[kQK_K / 16];      // (16) per two groups: 3 high index bits + delta sign, twice
  uint8_t scales[kQK_K / 32];  // (8) 16 x 3-bit ls and the 4 nibbles of d
};
static_assert(sizeof(BlockIq1M) == 56);
static_assert(offsetof(BlockIq1M, qh) == 32 && offsetof(BlockIq1M, scales) == 48);

}  // namespace mt
