// Y = X . W^T with W in iq2_xxs (BlockIq2Xxs: f16 d, 8 x (4 grid indices, 4 x 7 sign bits + a 4-bit scale)).
#version 450
#define BLOCK_SIZE 256
#define BLOCK_BYTES 66
#define CHUNK 32
#include "mm_head.glsl"
#include "mm_iq_grids.glsl"

// Chunk ib is 32 elements: 4 groups of 8, each one IQ2XXS grid point with signs.
void DequantChunk(uint b, uint ib, out float v[CHUNK]) {
  const uint w0 = U32(b + 2 + 8 * ib);  // 4 grid indices
  const uint w1 = U32(b + 6 + 8 * ib);  // 4 x 7 sign bits, 4-bit scale at the top
  const float db = Half(b) * (0.5 + float(w1 >> 28)) * 0.25;
  for (uint l = 0; l < 4; ++l) {
    const uint index = (w0 >> (8 * l)) & 0xFFu;
    const uint signs = KSigns((w1 >> (7 * l)) & 127u);
    for (uint j = 0; j < 8; ++j) v[8 * l + j] = Signed(db, Grid8(IQ2XXS_GRID, index, j), signs, j);
  }
}

#include "mm_main.glsl"
