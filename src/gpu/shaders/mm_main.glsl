// The second half of every matrix-multiply shader (see mm_head.glsl).
//
// One workgroup computes one row of W against up to TOKENS rows of X: its WG threads take the
// row's chunks in turn (thread t: chunks t, t + WG, ...), dequantize each chunk once, and
// add its dot product with every token's X to an f32 partial sum per token; a shared-memory
// tree then adds the WG partial sums. Groups: (x, y) numbers the rows (row = y * count_x + x),
// z the runs of TOKENS tokens.
#define WG 64
#define TOKENS 8

layout(local_size_x = WG) in;

shared float partial[TOKENS][WG];

void main() {
  const uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  if (row >= p.m) return;  // the whole workgroup, before any barrier
  const uint tid = gl_LocalInvocationID.x;
  const uint t0 = gl_WorkGroupID.z * TOKENS;
  const uint n_tokens = min(uint(TOKENS), p.n - t0);
  const uint chunks_per_block = BLOCK_SIZE / CHUNK;
  const uint n_chunks = p.k / BLOCK_SIZE * chunks_per_block;
  const uint row_base = p.w_offset + row * p.row_bytes;

  float acc[TOKENS];
  for (uint t = 0; t < TOKENS; ++t) acc[t] = 0.0;
  for (uint c = tid; c < n_chunks; c += WG) {
    const uint block = c / chunks_per_block;
    const uint sub = c - block * chunks_per_block;
    float v[CHUNK];
    DequantChunk(row_base + block * BLOCK_BYTES, sub, v);
    const uint e0 = block * BLOCK_SIZE + sub * CHUNK;  // element of v[0] in the row
    for (uint t = 0; t < TOKENS; ++t) {
      if (t < n_tokens) {
        const uint xb = p.x_offset + (t0 + t) * p.x_stride + e0;
        float s = 0.0;
        for (uint i = 0; i < CHUNK; ++i) s += v[i] * x[xb + i];
        acc[t] += s;
      }
    }
  }
  for (uint t = 0; t < TOKENS; ++t) partial[t][tid] = acc[t];
  barrier();
  for (uint half_wg = WG / 2; half_wg > 0; half_wg >>= 1) {
    if (tid < half_wg) {
      for (uint t = 0; t < TOKENS; ++t) partial[t][tid] += partial[t][tid + half_wg];
    }
    barrier();
  }
  if (tid < n_tokens) y[p.y_offset + (t0 + tid) * p.y_stride + row] = partial[tid][0];
}
