// The ggml block structs, byte for byte (ggml-common.h), for the formats moetier computes
// with. A block holds `block_size` consecutive elements of a row; a row is a plain array
// of blocks. Multi-byte fields are little-endian (static_assert below); f16 fields hold
// IEEE half bits (quant/float16.h). Rows read from a file may sit at any byte offset, so
// code that reads blocks from raw bytes should memcpy them rather than cast pointers.
//
// Element numbering below is within the block, 0-based. "q" is the stored integer code,
// "x" the value it stands for.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace mt {

static_assert(std::endian::native == std::endian::little,
              "ggml block layouts are little-endian; a big-endian host needs byte swaps");

constexpr int kQK = 32;     // elements per block of the legacy formats (Q4_0 ... Q8_0, MXFP4)
constexpr int kQK_K = 256;  // elements per super-block of the K-quants

// ggml block_q8_0. x[i] = d * qs[i].
struct BlockQ8_0 {
  uint16_t d;      // f16 scale
  int8_t qs[kQK];  // (32) signed codes; ggml's quantizer uses -127..127
};
static_assert(sizeof(BlockQ8_0) == 34);

// ggml block_q4_0. q in 0..15, x = (q - 8) * d.
struct BlockQ4_0 {
  uint16_t d;           // f16 scale
  uint8_t qs[kQK / 2];  // (16) low nibble of qs[j] = q of element j, high nibble = element j+16
};
static_assert(sizeof(BlockQ4_0) == 18);

// ggml block_q4_1. q in 0..15, x = q * d + m.
struct BlockQ4_1 {
  uint16_t d;           // f16 scale
  uint16_t m;           // f16 offset (the block minimum, may be any sign)
  uint8_t qs[kQK / 2];  // (16) low nibble of qs[j] = element j, high nibble = element j+16
};
static_assert(sizeof(BlockQ4_1) == 20);

// ggml block_q5_0. q in 0..31, x = (q - 16) * d. The fifth bit of element i is bit i of qh
// read as a little-endian uint32 (so qh[0] bit 0 = element 0, qh[2] bit 0 = element 16).
struct BlockQ5_0 {
  uint16_t d;           // f16 scale
  uint8_t qh[4];        // (32) bit 4 of each q, one bit per element
  uint8_t qs[kQK / 2];  // (16) low 4 bits: low nibble of qs[j] = element j, high = element j+16
};
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(offsetof(BlockQ5_0, qh) == 2 && offsetof(BlockQ5_0, qs) == 6);

// ggml block_q5_1. q in 0..31, x = q * d + m. qh/qs as in BlockQ5_0.
struct BlockQ5_1 {
  uint16_t d;           // f16 scale
  uint16_t m;           // f16 offset
  uint8_t qh[4];        // (32) bit 4 of each q, one bit per element
  uint8_t qs[kQK / 2];  // (16) low 4 bits: low nibble of qs[j] = element j, high = element j+16
};
static_assert(sizeof(BlockQ5_1) == 24);

// ggml block_mxfp4 (OCP microscaling: 32 e2m1 values sharing one power-of-two scale).
// x = kMxfp4Values[q] * 2^(e - 128): the table holds the e2m1 values doubled (so they are
// integers), and the scale 2^(e - 127) is halved to match. Bit 3 of q is the sign.
struct BlockMxfp4 {
  uint8_t e;            // E8M0 shared exponent, scale = 2^(e - 127)
  uint8_t qs[kQK / 2];  // (16) e2m1 codes: low nibble of qs[j] = element j, high = element j+16
};
static_assert(sizeof(BlockMxfp4) == 17);

// e2m1 code -> value * 2 (ggml's kvalues_mxfp4): 0, 0.5, 1, 1.5, 2, 3, 4, 6 and negatives.
inline constexpr int8_t kMxfp4Values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};

// ggml block_q4_K: 8 sub-blocks of 32 elements. Sub-block s has a 6-bit scale sc[s] and
// 6-bit min m[s]; q in 0..15; x = (d * sc[s]) * q - (dmin * m[s]).
// scales[12] packs the 8 (sc, m) pairs:
//   s in 0..3: sc[s] = scales[s] & 63,       m[s] = scales[s + 4] & 63
//   s in 4..7: sc[s] = (scales[s + 4] & 15) | (scales[s - 4] >> 6) << 4
//              m[s]  = (scales[s + 4] >> 4) | (scales[s] >> 6) << 4
// qs: 4 chunks of 64 elements, 32 bytes each. In chunk c, low nibble of qs[32c + l] is
// element 64c + l (sub-block 2c) and the high nibble is element 64c + 32 + l (sub-block 2c+1).
struct BlockQ4_K {
  uint16_t d;             // f16 super-scale of the sub-block scales
  uint16_t dmin;          // f16 super-scale of the sub-block mins
  uint8_t scales[12];     // (8 x (6 + 6) bits) packed sub-block scales and mins, see above
  uint8_t qs[kQK_K / 2];  // (256) 4-bit codes, see above
};
static_assert(sizeof(BlockQ4_K) == 144);

// ggml block_q5_K: as BlockQ4_K with a fifth bit per element. q = low 4 bits from qs (as in
// Q4_K) | bit << 4, the bit being: for element 64c + l (l < 32), bit 2c of qh[l]; for
// element 64c + 32 + l, bit 2c + 1 of qh[l]. x = (d * sc[s]) * q - (dmin * m[s]), q in 0..31.
struct BlockQ5_K {
  uint16_t d;             // f16 super-scale of the sub-block scales
  uint16_t dmin;          // f16 super-scale of the sub-block mins
  uint8_t scales[12];     // (8 x (6 + 6) bits) packed as in BlockQ4_K
  uint8_t qh[kQK_K / 8];  // (32 bytes = 256 bits) fifth bits, see above
  uint8_t qs[kQK_K / 2];  // (256) low 4 bits, laid out as in BlockQ4_K
};
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(offsetof(BlockQ5_K, qh) == 16 && offsetof(BlockQ5_K, qs) == 48);

// ggml block_q6_K: 16 sub-blocks of 16 elements, signed 8-bit scale each; q in 0..63;
// x = (d * scales[e / 16]) * (q - 32) for element e. Two halves of 128 elements; in half
// h (ql += 64h, qh += 32h) for l in 0..31:
//   element 128h + l      : low 4 = ql[l] & 15,      high 2 = qh[l] & 3
//   element 128h + l + 32 : low 4 = ql[l + 32] & 15, high 2 = (qh[l] >> 2) & 3
//   element 128h + l + 64 : low 4 = ql[l] >> 4,      high 2 = (qh[l] >> 4) & 3
//   element 128h + l + 96 : low 4 = ql[l + 32] >> 4, high 2 = qh[l] >> 6
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];      // (256 x 4 bits) low 4 bits of q, see above
  uint8_t qh[kQK_K / 4];      // (256 x 2 bits) high 2 bits of q, see above
  int8_t scales[kQK_K / 16];  // (16) signed sub-block scales
  uint16_t d;                 // f16 super-scale
};
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(offsetof(BlockQ6_K, scales) == 192 && offsetof(BlockQ6_K, d) == 208);

}  // namespace mt
