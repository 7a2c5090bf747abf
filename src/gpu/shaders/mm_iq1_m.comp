// Y = X . W^T with W in iq1_m (BlockIq1M: 32 low index bytes, 16 bytes of (3 high index bits + delta sign) x 2, 8 bytes of 3-bit scales holding d's nibbles; x = dl * (g + delta)).
#version 450
#define BLOCK_SIZE 256
#define BLOCK_BYTES 56
#define CHUNK 32
#include "mm_head.glsl"
#include "mm_iq_grids.glsl"

void DequantChunk(uint b, uint ib, out float v[CHUNK]) {
  const uint s0 = U16(b + 48), s1 = U16(b + 50), s2 = U16(b + 52), s3 = U16(b + 54);
  const uint d_bits = (s0 >> 12) | ((s1 >> 8) & 0x00F0u) | ((s2 >> 4) & 0x0F00u) | (s3 & 0xF000u);
  const float d = unpackHalf2x16(d_bits).x;
  for (uint l = 0; l < 4; ++l) {
    const uint g = 4 * ib + l;  // group of 8
    const uint k = g / 2;       // 16-element sub-block
    const uint s = U16(b + 48 + 2 * (k / 4));
    const float dl = d * float(2 * ((s >> (3 * (k % 4))) & 7u) + 1);
    const uint h = Byte(b + 32 + g / 2) >> (4 * (g % 2));
    const float delta = (h & 8u) != 0u ? -0.125 : 0.125;
    const uint index = Byte(b + g) | ((h & 7u) << 8);
    for (uint j = 0; j < 8; ++j) {
      const int c = int(Grid8(IQ1S_GRID, index, j) << 24) >> 24;  // int8: -1, 0, 1
      v[8 * l + j] = dl * (float(c) + delta);
    }
  }
}

#include "mm_main.glsl"
