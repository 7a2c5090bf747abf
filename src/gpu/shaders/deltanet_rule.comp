#version 450
// Gated DeltaNet's recurrence per value head (gpu/deltanet_ops.h GatedDeltaArgs;
// engine/attention_deltanet.cc DeltaRule, kernels/delta_net.h). For each token of a sequence
// run, in order, on value head h (key head kh: h / (H_v / H_k) grouped, h % H_k tiled):
//   q, k = the key head's rows of the convolved [q | k | v], each / max(|.|, eps)
//   beta = sigmoid(b), decay = exp(softplus(a + dt[h]) * A[h])   (b, a from the ba rows)
//   per row j of the state M (M[j][i] = S[i][j]):
//     m = decay M[j];  d = (v[j] - m . k) beta;  M[j] = m + d k;  o[j] = (M[j] . q) scale
//   out = o * rsqrt(mean(o^2) + eps) * norm * silu(z)     (the head's S_v outputs)
// M is read from the run's source copy for its first token (zeros without one), then
// updated in the next copy in place; after the token at checkpoint_at it is copied to the
// checkpoint copy. A row's float ops are the scalar kernel's (`precise`: no fused
// multiply-add, sums in index order); the norms' sums are a 64-thread tree, and exp, log
// and the divisions are the device's. A token's ops depend only on S and its own inputs.
//
// Groups: one a (run, value head), a 1-D grid (group index y * gl_NumWorkGroups.x + x;
// run = group / H_v); thread t owns the state rows t, t + 64, ...

layout(local_size_x = 64) in;

const uint MAX_S = 256u;  // deltanet_ops.cc kMaxHeadDim
const uint NONE = 0xFFFFFFFFu;

layout(std430, binding = 0) readonly buffer QkvBuffer { float qkv[]; };
layout(std430, binding = 1) readonly buffer BaBuffer { float ba[]; };
layout(std430, binding = 2) readonly buffer ZBuffer { float z[]; };
layout(std430, binding = 3) readonly buffer ParamBuffer { float param[]; };
layout(std430, binding = 4) readonly buffer RunBuffer { uint runs[]; };
layout(std430, binding = 5) buffer StateBuffer { float state[]; };
layout(std430, binding = 6) writeonly buffer OutBuffer { float outs[]; };

layout(push_constant) uniform Params {
  uint qkv_offset;  // floats: token 0's [q | k | v] in the qkv binding
  uint qkv_stride;  // floats between tokens
  uint ba_offset;   // floats: token 0's 2 H_v values of b and a
  uint z_offset;    // floats: token 0's (H_v, S) gate
  uint out_offset;  // floats: token 0's (H_v, S) output
  uint n_k_heads;
  uint n_v_heads;
  uint dim;           // S: a head's key and value dims
  uint tiled;         // key head h % H_k (1) or h / (H_v / H_k) (0)
  uint separate;      // b at h and a at H_v + h (1), or ssm_ba's order per key head (0)
  uint dt_offset;     // floats in the param binding: (H_v) dt
  uint a_offset;      //   (H_v) A
  uint norm_offset;   //   (S) the output norm's weight
  uint runs_offset;   // words: run 0's record in the runs binding (as deltanet_conv.comp)
  uint order_offset;  // words: the tokens' rows grouped by run
  uint state_offset;  // floats: where the records' copy offsets count from
  uint heads_offset;  // floats: head 0's matrix from a copy's start (after its conv window)
  uint n_runs;
  float eps;          // the l2 norms' and the output norm's
  float scale;        // 1 / sqrt(S)
} p;

shared float sq[MAX_S];
shared float sk[MAX_S];
shared float partial_q[64];
shared float partial_k[64];

float Sigmoid(float x) { return 1.0 / (1.0 + exp(-x)); }
float Softplus(float x) { return x > 20.0 ? x : log(1.0 + exp(x)); }

// The sum of the 64 threads' values in partial_q and partial_k (a tree; barriers inside).
void Reduce(uint t) {
  barrier();
  for (uint s = 32u; s > 0u; s >>= 1) {
    if (t < s) {
      partial_q[t] += partial_q[t + s];
      partial_k[t] += partial_k[t + s];
    }
    barrier();
  }
}

