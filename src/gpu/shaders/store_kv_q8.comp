#version 450
// Stores K or V rows into a q8_0 device cache (gpu/attention_ops.h StoreKvArgs): token t's
// head h (head_dim floats at x[t * stride + h * head_dim], head_dim a multiple of 32) goes to
// cell pos(t) of (seq(t), h) of a cache laid out (n_seq, heads, cells, head_dim) as q8_0
// blocks (34 bytes: the f16 scale, then 32 int8 codes), the CPU's bytes (q8_0.glsl). A row
// need not start on a word: a word shared with another cell is written with atomicAnd/atomicOr
// on its own bytes only. A token whose slot is outside the cache (pos >= cells, or seq >=
// n_seq) stores nothing.
//
// Groups: a 1-D grid of 64 blocks a group (group index y * gl_NumWorkGroups.x + x; blocks
// (t, h, b) in order), those past n * heads * head_dim / 32 do nothing.

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer XBuffer { uint x[]; };  // f32 bits
layout(std430, binding = 1) readonly buffer TokenBuffer { uint tokens[]; };
layout(std430, binding = 2) buffer CacheBuffer { uint cache[]; };

layout(push_constant) uniform Params {
  uint x_offset;  // words: token 0's row in the x binding
  uint n;         // tokens
  uint heads;
  uint head_dim;       // a multiple of 32
  uint stride;         // floats between tokens' rows
  uint tokens_offset;  // words: token 0's seq in the tokens binding (then its pos)
  uint cache_offset;   // words: (seq 0, head 0, cell 0) in the cache binding
  uint cells;
  uint n_seq;  // sequences that fit in the cache binding
} p;

#include "fp16.glsl"
#include "q8_0.glsl"

uint block_bytes[34];

// Bytes [first, first + 34) of the cache binding = block_bytes.
void PutBlock(uint first) {
  for (uint w = first / 4u; w <= (first + 33u) / 4u; ++w) {
    uint value = 0u, mask = 0u;
    for (uint k = max(first, 4u * w); k < min(first + 34u, 4u * w + 4u); ++k) {
      value |= block_bytes[k - first] << (8u * (k - 4u * w));
      mask |= 0xFFu << (8u * (k - 4u * w));
    }
    if (mask == 0xFFFFFFFFu) {
      cache[w] = value;
    } else {  // shared with the neighbouring block
      atomicAnd(cache[w], ~mask);
      atomicOr(cache[w], value);
    }
  }
}

void main() {
  const uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  const uint e = group * 64u + gl_LocalInvocationID.x;
  const uint row_blocks = p.head_dim / 32u;
  if (e >= p.n * p.heads * row_blocks) return;
  const uint b = e % row_blocks;
  const uint th = e / row_blocks;  // t * heads + h
  const uint h = th % p.heads;
  const uint t = th / p.heads;
  const uint seq = tokens[p.tokens_offset + 2u * t];
  const uint pos = tokens[p.tokens_offset + 2u * t + 1u];
  if (seq >= p.n_seq || pos >= p.cells) return;
  const uint src = p.x_offset + t * p.stride + h * p.head_dim + 32u * b;
  uint amax = 0u;
  bool non_finite = false;
  for (uint i = 0u; i < 32u; ++i) Q8Amax(x[src + i], amax, non_finite);
  uint d16;
  float id;
  Q8Scale(amax, non_finite, d16, id);
  block_bytes[0] = d16 & 0xFFu;
  block_bytes[1] = d16 >> 8;
  for (uint i = 0u; i < 32u; ++i) block_bytes[2u + i] = uint(Q8Code(x[src + i], id)) & 0xFFu;
  const uint cell = (seq * p.heads + h) * p.cells + pos;
  PutBlock(4u * p.cache_offset + cell * row_blocks * 34u + 34u * b);
}
