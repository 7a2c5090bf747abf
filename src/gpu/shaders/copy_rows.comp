#version 450
// y[r * y_stride + i] = x[r * x_stride + i] (gpu/attention_ops.h CopyRowsArgs), the same bits.
//
// Groups: a 1-D grid of 64 elements a group (group index y * gl_NumWorkGroups.x + x; elements
// r * width + i in order), those past rows * width do nothing.

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer XBuffer { float x[]; };
layout(std430, binding = 1) writeonly buffer YBuffer { float y[]; };

layout(push_constant) uniform Params {
  uint x_offset;  // floats: row 0 in the x binding
  uint y_offset;  // floats: row 0 in the y binding
  uint rows;
  uint width;
  uint x_stride;  // floats between rows of x
  uint y_stride;  // floats between rows of y
} p;

void main() {
  const uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  const uint e = group * 64u + gl_LocalInvocationID.x;
  if (e >= p.rows * p.width) return;
  const uint r = e / p.width;
  const uint i = e - r * p.width;
  y[p.y_offset + r * p.y_stride + i] = x[p.x_offset + r * p.x_stride + i];
}
