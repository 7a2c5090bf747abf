// Y = X . W^T with W in q3_K (BlockQ3_K: 32 bytes of high bits, 64 bytes of 2-bit codes, 12 bytes of 6-bit scales, f16 d; x = (d * sc[j]) * (q - 4), j = e / 16).
#version 450
#define BLOCK_SIZE 256
#define BLOCK_BYTES 110
#define CHUNK 32
#include "mm_head.glsl"

// sc[j] + 32 (0..63) from the 12 packed bytes at b (quant/blocks.h BlockQ3_K).
uint Q3Scale(uint b, uint j) {
  const uint low = j < 8 ? Byte(b + j) & 15u : Byte(b + j - 8) >> 4;
  const uint high = (Byte(b + 8 + j % 4) >> (2 * (j / 4))) & 3u;
  return low | (high << 4);
}

// Chunk c holds elements 32c .. 32c + 31 = 128n + 32k + l with n = c / 4, k = c % 4; the high
// bit of element 32c + l is bit c of hmask[l].
void DequantChunk(uint b, uint c, out float v[CHUNK]) {
  const uint qs = b + 32 + 32 * (c / 4);
  const uint shift = 2 * (c % 4);
  const float d = Half(b + 108);
  for (uint half_chunk = 0; half_chunk < 2; ++half_chunk) {
    const float scale = d * float(int(Q3Scale(b + 96, 2 * c + half_chunk)) - 32);
    for (uint i = 0; i < 4; ++i) {
      const uint low = U32(qs + 16 * half_chunk + 4 * i) >> shift;
      const uint high = U32(b + 16 * half_chunk + 4 * i) >> c;
      for (uint j = 0; j < 4; ++j) {
        const uint q = ((low >> (8 * j)) & 3u) | (((high >> (8 * j)) & 1u) << 2);
        v[16 * half_chunk + 4 * i + j] = scale * float(int(q) - 4);
      }
    }
  }
}

#include "mm_main.glsl"
