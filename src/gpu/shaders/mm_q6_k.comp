// Y = X . W^T with W in q6_K (BlockQ6_K: 128 bytes of low nibbles, 64 bytes of high 2 bits, 16 int8 scales, f16 d; x = (d * scales[e / 16]) * (q - 32)).
#version 450
#define BLOCK_SIZE 256
#define BLOCK_BYTES 210
#define CHUNK 32
#include "mm_head.glsl"

// Chunk c holds elements 32c .. 32c + 31: half h = c / 4, quarter c % 4 of it (quant/blocks.h).
void DequantChunk(uint b, uint c, out float v[CHUNK]) {
  const uint h = c / 4;
  const uint quarter = c % 4;
  const uint ql = b + 64 * h + 32 * (quarter % 2);
  const uint low_shift = quarter < 2 ? 0u : 4u;
  const uint qh = b + 128 + 32 * h;
  const float d = Half(b + 208);
  const float scale0 = d * float(SignedByte(b + 192 + 2 * c));      // elements 32c .. 32c + 15
  const float scale1 = d * float(SignedByte(b + 192 + 2 * c + 1));  // 32c + 16 .. 32c + 31
  for (uint i = 0; i < 8; ++i) {
    const uint low = U32(ql + 4 * i) >> low_shift;
    const uint high = U32(qh + 4 * i) >> (2 * quarter);
    for (uint j = 0; j < 4; ++j) {
      const uint q = ((low >> (8 * j)) & 15u) | (((high >> (8 * j)) & 3u) << 4);
      v[4 * i + j] = (i < 4 ? scale0 : scale1) * float(int(q) - 32);
    }
  }
}

#include "mm_main.glsl"
