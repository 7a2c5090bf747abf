// Y = X . W^T with W in q5_1 (BlockQ5_1: f16 d, f16 m, 32 fifth bits, 16 bytes of nibbles; x = q * d + m).
#version 450
#define BLOCK_SIZE 32
#define BLOCK_BYTES 24
#define CHUNK 32
#include "mm_head.glsl"

void DequantChunk(uint b, uint sub, out float v[CHUNK]) {
  const float d = Half(b);
  const float m = Half(b + 2);
  const uint qh = U32(b + 4);  // bit i: the fifth bit of element i
  for (uint i = 0; i < 4; ++i) {
    const uint word = U32(b + 8 + 4 * i);
    for (uint j = 0; j < 4; ++j) {
      const uint e = 4 * i + j;
      const uint q = (word >> (8 * j)) & 0xFFu;
      const uint lo = (q & 15u) | (((qh >> e) & 1u) << 4);
      const uint hi = (q >> 4) | (((qh >> (e + 16)) & 1u) << 4);
      v[e] = float(lo) * d + m;
      v[e + 16] = float(hi) * d + m;
    }
  }
}

#include "mm_main.glsl"
