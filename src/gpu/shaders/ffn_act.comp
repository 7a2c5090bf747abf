#version 450
// The gated activation of a routed expert, over its tokens' gate and up projections:
// h = act(gate + gate_bias, up + up_bias), written over gate. act is SwiGLU (silu(g) * u) or
// gpt-oss's clamped form (ggml_swiglu_oai: g = min(g, 7), u = clamp(u, -7, 7),
// g * sigmoid(1.702 g) * (u + 1)), as kernels/ops.h computes them on the CPU.
//
// Groups: x runs over the n_ff columns (64 a group), y over the tokens.

layout(local_size_x = 64) in;

layout(std430, binding = 0) buffer HiddenBuffer { float h[]; };         // gate and up rows
layout(std430, binding = 1) readonly buffer BiasBuffer { float bias[]; };  // unused without

layout(push_constant) uniform Params {
  uint n_ff;              // columns
  uint m;                 // tokens
  uint gate_offset;       // floats: gate[0, 0] in the hidden binding (the output too)
  uint up_offset;         // floats: up[0, 0]
  uint stride;            // floats between tokens' rows
  uint activation;        // 0: SwiGLU, 1: gpt-oss's clamped SwiGLU
  uint has_bias;          // 1: add the biases below first
  uint gate_bias_offset;  // floats: the expert's gate bias (n_ff) in the bias binding
  uint up_bias_offset;    // floats: its up bias (n_ff)
} p;

void main() {
  const uint i = gl_GlobalInvocationID.x;
  const uint t = gl_WorkGroupID.y;
  if (i >= p.n_ff || t >= p.m) return;
  const uint gi = p.gate_offset + t * p.stride + i;
  float g = h[gi];
  float u = h[p.up_offset + t * p.stride + i];
  if (p.has_bias != 0u) {
    g += bias[p.gate_bias_offset + i];
    u += bias[p.up_bias_offset + i];
  }
  if (p.activation == 1u) {
    g = min(g, 7.0);
    u = clamp(u, -7.0, 7.0);
    h[gi] = g / (1.0 + exp(-1.702 * g)) * (u + 1.0);
  } else {
    h[gi] = g / (1.0 + exp(-g)) * u;
  }
}
