// The IQ lattice code books (quant/iq_grids.h) for the mm_iq*.comp shaders: one storage
// buffer at binding 3 that gpu/matmul.cc fills once per device, grids one after another as
// uint32 words (the word offsets below are kIqGridWords in gpu/matmul.cc). An 8-coordinate
// entry is 2 words, a 4-coordinate one 1 word; coordinate j is byte j (little-endian).
layout(std430, binding = 3) readonly buffer GridBuffer { uint grid[]; };

#define IQ2XXS_GRID 0u     // 256 entries of 8
#define IQ2XS_GRID 512u    // 512 entries of 8
#define IQ2S_GRID 1536u    // 1024 entries of 8
#define IQ3XXS_GRID 3584u  // 256 entries of 4
#define IQ3S_GRID 3840u    // 512 entries of 4
#define IQ1S_GRID 4352u    // 2048 entries of 8 (int8 bytes: -1, 0, 1)

// Coordinate j (0..7) of entry `index` of an 8-coordinate grid at word `base`.
uint Grid8(uint base, uint index, uint j) {
  return (grid[base + 2u * index + (j >> 2)] >> (8u * (j & 3u))) & 0xFFu;
}
// Coordinate j (0..3) of entry `index` of a 4-coordinate grid at word `base`.
uint Grid4(uint base, uint index, uint j) { return (grid[base + index] >> (8u * j)) & 0xFFu; }

// ggml's ksigns_iq2xs: 7 stored sign bits -> 8, bit 7 the parity of the 7.
uint KSigns(uint i) { return i | ((uint(bitCount(i)) & 1u) << 7); }

// x = db * g * (bit j of signs ? -1 : 1), as the reference.
float Signed(float db, uint g, uint signs, uint j) {
  return db * float(g) * (((signs >> j) & 1u) != 0u ? -1.0 : 1.0);
}
