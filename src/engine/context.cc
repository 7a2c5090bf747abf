// The forward pass: embeddings -> per layer (attention, MoE) -> output norm -> logits.
// Every buffer is sized in Create; Eval allocates nothing but the caller's logits.
#include "engine/context.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/thread_pool.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "quant/dequant.h"
#include "quant/float16.h"

namespace mt {

struct Context::Impl {
  Impl(const Model& m, uint32_t n_ctx, const ContextOptions& o);

  // Runs the batch at positions pos0...; writes logits of tokens [first_logit, n) to
  // `logits` (n_vocab each), or none when first_logit == n.
  void Forward(std::span<const int32_t> tokens, uint32_t pos0, int first_logit, float* logits);
  void Attention(int il, int n, uint32_t pos0);
  void MoE(int il, int n);
  void SharedExpert(int il, int n);
  // Y (n rows) = X (n rows) * W^T, rows of W split across threads.
  void MatMul(const WeightMatrix& w, const float* x, int64_t x_stride, int n, float* y,
              int64_t y_stride);

  const Model& model;
  const HParams& hp;
  const ArchDef& arch;
  const uint32_t n_ctx;
  const uint32_t n_batch;
  const KvType kv_type;
  ThreadPool pool;

  // Activations, one row per token of the batch.
  std::vector<float> x;        // (n_batch, n_embd) residual stream
  std::vector<float> xn;       // (n_batch, n_embd) normed input of a block
  std::vector<float> q;        // (n_batch, n_head * head_dim_k)
  std::vector<float> k;        // (n_batch, n_head_kv * head_dim_k)
  std::vector<float> v;        // (n_batch, n_head_kv * head_dim_v)
  std::vector<float> attn;     // (n_batch, n_head * head_dim_v) attention output per head
  std::vector<float> scores;   // (n_threads, n_ctx) attention probabilities scratch
  std::vector<float> probs;    // (n_batch, n_expert) router probabilities
  std::vector<int32_t> topk_id;    // (n_batch, n_expert_used) chosen experts, best first
  std::vector<float> topk_weight;  // (n_batch, n_expert_used) their weights
  std::vector<int32_t> expert_rows;  // (n_batch * n_expert_used) (token * k + slot) grouped by expert
  std::vector<int32_t> expert_count;  // (n_expert) tokens routed to each expert
  std::vector<float> ex_in;    // (n_batch, n_embd) gathered inputs of one expert
  std::vector<float> ex_gate;  // (n_batch, n_ff_exp) gate projection, then SwiGLU output
  std::vector<float> ex_up;    // (n_batch, n_ff_exp) up projection
  std::vector<float> ex_out;   // (n_batch, n_embd) one expert's outputs
  std::vector<float> slot_out;  // (n_batch, n_expert_used, n_embd) weighted expert outputs
  std::vector<float> sh_gate;  // (n_batch, n_ff_shexp) shared expert
  std::vector<float> sh_up;    // (n_batch, n_ff_shexp)
  std::vector<float> ffn_out;  // (n_batch, n_embd)
  // KV cache, per layer, position-major: (n_ctx, n_head_kv * head_dim).
  std::vector<std::vector<float>> k_cache_f32, v_cache_f32;
  std::vector<std::vector<uint16_t>> k_cache_f16, v_cache_f16;
};

Context::Impl::Impl(const Model& m, uint32_t n_ctx_, const ContextOptions& o)
    : model(m),
      hp(m.hparams()),
      arch(m.arch()),
      n_ctx(n_ctx_),
      n_batch(std::min(std::max(o.n_batch, 1u), n_ctx_)),
      kv_type(o.kv_type),
      pool(o.n_threads) {
  const size_t B = n_batch, K = hp.n_expert_used;
  x.resize(B * hp.n_embd);
  xn.resize(B * hp.n_embd);
  q.resize(B * hp.n_embd_q());
  k.resize(B * hp.n_embd_k_gqa());
  v.resize(B * hp.n_embd_v_gqa());
  attn.resize(B * hp.n_head * hp.head_dim_v);
  scores.resize(static_cast<size_t>(pool.size()) * n_ctx);
  probs.resize(B * hp.n_expert);
  topk_id.resize(B * K);
  topk_weight.resize(B * K);
  expert_rows.resize(B * K);
  expert_count.resize(hp.n_expert);
  ex_in.resize(B * hp.n_embd);
  ex_gate.resize(B * hp.n_ff_exp);
  ex_up.resize(B * hp.n_ff_exp);
  ex_out.resize(B * hp.n_embd);
  slot_out.resize(B * K * hp.n_embd);
  sh_gate.resize(B * hp.n_ff_shexp);
  sh_up.resize(B * hp.n_ff_shexp);
  ffn_out.resize(B * hp.n_embd);
  const size_t kv_k = size_t{n_ctx} * hp.n_embd_k_gqa(), kv_v = size_t{n_ctx} * hp.n_embd_v_gqa();
  if (kv_type == KvType::kF32) {
    k_cache_f32.assign(hp.n_layer, std::vector<float>(kv_k));
    v_cache_f32.assign(hp.n_layer, std::vector<float>(kv_v));
  } else {
    k_cache_f16.assign(hp.n_layer, std::vector<uint16_t>(kv_k));
    v_cache_f16.assign(hp.n_layer, std::vector<uint16_t>(kv_v));
  }
}

void Context::Impl::MatMul(const WeightMatrix& w, const float* xin, int64_t x_stride, int n,
                           float* y, int64_t y_stride) {
  pool.ParallelFor(
      w.rows,
      [&](int64_t r0, int64_t r1, int) { MatMulRows(w, xin, x_stride, n, y, y_stride, r0, r1); },
      16);
}

void Context::Impl::Attention(int il, int n, uint32_t pos0) {
  const int n_head = static_cast<int>(hp.n_head), n_kv = static_cast<int>(hp.n_head_kv);
  const int dk = static_cast<int>(hp.head_dim_k), dv = static_cast<int>(hp.head_dim_v);
  const int group = n_head / n_kv;
  const int64_t k_stride = hp.n_embd_k_gqa(), v_stride = hp.n_embd_v_gqa();
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  const bool f16 = kv_type == KvType::kF16;
  pool.ParallelFor(int64_t{n} * n_head, [&](int64_t begin, int64_t end, int thread) {
    float* p = scores.data() + static_cast<size_t>(thread) * n_ctx;
    std::vector<float> key(dk), val(dv);  // small; reused across the range
    for (int64_t item = begin; item < end; ++item) {
      const int t = static_cast<int>(item / n_head), h = static_cast<int>(item % n_head);
      const int kvh = h / group;
      const uint32_t n_pos = pos0 + t + 1;  // causal: positions 0..pos0+t
      const float* qh = q.data() + int64_t{t} * hp.n_embd_q() + int64_t{h} * dk;
      for (uint32_t j = 0; j < n_pos; ++j) {
        const float* kj;
        if (f16) {
          const uint16_t* src = k_cache_f16[il].data() + j * k_stride + int64_t{kvh} * dk;
          for (int d = 0; d < dk; ++d) key[d] = Fp16ToFp32(src[d]);
          kj = key.data();
        } else {
          kj = k_cache_f32[il].data() + j * k_stride + int64_t{kvh} * dk;
        }
        p[j] = DotF32(qh, kj, dk) * scale;
      }
      SoftmaxInPlace(p, n_pos);
      float* out = attn.data() + int64_t{t} * n_head * dv + int64_t{h} * dv;
      std::fill(out, out + dv, 0.0f);
      for (uint32_t j = 0; j < n_pos; ++j) {
        if (f16) {
          const uint16_t* src = v_cache_f16[il].data() + j * v_stride + int64_t{kvh} * dv;
          for (int d = 0; d < dv; ++d) out[d] += p[j] * Fp16ToFp32(src[d]);
        } else {
          const float* src = v_cache_f32[il].data() + j * v_stride + int64_t{kvh} * dv;
          for (int d = 0; d < dv; ++d) out[d] += p[j] * src[d];
        }
      }
    }
  });
}

// Routes each token to its top-k experts, then runs every expert once over all the tokens
// routed to it. Each token's output is the sum of its slots in slot order, so the result
// never depends on which expert ran first.
void Context::Impl::MoE(int il, int n) {
  const LayerWeights& L = model.layer(il);
  const int E = static_cast<int>(hp.n_expert), K = static_cast<int>(hp.n_expert_used);
  const int64_t D = hp.n_embd, F = hp.n_ff_exp;
  // Router: softmax over all experts, top-k (ties to the lower id), optional renormalise.
  for (int t = 0; t < n; ++t) {
    float* pr = probs.data() + int64_t{t} * E;
    for (int e = 0; e < E; ++e) pr[e] = DotF32(L.router.data() + e * D, xn.data() + t * D, D);
    SoftmaxInPlace(pr, E);
    int32_t* ids = topk_id.data() + t * K;
    float* w = topk_weight.data() + t * K;
    std::vector<int32_t> order(E);  // small (n_expert); not a hot-path allocation per row
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + K, order.end(), [&](int a, int b) {
      return pr[a] > pr[b] || (pr[a] == pr[b] && a < b);
    });
    float sum = 0;
    for (int s = 0; s < K; ++s) {
      ids[s] = order[s];
      w[s] = pr[order[s]];
      sum += w[s];
    }
    if (arch.norm_topk_prob) {
      for (int s = 0; s < K; ++s) w[s] /= sum;
    }
  }
  // Group (token, slot) pairs by expert, in token order within an expert.
  std::fill(expert_count.begin(), expert_count.end(), 0);
  for (int i = 0; i < n * K; ++i) ++expert_count[topk_id[i]];
  std::vector<int32_t> start(E + 1, 0);  // n_expert + 1 ints
  for (int e = 0; e < E; ++e) start[e + 1] = start[e] + expert_count[e];
  std::vector<int32_t> fill(start.begin(), start.end() - 1);
  for (int i = 0; i < n * K; ++i) expert_rows[fill[topk_id[i]]++] = i;

