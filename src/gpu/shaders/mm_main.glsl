// The second half of every matrix-multiply shader (see mm_head.glsl).
//
// One workgroup computes WG / row_threads rows of W against up to TOKENS rows of X: each row's
// row_threads threads take the row's chunks in turn (lane l: chunks l, l + row_threads, ...),
// dequantize each chunk once, and add its dot product with every token's X to an f32 partial
// sum per token; a shared-memory tree then adds the row's partial sums. row_threads depends on
// k alone (the host: the chunks a row has, rounded up to a power of 2, from TOKENS to WG), so
// a short row does not leave most of a workgroup idle, and a token's sums never depend on the
// batch. Groups: (x, y) number the runs of rows (group = y * count_x + x), z the runs of TOKENS
// tokens of head 0, then those of head 1, ... (a head: W, X and Y shifted by its strides).
#define WG 64
#define TOKENS 8

layout(local_size_x = WG) in;

shared float partial[TOKENS][WG];

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint lane = tid & (p.row_threads - 1u);
  const uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  const uint row = group * (WG / p.row_threads) + tid / p.row_threads;
  const bool live = row < p.m;  // the others still take part in the barriers
  const uint token_groups = (p.n + TOKENS - 1u) / TOKENS;
  const uint head = gl_WorkGroupID.z / token_groups;
  const uint t0 = (gl_WorkGroupID.z - head * token_groups) * TOKENS;
  const uint n_tokens = min(uint(TOKENS), p.n - t0);
  const uint chunks_per_block = BLOCK_SIZE / CHUNK;
  const uint n_chunks = live ? p.k / BLOCK_SIZE * chunks_per_block : 0u;
  const uint row_base = p.w_offset + head * p.w_head_bytes + row * p.row_bytes;
  const uint x_base = p.x_offset + head * p.x_head;
  const uint y_base = p.y_offset + head * p.y_head;

  float acc[TOKENS];
  for (uint t = 0; t < TOKENS; ++t) acc[t] = 0.0;
  for (uint c = lane; c < n_chunks; c += p.row_threads) {
    const uint block = c / chunks_per_block;
    const uint sub = c - block * chunks_per_block;
    float v[CHUNK];
    DequantChunk(row_base + block * BLOCK_BYTES, sub, v);
    const uint e0 = block * BLOCK_SIZE + sub * CHUNK;  // element of v[0] in the row
    for (uint t = 0; t < TOKENS; ++t) {
      if (t < n_tokens) {
        const uint xb = x_base + (t0 + t) * p.x_stride + e0;
        float s = 0.0;
        for (uint i = 0; i < CHUNK; ++i) s += v[i] * x[xb + i];
        acc[t] += s;
      }
    }
  }
  for (uint t = 0; t < TOKENS; ++t) partial[t][tid] = acc[t];
  barrier();
  for (uint half_rt = p.row_threads / 2; half_rt > 0; half_rt >>= 1) {
    if (lane < half_rt) {
      for (uint t = 0; t < TOKENS; ++t) partial[t][tid] += partial[t][tid + half_rt];
    }
    barrier();
  }
  if (live && lane < n_tokens) y[y_base + (t0 + lane) * p.y_stride + row] = partial[lane][tid - lane];
}
