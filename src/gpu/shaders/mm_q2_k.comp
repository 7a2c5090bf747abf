// Y = X . W^T with W in q2_K (BlockQ2_K: 16 bytes of 4-bit scales/mins, 64 bytes of 2-bit codes, f16 d, f16 dmin; x = (d * sc[j]) * q - dmin * m[j], j = e / 16).
#version 450
#define BLOCK_SIZE 256
#define BLOCK_BYTES 84
#define CHUNK 32
#include "mm_head.glsl"

// Chunk c holds elements 32c .. 32c + 31 = 128n + 32k + l with n = c / 4, k = c % 4.
void DequantChunk(uint b, uint c, out float v[CHUNK]) {
  const uint qs = b + 16 + 32 * (c / 4);
  const uint shift = 2 * (c % 4);
  const float d = Half(b + 80);
  const float dmin = Half(b + 82);
  for (uint half_chunk = 0; half_chunk < 2; ++half_chunk) {
    const uint sm = Byte(b + 2 * c + half_chunk);  // sub-block j = 2c + half_chunk
    const float scale = d * float(sm & 15u);
    const float offset = dmin * float(sm >> 4);
    for (uint i = 0; i < 4; ++i) {
      const uint word = U32(qs + 16 * half_chunk + 4 * i) >> shift;
      for (uint j = 0; j < 4; ++j) {
        v[16 * half_chunk + 4 * i + j] = scale * float((word >> (8 * j)) & 3u) - offset;
      }
    }
  }
}

#include "mm_main.glsl"
