// Y = X . W^T with W in mxfp4 (BlockMxfp4: E8M0 exponent e, 16 bytes of e2m1 nibbles; x = value(q) * 2^(e - 127)).
#version 450
#define BLOCK_SIZE 32
#define BLOCK_BYTES 17
#define CHUNK 32
#include "mm_head.glsl"

// The e2m1 values doubled (quant/blocks.h kMxfp4Values), paired with the scale halved.
const float kMxfp4Values[16] = float[16](0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0,  //
                                         0.0, -1.0, -2.0, -3.0, -4.0, -6.0, -8.0, -12.0);

void DequantChunk(uint b, uint sub, out float v[CHUNK]) {
  const uint e = Byte(b);
  // 2^(e - 128); e = 0 and 1 are f32 subnormals, as in the reference.
  const float d = uintBitsToFloat(e < 2u ? (0x00200000u << e) : ((e - 1u) << 23));
  for (uint i = 0; i < 4; ++i) {
    const uint word = U32(b + 1 + 4 * i);
    for (uint j = 0; j < 4; ++j) {
      const uint q = (word >> (8 * j)) & 0xFFu;
      v[4 * i + j] = kMxfp4Values[q & 15u] * d;
      v[4 * i + j + 16] = kMxfp4Values[q >> 4] * d;
    }
  }
}

#include "mm_main.glsl"