  for (int e = 0; e < E; ++e) {
    const int m = expert_count[e];
    if (m == 0) continue;
    const int32_t* rows = expert_rows.data() + start[e];
    for (int r = 0; r < m; ++r) {
      const int t = rows[r] / K;
      std::copy_n(xn.data() + t * D, D, ex_in.data() + r * D);
    }
    MatMul(L.experts.Gate(e), ex_in.data(), D, m, ex_gate.data(), F);
    MatMul(L.experts.Up(e), ex_in.data(), D, m, ex_up.data(), F);
    SwiGlu(ex_gate.data(), ex_up.data(), int64_t{m} * F, ex_gate.data());
    MatMul(L.experts.Down(e), ex_gate.data(), F, m, ex_out.data(), D);
    for (int r = 0; r < m; ++r) {
      const float w = topk_weight[rows[r]];
      float* dst = slot_out.data() + int64_t{rows[r]} * D;
      const float* src = ex_out.data() + r * D;
      for (int64_t d = 0; d < D; ++d) dst[d] = src[d] * w;
    }
  }
  for (int t = 0; t < n; ++t) {
    float* out = ffn_out.data() + t * D;
    std::copy_n(slot_out.data() + int64_t{t} * K * D, D, out);
    for (int s = 1; s < K; ++s) {
      const float* src = slot_out.data() + (int64_t{t} * K + s) * D;
      for (int64_t d = 0; d < D; ++d) out[d] += src[d];
    }
  }
}

