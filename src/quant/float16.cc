#include "quant/float16.h"

#include <bit>

namespace mt {

// f16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. f32: 1, 8 (bias 127), 23.

float Fp16ToFp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0x1F) {
    // Inf stays inf; NaN keeps its payload and comes out quiet (bit 22 set), as ggml's
    // arithmetic conversion does on x86.
    bits = sign | 0x7F800000u | (mant << 13) | (mant != 0 ? 0x00400000u : 0u);
  } else if (exp != 0) {
    bits = sign | ((exp + (127 - 15)) << 23) | (mant << 13);
  } else {
    // Zero or subnormal: mant * 2^-24, exact in f32.
    const float magnitude = static_cast<float>(mant) * 0x1p-24f;
    bits = sign | std::bit_cast<uint32_t>(magnitude);
  }
  return std::bit_cast<float>(bits);
}

uint16_t Fp32ToFp16(float f) {
  const uint32_t w = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((w >> 16) & 0x8000u);
  const uint32_t abs = w & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return sign | 0x7E00u;  // NaN -> the canonical quiet NaN

  const int exp = static_cast<int>(abs >> 23) - 127;  // unbiased; -127 for f32 zero/subnormal
  if (exp > 15) return sign | 0x7C00u;                // too large, or inf: inf

  // Value = m * 2^(exp - 23) with the implicit bit in m. Re-express in units of the f16
  // result's last place and round to nearest, ties to even. A carry out of the mantissa
  // moves into the exponent, which is right (up to 0x7C00 = inf).
  const uint32_t m = (abs & 0x7FFFFFu) | 0x800000u;
  uint32_t shift;    // bits of m below the f16 last place
  uint32_t result;   // f16 magnitude before rounding
  if (exp >= -14) {  // normal f16
    shift = 13;
    result = (static_cast<uint32_t>(exp + 15) << 10) | ((m >> shift) & 0x3FFu);
  } else {                    // subnormal f16: units of 2^-24
    const int s = -exp - 1;   // 14 for exp = -15, 24 for exp = -25
    if (s > 24) return sign;  // below half the smallest subnormal (f32 zeros land here too)
    shift = static_cast<uint32_t>(s);
    result = m >> shift;
  }
  const uint32_t rest = m & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (result & 1u))) ++result;
  return sign | static_cast<uint16_t>(result);
}

float Bf16ToFp32(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

uint16_t Fp32ToBf16(float f) {
  const uint32_t w = std::bit_cast<uint32_t>(f);
  if ((w & 0x7FFFFFFFu) > 0x7F800000u) {
    // NaN: truncate and set the quiet bit, so a payload in the low half cannot make it inf.
    return static_cast<uint16_t>((w >> 16) | 0x40u);
  }
  // Round to nearest, ties to even; overflow rounds to inf by the carry.
  const uint32_t lsb = (w >> 16) & 1u;
  return static_cast<uint16_t>((w + 0x7FFFu + lsb) >> 16);
}

}  // namespace mt
