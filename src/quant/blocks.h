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

// ---- The low-bit K-quants and the non-linear 4-bit types (Q2_K, Q3_K, IQ4_NL, IQ4_XS) ----

// ggml block_q2_K: 16 sub-blocks of 16 elements; sub-block j (element e is in j = e / 16) has
// a 4-bit scale sc[j] and a 4-bit min m[j]; q in 0..3; x = (d * sc[j]) * q - (dmin * m[j]).
// Codes: two halves of 128 elements; element 128n + 32k + l (k = 0..3, l = 0..31) has
// q = (qs[32n + l] >> 2k) & 3.
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];  // (16) scales[j] = sc[j] | m[j] << 4
  uint8_t qs[kQK_K / 4];       // (256 x 2 bits) codes, see above
  uint16_t d;                  // f16 super-scale of the sub-block scales
  uint16_t dmin;               // f16 super-scale of the sub-block mins
};
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(offsetof(BlockQ2_K, qs) == 16 && offsetof(BlockQ2_K, d) == 80);

// ggml block_q3_K: 16 sub-blocks of 16 elements with signed 6-bit scales sc[j] in -32..31;
// q in 0..7 stands for q - 4; x = (d * sc[j]) * (q - 4), j = e / 16. q = low | high << 2:
// element e = 128n + 32k + l (k = 0..3, l = 0..31) has low = (qs[32n + l] >> 2k) & 3 (as in
// Q2_K) and high = bit e / 32 of hmask[e % 32]. scales[12] packs sc[j] + 32 (0..63): its low
// 4 bits are scales[j] & 15 for j < 8 and scales[j - 8] >> 4 for j >= 8, its high 2 bits
// (scales[8 + j % 4] >> 2 (j / 4)) & 3.
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];  // (256 x 1 bit) high bits of q, see above
  uint8_t qs[kQK_K / 4];     // (256 x 2 bits) low bits of q, see above
  uint8_t scales[12];        // (16 x 6 bits) sc[j] + 32, packed as above
  uint16_t d;                // f16 super-scale
};
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(offsetof(BlockQ3_K, qs) == 32 && offsetof(BlockQ3_K, scales) == 96 &&
              offsetof(BlockQ3_K, d) == 108);

// The 16 values of IQ4_NL / IQ4_XS codes (ggml's kvalues_iq4nl): a non-linear grid, denser
// near zero.
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// ggml block_iq4_nl: x = d * kIq4nlValues[q], q in 0..15.
struct BlockIQ4_NL {
  uint16_t d;           // f16 scale
  uint8_t qs[kQK / 2];  // (16) low nibble of qs[j] = element j, high nibble = element j+16
};
static_assert(sizeof(BlockIQ4_NL) == 18);

// ggml block_iq4_xs: 8 sub-blocks of 32 elements with 6-bit scales ls[j] standing for
// ls[j] - 32; x = (d * (ls[j] - 32)) * kIq4nlValues[q], j = e / 32.
// ls[j] = ((scales_l[j / 2] >> 4 (j % 2)) & 15) | ((scales_h >> 2j) & 3) << 4.
// Sub-block j's codes are qs[16j .. 16j + 15]: low nibble of qs[16j + l] = element 32j + l,
// high nibble = element 32j + 16 + l.
struct BlockIQ4_XS {
  uint16_t d;                    // f16 super-scale
  uint16_t scales_h;             // (8 x 2 bits) high bits of ls[j], bits 2j, 2j + 1
  uint8_t scales_l[kQK_K / 64];  // (8 x 4 bits) low bits of ls[j]: nibble j % 2 of byte j / 2
  uint8_t qs[kQK_K / 2];         // (256 x 4 bits) codes, see above
};
static_assert(sizeof(BlockIQ4_XS) == 136);
static_assert(offsetof(BlockIQ4_XS, scales_l) == 4 && offsetof(BlockIQ4_XS, qs) == 8);

}  // namespace mt