// qwen2moe: ffn_out += sigmoid(xn . gate_inp_shexp) * down(silu(gate(xn)) * up(xn)).
void Context::Impl::SharedExpert(int il, int n) {
  const LayerWeights& L = model.layer(il);
  const int64_t D = hp.n_embd, F = hp.n_ff_shexp;
  MatMul(L.shexp_gate, xn.data(), D, n, sh_gate.data(), F);
  MatMul(L.shexp_up, xn.data(), D, n, sh_up.data(), F);
  SwiGlu(sh_gate.data(), sh_up.data(), int64_t{n} * F, sh_gate.data());
  MatMul(L.shexp_down, sh_gate.data(), F, n, ex_out.data(), D);
  for (int t = 0; t < n; ++t) {
    const float g = 1.0f / (1.0f + std::exp(-DotF32(L.shexp_gate_inp.data(), xn.data() + t * D, D)));
    for (int64_t d = 0; d < D; ++d) ffn_out[t * D + d] += g * ex_out[t * D + d];
  }
}

void Context::Impl::Forward(std::span<const int32_t> tokens, uint32_t pos0, int first_logit,
                            float* logits) {
  const int n = static_cast<int>(tokens.size());
  const int64_t D = hp.n_embd;
  const int64_t QD = hp.n_embd_q(), KD = hp.n_embd_k_gqa(), VD = hp.n_embd_v_gqa();
  const WeightMatrix& embd = model.token_embd();
  for (int t = 0; t < n; ++t) {
    DequantizeRow(embd.type, embd.row(tokens[t]), x.data() + t * D, D);
  }
  const RopeMode rope = arch.rope_type == RopeType::kNeox ? RopeMode::kNeox : RopeMode::kNorm;
  for (int il = 0; il < static_cast<int>(hp.n_layer); ++il) {
    const LayerWeights& L = model.layer(il);
    for (int t = 0; t < n; ++t) {
      RmsNorm(x.data() + t * D, L.attn_norm.data(), D, hp.rms_eps, xn.data() + t * D);
    }
    MatMul(L.wq, xn.data(), D, n, q.data(), QD);
    MatMul(L.wk, xn.data(), D, n, k.data(), KD);
    MatMul(L.wv, xn.data(), D, n, v.data(), VD);
    for (int t = 0; t < n; ++t) {
      float* qt = q.data() + t * QD;
      float* kt = k.data() + t * KD;
      float* vt = v.data() + t * VD;
      for (int64_t i = 0; i < QD && !L.bq.empty(); ++i) qt[i] += L.bq[i];
      for (int64_t i = 0; i < KD && !L.bk.empty(); ++i) kt[i] += L.bk[i];
      for (int64_t i = 0; i < VD && !L.bv.empty(); ++i) vt[i] += L.bv[i];
      if (arch.qk_norm == QkNorm::kPerHead) {
        for (uint32_t h = 0; h < hp.n_head; ++h) {
          float* qh = qt + h * hp.head_dim_k;
          RmsNorm(qh, L.attn_q_norm.data(), hp.head_dim_k, hp.rms_eps, qh);
        }
        for (uint32_t h = 0; h < hp.n_head_kv; ++h) {
          float* kh = kt + h * hp.head_dim_k;
          RmsNorm(kh, L.attn_k_norm.data(), hp.head_dim_k, hp.rms_eps, kh);
        }
      } else if (arch.qk_norm == QkNorm::kWholeProjection) {
        RmsNorm(qt, L.attn_q_norm.data(), QD, hp.rms_eps, qt);
        RmsNorm(kt, L.attn_k_norm.data(), KD, hp.rms_eps, kt);
      }
      const int pos = static_cast<int>(pos0) + t;
      Rope(qt, hp.n_head, hp.head_dim_k, hp.n_rot, pos, hp.rope_freq_base, hp.rope_freq_scale,
           rope);
      Rope(kt, hp.n_head_kv, hp.head_dim_k, hp.n_rot, pos, hp.rope_freq_base,
           hp.rope_freq_scale, rope);
      const size_t kc = size_t{pos0 + t} * KD, vc = size_t{pos0 + t} * VD;
      if (kv_type == KvType::kF16) {
        for (int64_t i = 0; i < KD; ++i) k_cache_f16[il][kc + i] = Fp32ToFp16(kt[i]);
        for (int64_t i = 0; i < VD; ++i) v_cache_f16[il][vc + i] = Fp32ToFp16(vt[i]);
      } else {
        std::copy_n(kt, KD, k_cache_f32[il].data() + kc);
        std::copy_n(vt, VD, v_cache_f32[il].data() + vc);
      }
    }
    Attention(il, n, pos0);
    MatMul(L.wo, attn.data(), int64_t{hp.n_head} * hp.head_dim_v, n, xn.data(), D);
    for (int64_t i = 0; i < int64_t{n} * D; ++i) x[i] += xn[i];

    for (int t = 0; t < n; ++t) {
      RmsNorm(x.data() + t * D, L.ffn_norm.data(), D, hp.rms_eps, xn.data() + t * D);
    }
    MoE(il, n);
    if (arch.shared_expert == SharedExpert::kSigmoidGated) SharedExpert(il, n);
    for (int64_t i = 0; i < int64_t{n} * D; ++i) x[i] += ffn_out[i];
  }
  const int first = first_logit;
  if (first >= n) return;
  for (int t = first; t < n; ++t) {
    RmsNorm(x.data() + t * D, model.output_norm().data(), D, hp.rms_eps, xn.data() + t * D);
  }
  MatMul(model.output(), xn.data() + first * D, D, n - first, logits, hp.n_vocab);
}

