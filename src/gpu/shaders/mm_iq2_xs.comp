// Y = X . W^T with W in iq2_xs (BlockIq2Xs: f16 d, 32 x (9-bit grid index, 7 sign bits), 8 bytes of two 4-bit scales).
#version 450
#define BLOCK_SIZE 256
#define BLOCK_BYTES 74
#define CHUNK 32
#include "mm_head.glsl"
#include "mm_iq_grids.glsl"

void DequantChunk(uint b, uint ib, out float v[CHUNK]) {
  const float d = Half(b);
  const uint scales = Byte(b + 66 + ib);
  for (uint l = 0; l < 4; ++l) {
    const float db = d * (0.5 + float(l < 2 ? scales & 15u : scales >> 4)) * 0.25;
    const uint q = U16(b + 2 + 2 * (4 * ib + l));
    const uint signs = KSigns(q >> 9);
    for (uint j = 0; j < 8; ++j) v[8 * l + j] = Signed(db, Grid8(IQ2XS_GRID, q & 511u, j), signs, j);
  }
}

#include "mm_main.glsl"
