#version 450
// RoPE in place (gpu/attention_ops.h RopeArgs), as kernels/ops.h RopeRotate: for token t, head
// h and pair i < n_rot / 2, with c = cs[i] and s = cs[n_rot / 2 + i] (cs: token t's n_rot
// angles as RopeAngles writes them),
//   x[a] = x0 c - x1 s,  x[b] = x0 s + x1 c     (x0 = x[a], x1 = x[b])
// where (a, b) = (2i, 2i + 1), or (i, i + n_rot / 2) for neox; dims from n_rot on are left as
// they are. `precise`: two products and a sum each, never fused, as the CPU computes them
// (the same bits wherever the device rounds as IEEE does).
//
// Groups: a 1-D grid of 64 pairs a group (group index y * gl_NumWorkGroups.x + x; pairs
// (t, h, i) in order), those past n * heads * n_rot / 2 do nothing.

layout(local_size_x = 64) in;

layout(std430, binding = 0) buffer XBuffer { float x[]; };
layout(std430, binding = 1) readonly buffer CosSinBuffer { float cs[]; };

layout(push_constant) uniform Params {
  uint x_offset;  // floats: token 0's row in the x binding
  uint n;         // tokens
  uint heads;
  uint head_dim;
  uint stride;  // floats between tokens' rows
  uint n_rot;   // even
  uint neox;    // 1: pairs (i, i + n_rot / 2); 0: (2i, 2i + 1)
  uint cs_offset;  // floats: token 0's angles in the cos_sin binding
} p;

void main() {
  const uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  const uint e = group * 64u + gl_LocalInvocationID.x;
  const uint half_rot = p.n_rot / 2u;
  if (e >= p.n * p.heads * half_rot) return;
  const uint i = e % half_rot;
  const uint th = e / half_rot;  // t * heads + h
  const uint h = th % p.heads;
  const uint t = th / p.heads;
  const uint row = p.x_offset + t * p.stride + h * p.head_dim;
  const uint a = row + (p.neox != 0u ? i : 2u * i);
  const uint b = row + (p.neox != 0u ? i + half_rot : 2u * i + 1u);
  const float c = cs[p.cs_offset + t * p.n_rot + i];
  const float s = cs[p.cs_offset + t * p.n_rot + half_rot + i];
  const float x0 = x[a], x1 = x[b];
  precise float y0 = x0 * c - x1 * s;
  precise float y1 = x0 * s + x1 * c;
  x[a] = y0;
  x[b] = y1;
}
