// Y = X . W^T with W in iq4_xs (BlockIQ4_XS: f16 d, 8 6-bit scales, 128 bytes of nibbles; x = (d * (ls[j] - 32)) * kIq4nlValues[q], j = e / 32).
#version 450
#define BLOCK_SIZE 256
#define BLOCK_BYTES 136
#define CHUNK 32
#include "mm_head.glsl"

const float kIq4nlValues[16] = float[16](-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0,
                                         -10.0, 1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);

// Chunk j is sub-block j: low nibbles of qs[16j ..] are elements 32j .., high ones 32j + 16 ..
void DequantChunk(uint b, uint j, out float v[CHUNK]) {
  const uint ls = ((Byte(b + 4 + j / 2) >> (4 * (j % 2))) & 15u) | (((U16(b + 2) >> (2 * j)) & 3u) << 4);
  const float scale = Half(b) * float(int(ls) - 32);
  for (uint i = 0; i < 4; ++i) {
    const uint word = U32(b + 8 + 16 * j + 4 * i);
    for (uint l = 0; l < 4; ++l) {
      const uint q = (word >> (8 * l)) & 0xFFu;
      v[4 * i + l] = scale * kIq4nlValues[q & 15u];
      v[4 * i + l + 16] = scale * kIq4nlValues[q >> 4];
    }
  }
}

#include "mm_main.glsl"
