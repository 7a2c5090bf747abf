// Y = X . W^T with W in f16 (IEEE half per element).
#version 450
#define BLOCK_SIZE 1
#define BLOCK_BYTES 2
#define CHUNK 1
#include "mm_head.glsl"

void DequantChunk(uint b, uint sub, out float v[CHUNK]) { v[0] = Half(b); }

#include "mm_main.glsl"
