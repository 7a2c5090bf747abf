#version 450
// Gated DeltaNet's short causal convolution, then SiLU (gpu/deltanet_ops.h DeltaConvArgs;
// engine/attention_deltanet.cc Convolve): per sequence run and channel c, its tokens in order,
// the window the channel's last W = d_conv - 1 inputs (from a state copy for the run's first
// token, or zeros):
//   sum = window[0] w[c][0] + ... + window[W-1] w[c][W-1] + x w[c][W]   (oldest first)
//   window <- window[1..W-1], x;   x <- sum / (1 + exp(-sum))
// in place. The window after the run goes to the `next` copy, and after the token at
// checkpoint_at also to the checkpoint copy. The sum is the CPU's float op sequence
// (`precise`: no fused multiply-add), so only exp differs.
//
// Groups: a 1-D grid of 64 (run, channel) items a group (group index y * gl_NumWorkGroups.x +
// x; item run * channels + c), those past n_runs * channels do nothing.

layout(local_size_x = 64) in;

const uint MAX_W = 8u;      // d_conv - 1 at most (deltanet_ops.cc kMaxConvWindow)
const uint NONE = 0xFFFFFFFFu;

layout(std430, binding = 0) buffer XBuffer { float x[]; };            // the rows, in place
layout(std430, binding = 1) readonly buffer WBuffer { float w[]; };   // (channels, d_conv)
layout(std430, binding = 2) readonly buffer RunBuffer { uint runs[]; };  // runs, then order
layout(std430, binding = 3) buffer StateBuffer { float state[]; };   // the layer's copies

layout(push_constant) uniform Params {
  uint x_offset;  // floats: token 0's channel 0 in the x binding
  uint stride;    // floats between tokens' rows
  uint channels;
  uint d_conv;
  uint w_offset;      // floats: w[0][0] in the w binding
  uint runs_offset;   // words: run 0's record (8 words a run: begin, end, source, next,
                      // checkpoint, checkpoint_at) in the runs binding
  uint n_runs;
  uint order_offset;  // words: the tokens' rows, grouped by run, in the runs binding
  uint state_offset;  // floats: where the records' copy offsets count from
} p;

void main() {
  const uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  const uint item = group * 64u + gl_LocalInvocationID.x;
  if (item >= p.n_runs * p.channels) return;
  const uint run = item / p.channels;
  const uint c = item - run * p.channels;
  const uint rec = p.runs_offset + run * 8u;
  const uint begin = runs[rec], end = runs[rec + 1u], source = runs[rec + 2u];
  const uint next = runs[rec + 3u], checkpoint = runs[rec + 4u], checkpoint_at = runs[rec + 5u];
  const uint W = p.d_conv - 1u;
  const uint wc = p.w_offset + c * p.d_conv;
  float window[MAX_W];
  for (uint i = 0u; i < W; ++i) {
    window[i] = source == NONE ? 0.0 : state[p.state_offset + source + c * W + i];
  }
  for (uint r = begin; r < end; ++r) {
    const uint xi = p.x_offset + runs[p.order_offset + r] * p.stride + c;
    const float v = x[xi];
    precise float sum = 0.0;
    for (uint i = 0u; i < W; ++i) sum += window[i] * w[wc + i];
    sum += v * w[wc + W];
    for (uint i = 0u; i + 1u < W; ++i) window[i] = window[i + 1u];
    if (W > 0u) window[W - 1u] = v;
    x[xi] = sum / (1.0 + exp(-sum));
    if (r == checkpoint_at) {
      for (uint i = 0u; i < W; ++i) state[p.state_offset + checkpoint + c * W + i] = window[i];
    }
  }
  for (uint i = 0u; i < W; ++i) state[p.state_offset + next + c * W + i] = window[i];
}
