// Y = X . W^T with W in iq3_xxs (BlockIq3Xxs: f16 d, 64 grid index bytes, 8 x (4 x 7 sign bits + a 4-bit scale)).
#version 450
#define BLOCK_SIZE 256
#define BLOCK_BYTES 98
#define CHUNK 32
#include "mm_head.glsl"
#include "mm_iq_grids.glsl"

void DequantChunk(uint b, uint ib, out float v[CHUNK]) {
  const uint w = U32(b + 66 + 4 * ib);
  const float db = Half(b) * (0.5 + float(w >> 28)) * 0.5;
  for (uint l = 0; l < 4; ++l) {
    const uint g = 4 * ib + l;
    const uint i0 = Byte(b + 2 + 2 * g);  // coordinates 0..3
    const uint i1 = Byte(b + 3 + 2 * g);  // coordinates 4..7
    const uint signs = KSigns((w >> (7 * l)) & 127u);
    for (uint j = 0; j < 4; ++j) {
      v[8 * l + j] = Signed(db, Grid4(IQ3XXS_GRID, i0, j), signs, j);
      v[8 * l + 4 + j] = Signed(db, Grid4(IQ3XXS_GRID, i1, j), signs, j + 4);
    }
  }
}

#include "mm_main.glsl"
