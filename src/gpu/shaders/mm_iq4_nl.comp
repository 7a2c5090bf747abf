// Y = X . W^T with W in iq4_nl (BlockIQ4_NL: f16 d, 16 bytes of nibbles; x = d * kIq4nlValues[q]).
#version 450
#define BLOCK_SIZE 32
#define BLOCK_BYTES 18
#define CHUNK 32
#include "mm_head.glsl"

const float kIq4nlValues[16] = float[16](-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0,
                                         -10.0, 1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);

void DequantChunk(uint b, uint sub, out float v[CHUNK]) {
  const float d = Half(b);
  for (uint i = 0; i < 4; ++i) {
    const uint word = U32(b + 2 + 4 * i);
    for (uint j = 0; j < 4; ++j) {
      const uint q = (word >> (8 * j)) & 0xFFu;
      v[4 * i + j] = d * kIq4nlValues[q & 15u];
      v[4 * i + j + 16] = d * kIq4nlValues[q >> 4];
    }
  }
}

#include "mm_main.glsl"