void main() {
  const uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  const uint H = p.n_v_heads, S = p.dim, K = p.n_k_heads * S;
  const uint run = group / H;
  const uint h = group - run * H;
  if (run >= p.n_runs) return;  // the whole group: no barrier is skipped by some threads only
  const uint t = gl_LocalInvocationID.x;
  const uint per_k = H / p.n_k_heads;
  const uint kh = p.tiled != 0u ? h % p.n_k_heads : h / per_k;
  const uint b_at = p.separate != 0u ? h : (h / per_k) * 2u * per_k + h % per_k;
  const uint a_at = p.separate != 0u ? H + h : b_at + per_k;
  const uint rec = p.runs_offset + run * 8u;
  const uint begin = runs[rec], end = runs[rec + 1u], source = runs[rec + 2u];
  const uint next = runs[rec + 3u], checkpoint = runs[rec + 4u], checkpoint_at = runs[rec + 5u];
  const uint head = h * S * S;
  const uint next_m = p.state_offset + next + p.heads_offset + head;
  for (uint r = begin; r < end; ++r) {
    const uint tok = runs[p.order_offset + r];
    const uint row = p.qkv_offset + tok * p.qkv_stride;
    // q and k of the key head, l2-normalised.
    float pq = 0.0, pk = 0.0;
    for (uint i = t; i < S; i += 64u) {
      const float qi = qkv[row + kh * S + i], ki = qkv[row + K + kh * S + i];
      sq[i] = qi;
      sk[i] = ki;
      pq += qi * qi;
      pk += ki * ki;
    }
    partial_q[t] = pq;
    partial_k[t] = pk;
    Reduce(t);
    const float q_scale = 1.0 / max(sqrt(partial_q[0]), p.eps);
    const float k_scale = 1.0 / max(sqrt(partial_k[0]), p.eps);
    for (uint i = t; i < S; i += 64u) {
      sq[i] *= q_scale;
      sk[i] *= k_scale;
    }
    barrier();
    const uint ba_row = p.ba_offset + tok * 2u * H;
    const float beta = Sigmoid(ba[ba_row + b_at]);
    const float decay = exp(Softplus(ba[ba_row + a_at] + param[p.dt_offset + h]) *
                            param[p.a_offset + h]);
    // Where this token's M comes from: the source copy (or zeros) for the run's first token.
    const bool from_next = r != begin;
    const bool zeros = !from_next && source == NONE;  // (in_m then stays inside the binding)
    const uint in_m =
        from_next || zeros ? next_m : p.state_offset + source + p.heads_offset + head;
    float o[MAX_S / 64u];
    float po = 0.0;
    for (uint j = t, n = 0u; j < S; j += 64u, ++n) {
      const uint in_row = in_m + j * S, out_row = next_m + j * S;
      precise float mk = 0.0;
      for (uint i = 0u; i < S; ++i) {
        precise float m = zeros ? 0.0 : decay * state[in_row + i];
        state[out_row + i] = m;
        mk += m * sk[i];
      }
      precise float d = (qkv[row + 2u * K + h * S + j] - mk) * beta;
      precise float mq = 0.0;
      for (uint i = 0u; i < S; ++i) {
        precise float m = state[out_row + i] + d * sk[i];
        state[out_row + i] = m;
        mq += m * sq[i];
      }
      o[n] = mq * p.scale;
      po += o[n] * o[n];
      if (r == checkpoint_at) {
        const uint cp_row = p.state_offset + checkpoint + p.heads_offset + head + j * S;
        for (uint i = 0u; i < S; ++i) state[cp_row + i] = state[out_row + i];
      }
    }
    // The head's output: RMS-normed, scaled by the norm's weight, gated by silu(z).
    partial_q[t] = po;
    partial_k[t] = 0.0;
    Reduce(t);
    const float o_scale = 1.0 / sqrt(partial_q[0] / float(S) + p.eps);
    const uint out_row = p.out_offset + tok * H * S + h * S;
    const uint z_row = p.z_offset + tok * H * S + h * S;
    for (uint j = t, n = 0u; j < S; j += 64u, ++n) {
      const float zj = z[z_row + j];
      precise float y = o[n] * o_scale * param[p.norm_offset + j];
      outs[out_row + j] = y * (zj / (1.0 + exp(-zj)));
    }
    barrier();  // every thread is past partial_q[0] and sq / sk before the next token's
  }
}
