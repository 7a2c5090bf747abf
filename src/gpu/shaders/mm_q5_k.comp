// Y = X . W^T with W in q5_K (BlockQ5_K: as Q4_K plus 32 bytes of fifth bits; chunk = sub-block s: x = (d * sc[s]) * q - dmin * m[s]).
#version 450
#define BLOCK_SIZE 256
#define BLOCK_BYTES 176
#define CHUNK 32
#include "mm_head.glsl"

// Sub-block s (0..7) scale and min of a Q4_K/Q5_K block from its 12 packed bytes at b.
void ScaleMinK4(uint b, uint s, out uint sc, out uint m) {
  if (s < 4) {
    sc = Byte(b + s) & 63u;
    m = Byte(b + s + 4) & 63u;
  } else {
    sc = (Byte(b + s + 4) & 15u) | ((Byte(b + s - 4) >> 6) << 4);
    m = (Byte(b + s + 4) >> 4) | ((Byte(b + s) >> 6) << 4);
  }
}

void DequantChunk(uint b, uint s, out float v[CHUNK]) {
  uint sc, m;
  ScaleMinK4(b + 4, s, sc, m);
  const float scale = Half(b) * float(sc);
  const float offset = Half(b + 2) * float(m);
  const uint qh = b + 16;                 // bit s of qh[l]: the fifth bit of element 32s + l
  const uint qs = b + 48 + 32 * (s / 2);  // sub-blocks 2c and 2c + 1 share 32 bytes
  const uint shift = 4 * (s % 2);
  for (uint i = 0; i < 8; ++i) {
    const uint low = U32(qs + 4 * i) >> shift;
    const uint high = U32(qh + 4 * i) >> s;
    for (uint j = 0; j < 4; ++j) {
      const uint q = ((low >> (8 * j)) & 15u) | (((high >> (8 * j)) & 1u) << 4);
      v[4 * i + j] = scale * float(q) - offset;
    }
  }
}

#include "mm_main.glsl"
