#version 450
// Stores K or V rows into a device cache (gpu/attention_ops.h StoreKvArgs): token t's head h
// (head_dim floats at x[t * stride + h * head_dim]) goes to cell pos(t) of (seq(t), h) of a
// cache laid out (n_seq, heads, cells, head_dim), f32 as it is (its bits copied) or f16 two
// halves a word, rounded as quant/float16.h's Fp32ToFp16: to nearest even, overflow to inf,
// NaN to the quiet NaN 0x7E00 with its sign (kernels/attention.h StoreKv). The rounding is
// done here in integers, not by packHalf2x16, whose rounding Vulkan leaves to the device.
// A token whose slot is outside the cache (pos >= cells, or seq >= n_seq) stores nothing.
//
// Groups: a 1-D grid of 64 words a group (group index y * gl_NumWorkGroups.x + x; words
// (t, h, w) in order, w < head_dim / 2 the word of elements 2w and 2w + 1 of an f16 row),
// those past n * heads * head_dim / 2 do nothing.

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer XBuffer { uint x[]; };  // f32 bits
layout(std430, binding = 1) readonly buffer TokenBuffer { uint tokens[]; };
layout(std430, binding = 2) buffer CacheBuffer { uint cache[]; };

layout(push_constant) uniform Params {
  uint x_offset;  // words: token 0's row in the x binding
  uint n;         // tokens
  uint heads;
  uint head_dim;  // even
  uint stride;    // floats between tokens' rows
  uint tokens_offset;  // words: token 0's seq in the tokens binding (then its pos)
  uint cache_offset;   // words: (seq 0, head 0, cell 0) in the cache binding
  uint cells;
  uint f16;    // 1: f16, 0: f32
  uint n_seq;  // sequences that fit in the cache binding
} p;

#include "fp16.glsl"

void main() {
  const uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  const uint e = group * 64u + gl_LocalInvocationID.x;
  const uint row_words = p.head_dim / 2u;  // pairs of elements
  if (e >= p.n * p.heads * row_words) return;
  const uint w = e % row_words;
  const uint th = e / row_words;  // t * heads + h
  const uint h = th % p.heads;
  const uint t = th / p.heads;
  const uint seq = tokens[p.tokens_offset + 2u * t];
  const uint pos = tokens[p.tokens_offset + 2u * t + 1u];
  if (seq >= p.n_seq || pos >= p.cells) return;
  const uint src = p.x_offset + t * p.stride + h * p.head_dim + 2u * w;
  const uint lo = x[src], hi = x[src + 1u];
  const uint cell = (seq * p.heads + h) * p.cells + pos;
  if (p.f16 != 0u) {
    cache[p.cache_offset + cell * row_words + w] = Fp32ToFp16(lo) | (Fp32ToFp16(hi) << 16);
  } else {
    const uint at = p.cache_offset + cell * p.head_dim + 2u * w;
    cache[at] = lo;
    cache[at + 1u] = hi;
  }
}
