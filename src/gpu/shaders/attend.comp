#version 450
// Causal attention of one query head of one token over a device KV cache (gpu/attention_ops.h
// AttendArgs), as kernels/attention.h defines it:
//   s_j = scale * sum_i q[i] K[j][i]      for the positions j in [first, pos] of seq(t)
//   out = sum_j e^(s_j) V[j] / (sum_j e^(s_j) + e^z)      (z: the head's sink; none: no term)
// with first = pos + 1 - window past a sliding window (0 otherwise), and the cache laid out
// (n_seq, n_head_kv, cells, d) as f16 (two halves a word), f32 or q8_0 (34-byte blocks of 32,
// rows on any byte: x = d c, exact in f32); V's cells may be longer than d_v (v_row elements
// apart: MLA's V is the first d_v values of K's rows). With a q8_0 K the query is rounded to
// q8_0 blocks first (q8_0.glsl: the CPU's q', kernels/attention.h) and each block's code
// products are summed in integers (exact): s_j = scale * sum_b (dq_b dk_b) isum_b.
//
// One workgroup of 64 threads a (token, head); positions go in tiles of 64 with an online
// softmax: thread j computes the score of the tile's position j (a dot over d_k in order), a
// shared-memory tree takes the tile's maximum; if it is above the running maximum M, the
// running sum L and the output are first multiplied by e^(M - tile max). Then p_j = e^(s_j -
// M), a tree adds them to L, and thread t accumulates sum_j p_j V[j][d] for its dims d = 2w,
// 2w + 1 (w = t, t + 64, ...), position by position. A sink starts the running state at
// M = z, L = 1 (its own term e^(z - M)); without one at M = -inf, L = 0. At the end
// out = acc / L. e^x for x < -87.3 (below 2^-126) counts as 0, as on the CPU, so an
// argument of -inf gives 0, never NaN. Each (token, head)'s float ops depend only on its
// n_pos, d_k and d_v.
//
// A token whose slot is outside the cache (pos >= cells, or seq >= n_seq) gets zeros.
//
// Groups: one a (token, head), a 1-D grid (group index y * gl_NumWorkGroups.x + x; t * n_head
// + h).

layout(local_size_x = 64) in;

#define MAX_DK 576  // AttentionOps's kMaxDk: DeepSeek's MLA (a 512 latent + 64 rope dims)
#define MAX_DV 512  // kMaxDv
#define PAIRS (MAX_DV / 128)  // output pairs a thread owns at most

layout(std430, binding = 0) readonly buffer QBuffer { float q[]; };
layout(std430, binding = 1) writeonly buffer OutBuffer { float o[]; };
layout(std430, binding = 2) readonly buffer TokenBuffer { uint tokens[]; };
layout(std430, binding = 3) readonly buffer KBuffer { uint kc[]; };
layout(std430, binding = 4) readonly buffer VBuffer { uint vc[]; };
layout(std430, binding = 5) readonly buffer SinkBuffer { float sinks[]; };  // unused without

layout(push_constant) uniform Params {
  uint q_offset;    // floats: token 0's queries in the q binding
  uint q_stride;    // floats between tokens
  uint out_offset;  // floats: token 0's outputs in the out binding
  uint out_stride;  // floats between tokens
  uint n;           // tokens
  uint n_head;
  uint n_head_kv;  // divides n_head
  uint d_k;        // even, <= MAX_DK
  uint d_v;        // even, <= MAX_DV
  uint tokens_offset;  // words: token 0's seq in the tokens binding (then its pos)
  uint k_offset;       // words: (seq 0, head 0, cell 0) in the K binding
  uint v_offset;       // words: the same in the V binding
  uint cells;
  uint k_type;  // gpu::KvElem: 0 f16, 1 f32, 2 q8_0
  uint v_type;
  uint n_seq;  // sequences that fit in both cache bindings
  float scale;
  uint window;  // 0: none
  uint has_sinks;
  uint sinks_offset;  // floats: head 0's sink logit in the sinks binding
  uint v_row;         // elements between V's consecutive cells (MLA: K's rows, d_v their start)
} p;

#include "fp16.glsl"
#include "q8_0.glsl"

shared float q_s[MAX_DK];
shared int qc_s[MAX_DK];         // a q8_0 K's: the query's codes
shared float qd_s[MAX_DK / 32];  // and its blocks' scales
shared float p_s[64];  // the tile's weights
shared float red[64];  // the tree's partial maxima and sums

float Exp(float x) { return x < -87.3 ? 0.0 : exp(x); }

// q8_0: the int8 code at byte `at` of K's binding, and the f16 scale at an even byte of K's or
// V's.
int KCode(uint at) { return int(kc[at >> 2] << (24u - 8u * (at & 3u))) >> 24; }
float KHalf(uint at) { return unpackHalf2x16(kc[at >> 2] >> (8u * (at & 3u))).x; }
float VHalf(uint at) { return unpackHalf2x16(vc[at >> 2] >> (8u * (at & 3u))).x; }

// q . K[row] in order of i, the row starting at word `at` of the K binding (q8_0: byte `at`).
float KDot(uint at) {
  float dot = 0.0;
  if (p.k_type == 2u) {
    for (uint b = 0u; b < p.d_k / 32u; ++b) {
      const uint block = at + 34u * b;
      int isum = 0;
      for (uint i = 0u; i < 32u; ++i) isum += qc_s[32u * b + i] * KCode(block + 2u + i);
      dot += (qd_s[b] * KHalf(block)) * float(isum);
    }
  } else if (p.k_type == 0u) {
    for (uint i = 0u; i < p.d_k / 2u; ++i) {
      const vec2 k = unpackHalf2x16(kc[at + i]);
      dot += q_s[2u * i] * k.x;
      dot += q_s[2u * i + 1u] * k.y;
    }
  } else {
    for (uint i = 0u; i < p.d_k; ++i) dot += q_s[i] * uintBitsToFloat(kc[at + i]);
  }
  return dot;
}

