// Y = X . W^T with W in iq3_s (BlockIq3S: f16 d, 64 low index bytes, 8 bytes of 9th bits, 32 sign bytes, 4 bytes of two 4-bit scales).
#version 450
#define BLOCK_SIZE 256
#define BLOCK_BYTES 110
#define CHUNK 32
#include "mm_head.glsl"
#include "mm_iq_grids.glsl"

void DequantChunk(uint b, uint ib, out float v[CHUNK]) {
  const uint ls = (Byte(b + 106 + ib / 2) >> (4 * (ib % 2))) & 15u;
  const float db = Half(b) * float(1 + 2 * ls);
  const uint qh = Byte(b + 66 + ib);
  for (uint l = 0; l < 4; ++l) {
    const uint g = 4 * ib + l;
    const uint i0 = Byte(b + 2 + 2 * g) | (((qh >> (2 * l)) & 1u) << 8);
    const uint i1 = Byte(b + 3 + 2 * g) | (((qh >> (2 * l + 1)) & 1u) << 8);
    const uint signs = Byte(b + 74 + g);
    for (uint j = 0; j < 4; ++j) {
      v[8 * l + j] = Signed(db, Grid4(IQ3S_GRID, i0, j), signs, j);
      v[8 * l + 4 + j] = Signed(db, Grid4(IQ3S_GRID, i1, j), signs, j + 4);
    }
  }
}

#include "mm_main.glsl"
