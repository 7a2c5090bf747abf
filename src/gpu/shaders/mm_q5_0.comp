// Y = X . W^T with W in q5_0 (BlockQ5_0: f16 d, 32 fifth bits, 16 bytes of nibbles; x = (q - 16) * d).
#version 450
#define BLOCK_SIZE 32
#define BLOCK_BYTES 22
#define CHUNK 32
#include "mm_head.glsl"

void DequantChunk(uint b, uint sub, out float v[CHUNK]) {
  const float d = Half(b);
  const uint qh = U32(b + 2);  // bit i: the fifth bit of element i
  for (uint i = 0; i < 4; ++i) {
    const uint word = U32(b + 6 + 4 * i);
    for (uint j = 0; j < 4; ++j) {
      const uint e = 4 * i + j;
      const uint q = (word >> (8 * j)) & 0xFFu;
      const uint lo = (q & 15u) | (((qh >> e) & 1u) << 4);
      const uint hi = (q >> 4) | (((qh >> (e + 16)) & 1u) << 4);
      v[e] = float(int(lo) - 16) * d;
      v[e + 16] = float(int(hi) - 16) * d;
    }
  }
}

#include "mm_main.glsl"
