// Rounding 32 floats to a q8_0 block as the CPU does (kernels/attention.h StoreKv, quant/
// quantize.cc QuantizeQ8_0), the same bits on every device: d = f16(amax / 127), id = 1 / d,
// code = trunc(c + 0.5) or trunc(c - 0.5) for c = clamp(x id, -127, 127) (half away from
// zero, explicitly: GLSL's round() leaves ties to the device); a block holding a NaN or an
// infinity gets the scale 0x7E00 (NaN). The two divisions are done in integers (Vulkan's
// division is within 2.5 ulp, the CPU's correctly rounded); the product and the +-0.5 are
// single correctly rounded float ops, `precise` so that they are not fused. Needs fp16.glsl.

// The f32 bits of (a / b) 2^e rounded to nearest even, for integers a, b in [1, 2^24): 0 for a
// result below 2^-126 (its f16 is 0 either way), inf past the largest float.
uint DivRne(uint a, uint b, int e) {
  const int sa = 23 - findMSB(a), sb = 23 - findMSB(b);
  a <<= uint(sa);
  b <<= uint(sb);
  e += sb - sa;
  if (a < b) {  // a / b in [1, 2)
    a <<= 1u;
    e -= 1;
  }
  uint q = 0u, r = a;  // restoring division: q = floor(a / b 2^25), r the remainder (x 2)
  for (int i = 0; i < 26; ++i) {
    q <<= 1u;
    if (r >= b) {
      r -= b;
      q |= 1u;
    }
    r <<= 1u;
  }
  uint sig = q >> 2u;  // 24 bits
  const bool guard = ((q >> 1u) & 1u) != 0u;
  const bool sticky = (q & 1u) != 0u || r != 0u;
  if (guard && (sticky || (sig & 1u) != 0u)) ++sig;
  if (sig == 0x1000000u) {
    sig = 0x800000u;
    ++e;
  }
  const int biased = e + 127;
  if (biased <= 0) return 0u;
  if (biased >= 255) return 0x7F800000u;
  return (uint(biased) << 23) | (sig & 0x7FFFFFu);
}

// A block's scale: d16 its f16 bits and id the f32 1 / d (0 where d is 0 or inf), from the
// largest |x| that is not a NaN (amax, f32 bits: inf included) and whether any x is a NaN or
// an infinity.
void Q8Scale(uint amax, bool non_finite, out uint d16, out float id) {
  d16 = 0u;
  if (amax == 0x7F800000u) {
    d16 = 0x7C00u;  // inf / 127
  } else if (amax >= 0x800000u) {  // normal: amax = m 2^(e - 150); a subnormal one gives 0
    d16 = Fp32ToFp16(DivRne((amax & 0x7FFFFFu) | 0x800000u, 127u, int(amax >> 23) - 150));
  }
  id = 0.0;
  if (d16 != 0u && d16 != 0x7C00u) {  // d = md 2^ed, 1 / d = 2^23 / md 2^(-23 - ed)
    const uint e5 = d16 >> 10;
    const uint md = e5 != 0u ? (d16 & 0x3FFu) | 0x400u : d16;
    const int ed = e5 != 0u ? int(e5) - 25 : -24;
    id = uintBitsToFloat(DivRne(0x800000u, md, -23 - ed));
  }
  if (non_finite) d16 = 0x7E00u;
}

// The code of x (f32 bits) in a block of 1 / d = id: a NaN or an infinity gives -127 (the
// CPU's x id is NaN there: x is, or id is 0).
int Q8Code(uint x, float id) {
  if ((x & 0x7FFFFFFFu) >= 0x7F800000u) return -127;
  precise const float v = uintBitsToFloat(x) * id;
  const float c = v >= -127.0 ? (v <= 127.0 ? v : 127.0) : -127.0;
  precise const float t = c >= 0.0 ? c + 0.5 : c - 0.5;
  return int(t);  // toward zero
}

// amax and non_finite of Q8Scale over 32 f32 bit patterns, one at a time.
void Q8Amax(uint x, inout uint amax, inout bool non_finite) {
  const uint a = x & 0x7FFFFFFFu;
  if (a <= 0x7F800000u) amax = max(amax, a);  // as the CPU's std::max: NaNs skipped
  if (a >= 0x7F800000u) non_finite = true;
}