void main() {
  const uint g = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  if (g >= p.n * p.n_head) return;  // the whole group
  const uint tid = gl_LocalInvocationID.x;
  const uint t = g / p.n_head, h = g % p.n_head;
  const uint seq = tokens[p.tokens_offset + 2u * t];
  const uint pos = tokens[p.tokens_offset + 2u * t + 1u];
  const uint ob = p.out_offset + t * p.out_stride + h * p.d_v;
  if (seq >= p.n_seq || pos >= p.cells) {  // the whole group
    for (uint d = tid; d < p.d_v; d += 64u) o[ob + d] = 0.0;
    return;
  }
  const uint kvh = h / (p.n_head / p.n_head_kv);
  const uint first = p.window != 0u && pos + 1u > p.window ? pos + 1u - p.window : 0u;
  const uint n_pos = pos + 1u - first;
  // Words a position, or bytes for q8_0 (whose positions are addressed in bytes).
  const uint k_row = p.k_type == 0u ? p.d_k / 2u : p.k_type == 1u ? p.d_k : p.d_k / 32u * 34u;
  const uint v_row = p.v_type == 0u ? p.v_row / 2u : p.v_type == 1u ? p.v_row : p.v_row / 32u * 34u;
  const uint cell0 = (seq * p.n_head_kv + kvh) * p.cells + first;
  const uint k_base = (p.k_type == 2u ? 4u * p.k_offset : p.k_offset) + cell0 * k_row;
  const uint v_base = (p.v_type == 2u ? 4u * p.v_offset : p.v_offset) + cell0 * v_row;

  const uint qb = p.q_offset + t * p.q_stride + h * p.d_k;
  for (uint i = tid; i < p.d_k; i += 64u) q_s[i] = q[qb + i];
  barrier();
  if (p.k_type == 2u && tid < p.d_k / 32u) {  // q rounded to q8_0, a block a thread
    uint amax = 0u;
    bool non_finite = false;
    for (uint i = 0u; i < 32u; ++i) Q8Amax(floatBitsToUint(q_s[32u * tid + i]), amax, non_finite);
    uint d16;
    float id;
    Q8Scale(amax, non_finite, d16, id);
    qd_s[tid] = unpackHalf2x16(d16).x;
    for (uint i = 0u; i < 32u; ++i) {
      qc_s[32u * tid + i] = Q8Code(floatBitsToUint(q_s[32u * tid + i]), id);
    }
  }
  barrier();

  const float neg_inf = uintBitsToFloat(0xFF800000u);
  float m = p.has_sinks != 0u ? sinks[p.sinks_offset + h] : neg_inf;  // running maximum
  float l = p.has_sinks != 0u ? 1.0 : 0.0;                              // running sum
  vec2 acc[PAIRS];
  for (uint k = 0u; k < PAIRS; ++k) acc[k] = vec2(0.0);

  for (uint base = 0u; base < n_pos; base += 64u) {
    const uint j = base + tid;
    const float s = j < n_pos ? p.scale * KDot(k_base + j * k_row) : neg_inf;
    red[tid] = s;
    barrier();
    for (uint w = 32u; w > 0u; w >>= 1) {
      if (tid < w) red[tid] = max(red[tid], red[tid + w]);
      barrier();
    }
    const float tile_max = red[0];
    if (tile_max > m) {
      const float c = Exp(m - tile_max);  // 0 for the first tile without a sink
      l *= c;
      for (uint k = 0u; k < PAIRS; ++k) acc[k] *= c;
      m = tile_max;
    }
    const float pj = j < n_pos ? Exp(s - m) : 0.0;
    p_s[tid] = pj;
    barrier();  // every thread has read red[0]
    red[tid] = pj;
    barrier();
    for (uint w = 32u; w > 0u; w >>= 1) {
      if (tid < w) red[tid] += red[tid + w];
      barrier();
    }
    l += red[0];
    const uint tile_n = min(64u, n_pos - base);
    for (uint jj = 0u; jj < tile_n; ++jj) {
      const float pw = p_s[jj];
      const uint at = v_base + (base + jj) * v_row;
      for (uint k = 0u; k < PAIRS; ++k) {
        const uint w = tid + 64u * k;  // the pair of dims 2w, 2w + 1
        if (2u * w >= p.d_v) break;
        vec2 v;
        if (p.v_type == 0u) {
          v = unpackHalf2x16(vc[at + w]);
        } else if (p.v_type == 1u) {
          v = vec2(uintBitsToFloat(vc[at + 2u * w]), uintBitsToFloat(vc[at + 2u * w + 1u]));
        } else {  // elements 2w, 2w + 1 of a q8_0 block: two bytes of one word
          const uint block = at + 34u * (w / 16u);
          const uint c = block + 2u + 2u * (w % 16u);
          const uint word = vc[c >> 2] >> (8u * (c & 3u));
          v = VHalf(block) * vec2(float(int(word << 24) >> 24), float(int(word << 16) >> 24));
        }
        acc[k] += pw * v;
      }
    }
    barrier();  // before the next tile writes red and p_s
  }
  for (uint k = 0u; k < PAIRS; ++k) {
    const uint w = tid + 64u * k;
    if (2u * w >= p.d_v) break;
    o[ob + 2u * w] = acc[k].x / l;
    o[ob + 2u * w + 1u] = acc[k].y / l;
  }
}
