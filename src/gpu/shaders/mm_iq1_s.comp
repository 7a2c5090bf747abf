// Y = X . W^T with W in iq1_s (BlockIq1S: f16 d, 32 low index bytes, 8 x u16 (4 x 3 high index bits, 3-bit scale, delta sign); x = dl * (g + delta)).
#version 450
#define BLOCK_SIZE 256
#define BLOCK_BYTES 50
#define CHUNK 32
#include "mm_head.glsl"
#include "mm_iq_grids.glsl"

void DequantChunk(uint b, uint ib, out float v[CHUNK]) {
  const uint qh = U16(b + 34 + 2 * ib);
  const float dl = Half(b) * float(2 * ((qh >> 12) & 7u) + 1);
  const float delta = (qh & 0x8000u) != 0u ? -0.125 : 0.125;
  for (uint l = 0; l < 4; ++l) {
    const uint index = Byte(b + 2 + 4 * ib + l) | (((qh >> (3 * l)) & 7u) << 8);
    for (uint j = 0; j < 8; ++j) {
      const int g = int(Grid8(IQ1S_GRID, index, j) << 24) >> 24;  // int8: -1, 0, 1
      v[8 * l + j] = dl * (float(g) + delta);
    }
  }
}

#include "mm_main.glsl"
