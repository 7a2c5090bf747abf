// Y = X . W^T with W in iq2_s (BlockIq2S: f16 d, 32 low index bytes, 32 sign bytes, 8 bytes of high index bits, 8 bytes of two 4-bit scales).
#version 450
#define BLOCK_SIZE 256
#define BLOCK_BYTES 82
#define CHUNK 32
#include "mm_head.glsl"
#include "mm_iq_grids.glsl"

void DequantChunk(uint b, uint ib, out float v[CHUNK]) {
  const float d = Half(b);
  const uint scales = Byte(b + 74 + ib);
  const uint qh = Byte(b + 66 + ib);
  for (uint l = 0; l < 4; ++l) {
    const float db = d * (0.5 + float(l < 2 ? scales & 15u : scales >> 4)) * 0.25;
    const uint g = 4 * ib + l;
    const uint index = Byte(b + 2 + g) | (((qh >> (2 * l)) & 3u) << 8);
    const uint signs = Byte(b + 34 + g);
    for (uint j = 0; j < 8; ++j) v[8 * l + j] = Signed(db, Grid8(IQ2S_GRID, index, j), signs, j);
  }
}

#include "mm_main.glsl"
