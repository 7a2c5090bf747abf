// Y = X . W^T with W in q4_K (BlockQ4_K: f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles; chunk = sub-block s: x = (d * sc[s]) * q - dmin * m[s]).
#version 450
#define BLOCK_SIZE 256
#define BLOCK_BYTES 144
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
  const uint qs = b + 16 + 32 * (s / 2);  // sub-blocks 2c and 2c + 1 share 32 bytes
  const uint shift = 4 * (s % 2);
  for (uint i = 0; i < 8; ++i) {
    const uint word = U32(qs + 4 * i) >> shift;
    for (uint j = 0; j < 4; ++j) v[4 * i + j] = scale * float((word >> (8 * j)) & 15u) - offset;
  }
}

#include "mm_main.glsl"
