#version 450
// x *= sigmoid(g), element by element (gpu/attention_ops.h SigmoidGateArgs): x[r * x_stride +
// i] *= 1 / (1 + exp(-g[r * g_stride + i])), the CPU's formula (engine/attention_gqa.cc, an
// attention output gate), within the device's exp and division precision.
//
// Groups: a 1-D grid of 64 elements a group (group index y * gl_NumWorkGroups.x + x; elements
// r * width + i in order), those past rows * width do nothing.

layout(local_size_x = 64) in;

layout(std430, binding = 0) buffer XBuffer { float x[]; };
layout(std430, binding = 1) readonly buffer GBuffer { float g[]; };

layout(push_constant) uniform Params {
  uint x_offset;  // floats: row 0 in the x binding
  uint g_offset;  // floats: row 0 in the g binding
  uint rows;
  uint width;
  uint x_stride;  // floats between rows of x
  uint g_stride;  // floats between rows of g
} p;

void main() {
  const uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  const uint e = group * 64u + gl_LocalInvocationID.x;
  if (e >= p.rows * p.width) return;
  const uint r = e / p.width;
  const uint i = e - r * p.width;
  const float s = 1.0 / (1.0 + exp(-g[p.g_offset + r * p.g_stride + i]));
  x[p.x_offset + r * p.x_stride + i] *= s;
}
