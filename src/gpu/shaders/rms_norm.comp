#version 450
// RMS norm, row by row (gpu/attention_ops.h RmsNormArgs; kernels/ops.h RmsNorm):
//   scale = 1 / sqrt(sum_i x[i]^2 / dim + eps),  y[i] = x[i] * scale * w[i]
// in f32: thread t sums the squares of x[t], x[t + 64], ... in order, then a shared-memory
// tree adds the 64 partial sums (the CPU sums in double: the two agree within float
// rounding). A row's float ops depend only on dim. y may be x: a thread writes only the
// elements it read, after the sum.
//
// Groups: one a row, a 1-D grid (group index y * gl_NumWorkGroups.x + x).

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer XBuffer { float x[]; };
layout(std430, binding = 1) writeonly buffer YBuffer { float y[]; };
layout(std430, binding = 2) readonly buffer WeightBuffer { float w[]; };

layout(push_constant) uniform Params {
  uint x_offset;  // floats: row 0 in the x binding
  uint y_offset;  // floats: row 0 in the y binding
  uint rows;
  uint dim;
  uint stride;         // floats between rows (x's and y's)
  uint weight_offset;  // floats: w[0] in the weight binding
  uint has_weight;     // 0: w = 1 (the weight binding is not read)
  float eps;
} p;

shared float partial[64];

void main() {
  const uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  if (row >= p.rows) return;  // the whole group: no barrier is skipped by some threads only
  const uint t = gl_LocalInvocationID.x;
  const uint xr = p.x_offset + row * p.stride;
  float sum = 0.0;
  for (uint i = t; i < p.dim; i += 64u) sum += x[xr + i] * x[xr + i];
  partial[t] = sum;
  barrier();
  for (uint s = 32u; s > 0u; s >>= 1) {
    if (t < s) partial[t] += partial[t + s];
    barrier();
  }
  const float scale = 1.0 / sqrt(partial[0] / float(p.dim) + p.eps);
  const uint yr = p.y_offset + row * p.stride;
  for (uint i = t; i < p.dim; i += 64u) {
    precise float v = x[xr + i] * scale;
    if (p.has_weight != 0u) v *= w[p.weight_offset + i];
    y[yr + i] = v;
  }
}
