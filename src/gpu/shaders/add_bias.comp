#version 450
// rows += bias (gpu/attention_ops.h AddBiasArgs): x[r * stride + i] += bias[i] for i < width,
// one float add an element, as the CPU's bias add.
//
// Groups: a 1-D grid of 64 elements a group (group index y * gl_NumWorkGroups.x + x; elements
// r * width + i in order), those past rows * width do nothing.

layout(local_size_x = 64) in;

layout(std430, binding = 0) buffer XBuffer { float x[]; };
layout(std430, binding = 1) readonly buffer BiasBuffer { float bias[]; };

layout(push_constant) uniform Params {
  uint x_offset;     // floats: row 0 in the x binding
  uint rows;
  uint width;
  uint stride;       // floats between rows
  uint bias_offset;  // floats: bias[0] in the bias binding
} p;

void main() {
  const uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  const uint e = group * 64u + gl_LocalInvocationID.x;
  if (e >= p.rows * p.width) return;
  const uint r = e / p.width;
  const uint i = e - r * p.width;
  x[p.x_offset + r * p.stride + i] += bias[p.bias_offset + i];
}
