// IEEE half (f16) and bfloat16 conversions, bit-exact with ggml's scalar conversions:
// round-to-nearest-even, NaN kept NaN (quiet), overflow to infinity.
#pragma once

#include <cstdint>

namespace mt {

float Fp16ToFp32(uint16_t h);
uint16_t Fp32ToFp16(float f);
float Bf16ToFp32(uint16_t b);
uint16_t Fp32ToBf16(float f);

}  // namespace mt
