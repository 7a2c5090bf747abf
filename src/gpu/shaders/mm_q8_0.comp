// Y = X . W^T with W in q8_0 (BlockQ8_0: f16 d, 32 int8 codes; x = d * q).
#version 450
#define BLOCK_SIZE 32
#define BLOCK_BYTES 34
#define CHUNK 32
#include "mm_head.glsl"

void DequantChunk(uint b, uint sub, out float v[CHUNK]) {
  const float d = Half(b);
  for (uint i = 0; i < 8; ++i) {
    const uint word = U32(b + 2 + 4 * i);
    for (uint j = 0; j < 4; ++j) v[4 * i + j] = float(int(word << (24 - 8 * j)) >> 24) * d;
  }
}

#include "mm_main.glsl"