Context::Context(const Model& model, uint32_t n_ctx) : model_(model), n_ctx_(n_ctx) {}
Context::~Context() = default;

uint32_t Context::n_vocab() const { return model_.hparams().n_vocab; }

Result<std::unique_ptr<Context>> Context::Create(const Model& model,
                                                 const ContextOptions& options) {
  const uint32_t n_train = model.hparams().n_ctx_train;
  const uint32_t n_ctx = options.n_ctx == 0 ? n_train : options.n_ctx;
  if (n_ctx > n_train) {
    return InvalidArgument("context size {} is longer than the model's training context {} "
                           "(use -c {} or less)",
                           n_ctx, n_train, n_train);
  }
  if (n_ctx < 1) return InvalidArgument("context size must be at least 1");
  std::unique_ptr<Context> ctx(new Context(model, n_ctx));
  ctx->impl_ = std::make_unique<Impl>(model, n_ctx, options);
  return ctx;
}

Status Context::Eval(std::span<const int32_t> tokens, LogitsFor which, std::vector<float>* logits) {
  if (tokens.empty()) return InvalidArgument("nothing to evaluate: no tokens");
  const uint32_t n_vocab = model_.hparams().n_vocab;
  for (int32_t id : tokens) {
    if (id < 0 || static_cast<uint32_t>(id) >= n_vocab) {
      return InvalidArgument("token id {} is outside the vocabulary (0..{})", id, n_vocab - 1);
    }
  }
  if (n_past_ + tokens.size() > n_ctx_) {
    return Status(StatusCode::kResourceExhausted,
                  fmt::format("the context is full: {} + {} tokens do not fit in {} positions "
                              "(raise -c)",
                              n_past_, tokens.size(), n_ctx_));
  }
  const size_t n_out = which == LogitsFor::kAll ? tokens.size() : 1;
  logits->resize(n_out * n_vocab);
  const uint32_t B = impl_->n_batch;
  for (size_t i = 0; i < tokens.size(); i += B) {
    const size_t n = std::min<size_t>(B, tokens.size() - i);
    const bool last_batch = i + n == tokens.size();
    if (which == LogitsFor::kAll) {
      impl_->Forward(tokens.subspan(i, n), n_past_, 0, logits->data() + i * n_vocab);
    } else {
      impl_->Forward(tokens.subspan(i, n), n_past_, last_batch ? static_cast<int>(n) - 1 : n,
                     logits->data());
    }
    n_past_ += static_cast<uint32_t>(n);
  }
  return Status::Ok();
}

}  // namespace mt
