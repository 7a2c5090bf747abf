// Rounding f32 to f16 in integers (packHalf2x16 leaves its rounding to the device).

// quant/float16.h's Fp32ToFp16, on the f32 bits.
uint Fp32ToFp16(uint w) {
  const uint sign = (w >> 16) & 0x8000u;
  const uint a = w & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7E00u;  // NaN -> the canonical quiet NaN
  const int e = int(a >> 23) - 127;
  if (e > 15) return sign | 0x7C00u;  // too large, or inf: inf
  const uint m = (a & 0x7FFFFFu) | 0x800000u;
  uint shift, result;
  if (e >= -14) {  // normal f16
    shift = 13u;
    result = (uint(e + 15) << 10) | ((m >> shift) & 0x3FFu);
  } else {  // subnormal f16: units of 2^-24
    const int s = -e - 1;
    if (s > 24) return sign;  // below half the smallest subnormal
    shift = uint(s);
    result = m >> shift;
  }
  const uint rest = m & ((1u << shift) - 1u);
  const uint half_unit = 1u << (shift - 1u);
  if (rest > half_unit || (rest == half_unit && (result & 1u) != 0u)) ++result;
  return sign | result;
}
