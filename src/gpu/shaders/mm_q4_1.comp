// Y = X . W^T with W in q4_1 (BlockQ4_1: f16 d, f16 m, 16 bytes of nibbles; x = q * d + m).
#version 450
#define BLOCK_SIZE 32
#define BLOCK_BYTES 20
#define CHUNK 32
#include "mm_head.glsl"

void DequantChunk(uint b, uint sub, out float v[CHUNK]) {
  const float d = Half(b);
  const float m = Half(b + 2);
  for (uint i = 0; i < 4; ++i) {
    const uint word = U32(b + 4 + 4 * i);
    for (uint j = 0; j < 4; ++j) {
      const uint q = (word >> (8 * j)) & 0xFFu;
      v[4 * i + j] = float(q & 15u) * d + m;
      v[4 * i + j + 16] = float(q >> 4) * d + m;
    }
  }
}

#include "mm_main.glsl"
