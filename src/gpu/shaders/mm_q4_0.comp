// Y = X . W^T with W in q4_0 (BlockQ4_0: f16 d, 16 bytes of nibbles; x = (q - 8) * d).
#version 450
#define BLOCK_SIZE 32
#define BLOCK_BYTES 18
#define CHUNK 32
#include "mm_head.glsl"

void DequantChunk(uint b, uint sub, out float v[CHUNK]) {
  const float d = Half(b);
  for (uint i = 0; i < 4; ++i) {
    const uint word = U32(b + 2 + 4 * i);
    for (uint j = 0; j < 4; ++j) {
      const uint q = (word >> (8 * j)) & 0xFFu;  // element 4i + j (low), 4i + j + 16 (high)
      v[4 * i + j] = float(int(q & 15u) - 8) * d;
      v[4 * i + j + 16] = float(int(q >> 4) - 8) * d;
    }
  }
}

#include "mm_main.glsl"
