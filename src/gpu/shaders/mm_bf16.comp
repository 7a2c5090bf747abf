// Y = X . W^T with W in bf16 (bfloat16 per element: the top half of an f32).
#version 450
#define BLOCK_SIZE 1
#define BLOCK_BYTES 2
#define CHUNK 1
#include "mm_head.glsl"

void DequantChunk(uint b, uint sub, out float v[CHUNK]) { v[0] = uintBitsToFloat(U16(b) << 16); }

#include "mm_main.glsl"
