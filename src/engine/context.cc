// The forward pass: embeddings -> per layer (attention, MoE) -> output norm -> logits.
// Buffers are sized in Create; Eval allocates nothing but the caller's logits.
#include "engine/context.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <initializer_list>
#include <numeric>
#include <optional>

#include "base/aligned_buffer.h"
#include "base/thread_pool.h"
#include "experts/stream_store.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "quant/dequant.h"

namespace mt {
namespace {

// One input of several matrix products (e.g. the normed hidden state read by q, k and v),
// quantized once per activation format on first use.
class Input {
 public:
  void Reserve(int64_t max_tok, int64_t max_cols) {
    for (Activations& a : acts_) a.Reserve(max_tok, max_cols);
  }
  void Set(const float* x, int64_t stride, int64_t n_tok, int64_t cols) {
    x_ = x;
    stride_ = stride;
    n_tok_ = n_tok;
    cols_ = cols;
    ready_ = {false, false, false};
  }
  // `pool` null: quantize on the calling thread (inside a parallel region).
  const Activations& For(GgmlType weight_type, ThreadPool* pool) {
    const ActFormat f = ActFormatFor(weight_type);
    const int i = static_cast<int>(f);
    if (!ready_[i]) {
      acts_[i].Prepare(f, n_tok_, cols_);
      if (pool != nullptr) {
        pool->ParallelFor(n_tok_, [&](int64_t t0, int64_t t1, int) {
          acts_[i].QuantizeTokens(x_, stride_, t0, t1);
        });
      } else {
        acts_[i].QuantizeTokens(x_, stride_, 0, n_tok_);
      }
      ready_[i] = true;
    }
    return acts_[i];
  }

 private:
  const float* x_ = nullptr;
  int64_t stride_ = 0, n_tok_ = 0, cols_ = 0;
  std::array<Activations, 3> acts_;  // indexed by ActFormat
  std::array<bool, 3> ready_{};
};

// Scratch for running one expert over its tokens; one per thread, so experts can run in
// parallel, one per thread.
struct ExpertScratch {
  std::vector<float> in;    // (n_batch, n_embd) gathered inputs
  std::vector<float> gate;  // (n_batch, n_ff) gate projection, then SwiGLU output
  std::vector<float> up;    // (n_batch, n_ff)
  std::vector<float> out;   // (n_batch, n_embd)
  Input in_acts;            // `in` quantized
  Input hid_acts;           // `gate` (SwiGLU output) quantized
};

}  // namespace

struct Context::Impl {
  Impl(const Model& m, uint32_t n_ctx, const ContextOptions& o);

  // The bytes Allocate will take, for the memory plan.
  uint64_t kv_bytes() const;
  uint64_t scratch_bytes() const;
  Status Allocate();

  // Runs a batch of at most n_batch tokens; writes the logits of the tokens that want them,
  // in batch order, to `logits` (n_vocab each).
  Status Forward(std::span<const BatchToken> batch, float* logits);
  // The q, k, v rows of the batch made ready for attention (bias, q/k norm, rotation), and k
  // and v stored into the cache; tokens' q and k/v in parallel (each item is independent).
  void PrepareAttention(int il, std::span<const BatchToken> batch);
  // Stores one token's projection (n_head_kv heads of head_dim) into a layer's K or V cache.
  void StoreHeads(const float* row, uint32_t head_dim, uint8_t* cache,
                  const BatchToken& token) const;
  // Splits the batch into Attention's runs (run_start, n_runs): the same for every layer.
  void FindAttentionRuns(std::span<const BatchToken> batch);
  void Attention(int il, std::span<const BatchToken> batch);
  Status MoE(int il, int n);
  // Applies layer il+1's router to the current FFN input (the residual stream after layer
  // il's attention) and hints the predicted experts to the store; with prefetch_depth d,
  // layers il+2..il+d as well (only il+1's prediction is scored for recall).
  void PrefetchNextLayer(int il, int n);
  // The top-k of layer `target`'s router applied to the current FFN input, per token, as
  // flags[t * n_expert + e] = 1 (flags cleared first); returns how many were set.
  uint64_t PredictExperts(int target, int n, uint8_t* flags);
  // Hints the union over the batch's tokens of `flags` for layer `target`.
  void HintPredicted(int target, int n, const uint8_t* flags);
  // Runs the ready experts of `group` over their tokens, writing their weighted outputs
  // into slot_out. With several experts and threads, each thread runs whole experts;
  // otherwise each expert's rows are split across threads. Same bits either way.
  void RunExperts(std::span<const ReadyExpert> group);
  // logits (n, n_expert) = in (n, n_embd) . router (n_expert, n_embd)^T, f32, the (token,
  // expert) dot products split across threads (each is one DotF32: same bits either way).
  void RouterLogits(const float* router, const float* in, int n, float* logits);
  // One expert, on the calling thread (pool null) or with its rows split (pool set).
  void RunExpert(const ReadyExpert& r, ExpertScratch& s, ThreadPool* pool);
  void SharedExpert(int il, int n);
  // y (n rows, stride y_stride) = in * W^T, chunks of W's rows taken by the threads in turn.
  void Project(const WeightMatrix& w, Input& in, float* y, int64_t y_stride);
  // Several products of one input in one parallel region: one hand-off to the workers
  // instead of one per matrix (decode issues ~100 a token).
  struct Product {
    const WeightMatrix* w;
    float* y;
    int64_t y_stride;
  };
  void ProjectAll(std::initializer_list<Product> products, Input& in);
  // Rows per chunk for Project / ProjectAll over `rows` rows.
  int64_t ProjectChunk(int64_t rows) const;
  // The same on the calling thread only.
  static void ProjectSerial(const WeightMatrix& w, Input& in, float* y, int64_t y_stride);

  const Model& model;
  const HParams& hp;
  const ArchDef& arch;
  const uint32_t n_ctx;
  const uint32_t n_seq;
  const uint32_t n_batch;
  const KvType kv_type;
  const bool populate_kv;
  ThreadPool pool;
  StoragePlan plan;
  std::unique_ptr<ExpertStore> store;
  // Layers ahead whose experts are predicted and hinted to the store (stream mode with
  // prefetch: StorageOptions::prefetch_depth); 0: no prefetch.
  int prefetch_depth = 0;
  RoutingStats routing;   // live (layer, expert) counts
  std::vector<Context::PrefetchCounters> prefetch_counters;  // (n_layer)
  std::vector<uint8_t> predicted;  // (n_batch, n_expert) 1 = predicted for the next layer
  std::vector<float> next_norm;    // (n_batch, n_embd) FFN inputs under the next layer's norm
  std::vector<float> next_logits;  // (n_batch, n_expert) the next layer's router logits
  std::vector<uint8_t> predicted_ahead;  // (n_batch, n_expert) the same for layers beyond
  std::vector<int32_t> hinted;     // (n_expert) union of the predicted experts

  // Activations, one row per token of the batch.
  std::vector<float> x;        // (n_batch, n_embd) residual stream
  std::vector<float> xn;       // (n_batch, n_embd) normed input of a block
  std::vector<float> q;        // (n_batch, n_head * head_dim_k)
  std::vector<float> k;        // (n_batch, n_head_kv * head_dim_k)
  std::vector<float> v;        // (n_batch, n_head_kv * head_dim_v)
  std::vector<float> attn;     // (n_batch, n_head * head_dim_v) attention output per head
  std::vector<float> rope_cs;  // (n_batch, n_rot) each token's rotation cosines, then sines
  // Query heads per AttendTokens call, and tokens per run: up to 16 queries take each K/V
  // tile through L1/L2 together (AVX2: pp512 at 2048 positions 1.4-1.9x faster than one
  // query's pass over its head's cache at a time); longer runs would unbalance the threads.
  int attend_heads() const { return std::min<int>(hp.n_head / hp.n_head_kv, kAttendGroupMax); }
  const int attend_tokens = std::max(1, 16 / attend_heads());
  // (n_threads, attend_heads(), attend_tokens, kAttendTile) a tile's scores per query
  std::vector<float> scores;
  std::vector<int> run_start;  // (n_batch + 1) first token of each run of Attention, then n
  int n_runs = 0;
  std::vector<float> probs;    // (n_batch, n_expert) router probabilities
  std::vector<int32_t> order;  // (n_expert) router sort scratch
  std::vector<int32_t> topk_id;      // (n_batch, n_expert_used) chosen experts, best first
  std::vector<float> topk_weight;    // (n_batch, n_expert_used) their weights
  std::vector<int32_t> expert_rows;  // (n_batch * n_expert_used) token*k+slot grouped by expert
  std::vector<int32_t> expert_start;  // (n_expert + 1) where each expert's rows begin
  std::vector<int32_t> expert_fill;   // (n_expert) fill cursor
  std::vector<int32_t> used_experts;  // (n_expert) distinct experts of the batch
  std::vector<ExpertScratch> ex;   // (n_threads) per-thread expert scratch
  std::vector<ReadyExpert> group;  // (<= n_expert) experts ready to run together
  std::vector<int32_t> expert_order;  // (n_expert) a group's experts, most tokens first
  std::vector<float> sh_gate;  // (n_batch, n_ff_shexp) shared expert
  std::vector<float> sh_up;    // (n_batch, n_ff_shexp)
  std::vector<float> sh_out;   // (n_batch, n_embd)
  std::vector<float> slot_out;  // (n_batch, n_expert_used, n_embd) weighted expert outputs
  std::vector<float> ffn_out;   // (n_batch, n_embd)
  Input in_main;  // the current block input (xn, attn) for dense projections
  Input in_sh;    // the shared expert's hidden (SwiGLU) output
  std::vector<int32_t> logit_rows;  // (n_batch) batch indices of the tokens that want logits
  // KV cache, per layer, (n_seq, n_head_kv, n_ctx, head_dim), f16 or f32: one head's
  // positions are contiguous, so attention's prefetch streams them (with position-major rows
  // a head's next position was a page away: 1.6x slower at 128 positions, 2.8x at 512);
  // pages are touched as positions fill.
  std::vector<AlignedBuffer> k_cache, v_cache;  // (n_layer)
};

Context::Impl::Impl(const Model& m, uint32_t n_ctx_, const ContextOptions& o)
    : model(m),
      hp(m.hparams()),
      arch(m.arch()),
      n_ctx(n_ctx_),
      n_seq(std::max(o.n_seq_max, 1u)),
      n_batch(std::max(o.n_batch, 1u)),
      kv_type(o.kv_type),
      populate_kv(o.populate_kv),
      pool(o.n_threads, o.pin_threads) {}

uint64_t Context::Impl::kv_bytes() const {
  const uint64_t elt = kv_type == KvType::kF16 ? 2 : 4;
  return uint64_t{hp.n_layer} * n_seq * n_ctx * (hp.n_embd_k_gqa() + hp.n_embd_v_gqa()) * elt;
}

uint64_t Context::Impl::scratch_bytes() const {
  const uint64_t B = n_batch, K = hp.n_expert_used, D = hp.n_embd;
  const uint64_t F = std::max(hp.n_ff_exp, hp.n_ff_shexp);
  const uint64_t floats = B * (3 * D + hp.n_embd_q() + hp.n_embd_k_gqa() + hp.n_embd_v_gqa() +
                               uint64_t{hp.n_head} * hp.head_dim_v + hp.n_rot + hp.n_expert +
                               2 * D + 2 * F + K * D + D) +
                          uint64_t(pool.size()) * attend_heads() * attend_tokens * kAttendTile +
                          B * (D + hp.n_expert);  // next-layer prediction: norms, logits
  // Three quantized copies of up to three inputs (largest: f32 of the widest input).
  const uint64_t widest = std::max<uint64_t>({D, F, uint64_t{hp.n_head} * hp.head_dim_v});
  return floats * 4 + 3 * B * widest * (4 + 2 + 2) + 2 * B * hp.n_expert;  // + prediction flags
}

Status Context::Impl::Allocate() {
  const size_t B = n_batch, K = hp.n_expert_used, D = hp.n_embd;
  const size_t F = std::max(hp.n_ff_exp, hp.n_ff_shexp);
  x.resize(B * D);
  xn.resize(B * D);
  q.resize(B * hp.n_embd_q());
  k.resize(B * hp.n_embd_k_gqa());
  v.resize(B * hp.n_embd_v_gqa());
  attn.resize(B * hp.n_head * hp.head_dim_v);
  rope_cs.resize(B * hp.n_rot);
  scores.resize(static_cast<size_t>(pool.size()) * attend_heads() * attend_tokens * kAttendTile);
  run_start.resize(B + 1);
  probs.resize(B * hp.n_expert);
  order.resize(hp.n_expert);
  topk_id.resize(B * K);
  topk_weight.resize(B * K);
  expert_rows.resize(B * K);
  expert_start.resize(hp.n_expert + 1);
  expert_fill.resize(hp.n_expert);
  used_experts.reserve(hp.n_expert);
  ex.resize(pool.size());
  for (ExpertScratch& s : ex) {
    s.in.resize(B * D);
    s.gate.resize(B * hp.n_ff_exp);
    s.up.resize(B * hp.n_ff_exp);
    s.out.resize(B * D);
    s.in_acts.Reserve(B, D);
    s.hid_acts.Reserve(B, hp.n_ff_exp);
  }
  group.reserve(hp.n_expert);
  predicted.assign(B * hp.n_expert, 0);
  if (prefetch_depth > 1) predicted_ahead.assign(B * hp.n_expert, 0);
  next_norm.resize(B * D);
  next_logits.resize(B * hp.n_expert);
  hinted.reserve(hp.n_expert);
  prefetch_counters.assign(hp.n_layer, {});
  expert_order.reserve(hp.n_expert);
  sh_gate.resize(B * hp.n_ff_shexp);
  sh_up.resize(B * hp.n_ff_shexp);
  sh_out.resize(B * D);
  slot_out.resize(B * K * D);
  ffn_out.resize(B * D);
  logit_rows.reserve(B);
  const int64_t widest = std::max<int64_t>({static_cast<int64_t>(D), static_cast<int64_t>(F),
                                            int64_t{hp.n_head} * hp.head_dim_v});
  in_main.Reserve(B, widest);
  in_sh.Reserve(B, std::max<int64_t>(hp.n_ff_shexp, 1));
  const uint64_t elt = kv_type == KvType::kF16 ? 2 : 4;
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    const uint64_t positions = uint64_t{n_seq} * n_ctx;
    Result<AlignedBuffer> kb = AlignedBuffer::Allocate(positions * hp.n_embd_k_gqa() * elt);
    Result<AlignedBuffer> vb = AlignedBuffer::Allocate(positions * hp.n_embd_v_gqa() * elt);
    if (!kb.ok()) return kb.status().WithContext("KV cache");
    if (!vb.ok()) return vb.status().WithContext("KV cache");
    k_cache.push_back(std::move(kb.value()));
    v_cache.push_back(std::move(vb.value()));
  }
  if (populate_kv) {
    for (std::vector<AlignedBuffer>* cache : {&k_cache, &v_cache}) {
      for (AlignedBuffer& b : *cache) MT_RETURN_IF_ERROR(b.Populate().WithContext("KV cache"));
    }
  }
  return Status::Ok();
}

void Context::Impl::ProjectSerial(const WeightMatrix& w, Input& in, float* y,
                                  int64_t y_stride) {
  MatMul(w, in.For(w.type, nullptr), y, y_stride, 0, w.rows);
}

// Rows per chunk of a projection split dynamically over the threads: about 8 chunks per
// thread (a thread that falls behind leaves at most a chunk to wait for), whole 16-row panels.
int64_t Context::Impl::ProjectChunk(int64_t rows) const {
  const int64_t per = rows / (8 * int64_t{pool.size()});
  return std::max<int64_t>(16, per / 16 * 16);
}

void Context::Impl::Project(const WeightMatrix& w, Input& in, float* y, int64_t y_stride) {
  const Activations& a = in.For(w.type, &pool);
  pool.ParallelForDynamic(
      w.rows, [&](int64_t r0, int64_t r1, int) { MatMul(w, a, y, y_stride, r0, r1); },
      ProjectChunk(w.rows));
}

void Context::Impl::ProjectAll(std::initializer_list<Product> products, Input& in) {
  int64_t total = 0;
  bool panels_aligned = true;  // every matrix's rows start on a 16-row boundary of the range
  for (const Product& p : products) {
    in.For(p.w->type, &pool);  // quantized once, before the parallel region
    panels_aligned = panels_aligned && total % 16 == 0;
    total += p.w->rows;
  }
  if (!panels_aligned) {
    for (const Product& p : products) Project(*p.w, in, p.y, p.y_stride);
    return;
  }
  // The matrices' rows end to end, in chunks (a chunk may span two matrices).
  pool.ParallelForDynamic(total, [&](int64_t begin, int64_t end, int) {
    int64_t base = 0;
    for (const Product& p : products) {
      const int64_t r0 = std::max<int64_t>(begin - base, 0);
      const int64_t r1 = std::min<int64_t>(end - base, p.w->rows);
      if (r0 < r1) MatMul(*p.w, in.For(p.w->type, nullptr), p.y, p.y_stride, r0, r1);
      base += p.w->rows;
    }
  }, ProjectChunk(total));
}

void Context::Impl::StoreHeads(const float* row, uint32_t head_dim, uint8_t* cache,
                               const BatchToken& token) const {
  const KvElemType elem = kv_type == KvType::kF16 ? KvElemType::kF16 : KvElemType::kF32;
  const size_t elt = kv_type == KvType::kF16 ? 2 : 4;  // bytes per cache element
  for (uint32_t h = 0; h < hp.n_head_kv; ++h) {
    const size_t cell = (size_t{token.seq} * hp.n_head_kv + h) * n_ctx + token.pos;
    StoreKv(row + size_t{h} * head_dim, head_dim, elem, cache + cell * head_dim * elt);
  }
}

void Context::Impl::PrepareAttention(int il, std::span<const BatchToken> batch) {
  const LayerWeights& L = model.layer(il);
  const int64_t QD = hp.n_embd_q(), KD = hp.n_embd_k_gqa(), VD = hp.n_embd_v_gqa();
  const RopeMode rope = arch.rope_type == RopeType::kNeox ? RopeMode::kNeox : RopeMode::kNorm;
  // Bias, then the q/k norm, then the rotation of one projection row of one token.
  auto finish = [&](float* row, int64_t width, const std::vector<float>& bias,
                    const std::vector<float>& norm, uint32_t heads, const float* cos_sin) {
    for (int64_t i = 0; i < width && !bias.empty(); ++i) row[i] += bias[i];
    if (arch.qk_norm == QkNorm::kPerHead) {
      for (uint32_t h = 0; h < heads; ++h) {
        float* rh = row + h * hp.head_dim_k;
        RmsNorm(rh, norm.data(), hp.head_dim_k, hp.rms_eps, rh);
      }
    } else if (arch.qk_norm == QkNorm::kWholeProjection) {
      RmsNorm(row, norm.data(), width, hp.rms_eps, row);
    }
    RopeRotate(row, static_cast<int>(heads), static_cast<int>(hp.head_dim_k),
               static_cast<int>(hp.n_rot), cos_sin, rope);
  };
  // Three items per token: its q; its k, into the cache; its v, into the cache. At one
  // token with two threads the first item goes to one thread and the other two to the
  // other: the first is q where q outweighs k and v together (GQA), else k (then q with
  // v's store balance k with its store).
  enum Part { kQ, kK, kV };
  const std::array<Part, 3> parts = QD >= KD + VD ? std::array<Part, 3>{kQ, kK, kV}
                                                  : std::array<Part, 3>{kK, kQ, kV};
  const int64_t items = int64_t{3} * static_cast<int64_t>(batch.size());
  pool.ParallelFor(items, [&](int64_t begin, int64_t end, int) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / 3;
      const float* cos_sin = rope_cs.data() + t * hp.n_rot;
      switch (parts[item % 3]) {
        case kQ:
          finish(q.data() + t * QD, QD, L.bq, L.attn_q_norm, hp.n_head, cos_sin);
          break;
        case kK: {
          float* kt = k.data() + t * KD;
          finish(kt, KD, L.bk, L.attn_k_norm, hp.n_head_kv, cos_sin);
          StoreHeads(kt, hp.head_dim_k, k_cache[il].data(), batch[t]);
          break;
        }
        case kV: {
          float* vt = v.data() + t * VD;
          for (int64_t i = 0; i < VD && !L.bv.empty(); ++i) vt[i] += L.bv[i];
          StoreHeads(vt, hp.head_dim_v, v_cache[il].data(), batch[t]);
          break;
        }
      }
    }
  });
}

void Context::Impl::FindAttentionRuns(std::span<const BatchToken> batch) {
  n_runs = 0;
  for (int t = 0; t < static_cast<int>(batch.size()); ++t) {
    const bool extends = t > 0 && t - run_start[n_runs - 1] < attend_tokens &&
                         batch[t].seq == batch[t - 1].seq && batch[t].pos == batch[t - 1].pos + 1;
    if (!extends) run_start[n_runs++] = t;
  }
  run_start[n_runs] = static_cast<int>(batch.size());
}

void Context::Impl::Attention(int il, std::span<const BatchToken> batch) {
  const int n_head = static_cast<int>(hp.n_head), n_kv = static_cast<int>(hp.n_head_kv);
  const int dk = static_cast<int>(hp.head_dim_k), dv = static_cast<int>(hp.head_dim_v);
  const int group = n_head / n_kv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  const KvElemType elem = kv_type == KvType::kF16 ? KvElemType::kF16 : KvElemType::kF32;
  const int64_t elt = kv_type == KvType::kF16 ? 2 : 4;  // bytes per cache element
  const uint8_t* kc = k_cache[il].data();
  const uint8_t* vc = v_cache[il].data();
  // Items are (kv head, run of tokens), in that order. A run (FindAttentionRuns) is up to
  // attend_tokens consecutive positions of one sequence (a prompt's), which AttendTokens
  // runs with the query heads of the group over one read of their shared rows; consecutive
  // items read the same K/V rows, which later runs then find in L2 (in token order the other
  // heads' rows went through it in between). Every kv head has the same runs, so the
  // threads' contiguous ranges are equal work where the kv heads divide among them (16 or 4
  // on 2).
  const int runs = n_runs;
  const int heads = attend_heads();  // per AttendTokens call
  pool.ParallelFor(int64_t{runs} * n_kv, [&](int64_t begin, int64_t end, int thread) {
    float* p = scores.data() + static_cast<size_t>(thread) * heads * attend_tokens * kAttendTile;
    for (int64_t item = begin; item < end; ++item) {
      const int kvh = static_cast<int>(item / runs), r = static_cast<int>(item % runs);
      const int t = run_start[r], n_tok = run_start[r + 1] - t;
      const int h = kvh * group;  // the group's first query head
      const int64_t head = (int64_t{batch[t].seq} * n_kv + kvh) * n_ctx;  // its first cell
      for (int g0 = 0; g0 < group; g0 += heads) {
        const AttendQueries qs{
            q.data() + int64_t{t} * hp.n_embd_q() + int64_t{h + g0} * dk, hp.n_embd_q(), dk,
            attn.data() + int64_t{t} * n_head * dv + int64_t{h + g0} * dv, int64_t{n_head} * dv,
            dv, std::min(heads, group - g0), n_tok,
            batch[t].pos + 1};  // causal: positions 0..pos of its sequence
        AttendTokens(qs, kc + head * dk * elt, vc + head * dv * elt, elem, dk, dv, dk, dv, scale,
                     p);
      }
    }
  });
}

// Routes each token to its top-k experts, asks the store for the distinct experts, and
// runs each over all the tokens routed to it as it arrives (cached experts first). Each
// token's output is the sum of its k slots in slot order, so the result never depends on
// which expert arrived first.
Status Context::Impl::MoE(int il, int n) {
  const LayerWeights& L = model.layer(il);
  const int E = static_cast<int>(hp.n_expert), K = static_cast<int>(hp.n_expert_used);
  const int64_t D = hp.n_embd;
  // Router: softmax over all experts, top-k (ties to the lower id), optional renormalise.
  RouterLogits(L.router.data(), xn.data(), n, probs.data());
  for (int t = 0; t < n; ++t) {
    float* pr = probs.data() + int64_t{t} * E;
    SoftmaxInPlace(pr, E);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + K, order.end(), [&](int a, int b) {
      return pr[a] > pr[b] || (pr[a] == pr[b] && a < b);
    });
    int32_t* ids = topk_id.data() + t * K;
    float* w = topk_weight.data() + t * K;
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
  // Routing statistics, and how well the previous layer predicted this one.
  Context::PrefetchCounters& pc = prefetch_counters[il];
  for (int t = 0; t < n; ++t) {
    for (int s = 0; s < K; ++s) {
      const int32_t e = topk_id[t * K + s];
      routing.Add(static_cast<uint32_t>(il), static_cast<uint32_t>(e));
      if (prefetch_depth > 0 && il > 0) {
        ++pc.actual;
        pc.correct += predicted[int64_t{t} * E + e];
      }
    }
  }
  // Group (token, slot) pairs by expert, in token order within an expert.
  std::fill(expert_start.begin(), expert_start.end(), 0);
  for (int i = 0; i < n * K; ++i) ++expert_start[topk_id[i] + 1];
  used_experts.clear();
  for (int e = 0; e < E; ++e) {
    if (expert_start[e + 1] > 0) used_experts.push_back(e);
    expert_start[e + 1] += expert_start[e];
  }
  std::copy(expert_start.begin(), expert_start.end() - 1, expert_fill.begin());
  for (int i = 0; i < n * K; ++i) expert_rows[expert_fill[topk_id[i]]++] = i;

  store->BeginLayer(static_cast<uint32_t>(il), used_experts);
  // Demand first, then the hint: the next layer's reads overlap this layer's experts.
  if (prefetch_depth > 0 && il + 1 < static_cast<int>(hp.n_layer)) PrefetchNextLayer(il, n);
  while (store->Pending()) {
    // Everything ready now runs together (all of it, for the in-memory tiers); a stream
    // tier's misses join later groups as their reads complete.
    group.clear();
    for (bool first = true;; first = false) {
      Result<std::optional<ReadyExpert>> next = store->NextReady(false);
      if (first && next.ok() && !next.value() && store->Pending()) {
        // Nothing ready: block on the reads, and let the workers sleep meanwhile (a vCPU
        // spinning through a read wait slows this VM's disk: docs/tiering.md).
        ThreadPool::LetSleep idle(pool);
        next = store->NextReady(true);
      }
      if (!next.ok()) {
        group.clear();
        return next.status();
      }
      if (!next.value()) break;
      group.push_back(std::move(*next.value()));
    }
    RunExperts(group);
  }
  group.clear();  // releases the leases
  for (int t = 0; t < n; ++t) {
    float* out = ffn_out.data() + t * D;
    std::copy_n(slot_out.data() + int64_t{t} * K * D, D, out);
    for (int s = 1; s < K; ++s) {
      const float* src = slot_out.data() + (int64_t{t} * K + s) * D;
      for (int64_t d = 0; d < D; ++d) out[d] += src[d];
    }
  }
  return Status::Ok();
}

void Context::Impl::RouterLogits(const float* router, const float* in, int n, float* logits) {
  const int64_t E = hp.n_expert, D = hp.n_embd;
  pool.ParallelFor(
      n * E,
      [&](int64_t i0, int64_t i1, int) {
        for (int64_t i = i0; i < i1; ++i) {
          logits[i] = DotF32(router + (i % E) * D, in + (i / E) * D, D);
        }
      },
      8);
}

void Context::Impl::PrefetchNextLayer(int il, int n) {
  prefetch_counters[il + 1].predicted += PredictExperts(il + 1, n, predicted.data());
  HintPredicted(il + 1, n, predicted.data());
  for (int d = 2; d <= prefetch_depth && il + d < static_cast<int>(hp.n_layer); ++d) {
    PredictExperts(il + d, n, predicted_ahead.data());
    HintPredicted(il + d, n, predicted_ahead.data());
  }
}

uint64_t Context::Impl::PredictExperts(int target, int n, uint8_t* flags) {
  const LayerWeights& L = model.layer(target);
  const int E = static_cast<int>(hp.n_expert), K = static_cast<int>(hp.n_expert_used);
  const int64_t D = hp.n_embd;
  std::fill(flags, flags + int64_t{n} * E, 0);
  for (int t = 0; t < n; ++t) {
    RmsNorm(x.data() + t * D, L.ffn_norm.data(), D, hp.rms_eps, next_norm.data() + t * D);
  }
  RouterLogits(L.router.data(), next_norm.data(), n, next_logits.data());
  uint64_t set = 0;
  for (int t = 0; t < n; ++t) {
    const float* lg = next_logits.data() + int64_t{t} * E;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + K, order.end(), [&](int a, int b) {
      return lg[a] > lg[b] || (lg[a] == lg[b] && a < b);
    });
    for (int s = 0; s < K; ++s) {
      uint8_t& p = flags[int64_t{t} * E + order[s]];
      set += !p;
      p = 1;
    }
  }
  return set;
}

void Context::Impl::HintPredicted(int target, int n, const uint8_t* flags) {
  const int E = static_cast<int>(hp.n_expert);
  hinted.clear();
  for (int e = 0; e < E; ++e) {
    for (int t = 0; t < n; ++t) {
      if (flags[int64_t{t} * E + e]) {
        hinted.push_back(e);
        break;
      }
    }
  }
  store->Hint(static_cast<uint32_t>(target), hinted);
}

void Context::Impl::RunExpert(const ReadyExpert& r, ExpertScratch& s, ThreadPool* p) {
  const int K = static_cast<int>(hp.n_expert_used);
  const int64_t D = hp.n_embd, F = hp.n_ff_exp;
  const int e = r.expert;
  const ExpertMatrices& w = r.lease.matrices();
  const int m = expert_start[e + 1] - expert_start[e];
  const int32_t* rows = expert_rows.data() + expert_start[e];
  for (int i = 0; i < m; ++i) std::copy_n(xn.data() + (rows[i] / K) * D, D, s.in.data() + i * D);
  s.in_acts.Set(s.in.data(), D, m, D);
  auto project = [&](const WeightMatrix& mat, Input& in, float* y, int64_t stride) {
    if (p != nullptr) Project(mat, in, y, stride); else ProjectSerial(mat, in, y, stride);
  };
  project(w.gate, s.in_acts, s.gate.data(), F);
  project(w.up, s.in_acts, s.up.data(), F);
  SwiGlu(s.gate.data(), s.up.data(), int64_t{m} * F, s.gate.data());
  s.hid_acts.Set(s.gate.data(), F, m, F);
  project(w.down, s.hid_acts, s.out.data(), D);
  for (int i = 0; i < m; ++i) {
    const float wt = topk_weight[rows[i]];
    float* dst = slot_out.data() + int64_t{rows[i]} * D;
    const float* src = s.out.data() + i * D;
    for (int64_t d = 0; d < D; ++d) dst[d] = src[d] * wt;
  }
}

void Context::Impl::RunExperts(std::span<const ReadyExpert> g) {
  const int threads = pool.size();
  if (threads == 1 || g.size() < 2) {
    for (const ReadyExpert& r : g) RunExpert(r, ex[0], &pool);
    return;
  }
  // Each thread takes the next expert when done with its last one, the largest (most tokens)
  // first: a static split by tokens left one thread waiting whenever the other's experts ran
  // slower. An expert's output does not depend on which thread runs it: the same bits.
  expert_order.resize(g.size());
  std::iota(expert_order.begin(), expert_order.end(), 0);
  auto tokens = [&](int32_t i) {
    return expert_start[g[i].expert + 1] - expert_start[g[i].expert];
  };
  std::stable_sort(expert_order.begin(), expert_order.end(),
                   [&](int32_t a, int32_t b) { return tokens(a) > tokens(b); });
  const auto n = static_cast<int64_t>(g.size());
  pool.ParallelForDynamic(n, [&](int64_t i0, int64_t i1, int thread) {
    for (int64_t i = i0; i < i1; ++i) RunExpert(g[expert_order[i]], ex[thread], nullptr);
  }, 1);
}

// qwen2moe: ffn_out += sigmoid(xn . gate_inp_shexp) * down(silu(gate(xn)) * up(xn)).
void Context::Impl::SharedExpert(int il, int n) {
  const LayerWeights& L = model.layer(il);
  const int64_t D = hp.n_embd, F = hp.n_ff_shexp;
  in_main.Set(xn.data(), D, n, D);
  ProjectAll({{&L.shexp_gate, sh_gate.data(), F}, {&L.shexp_up, sh_up.data(), F}}, in_main);
  SwiGlu(sh_gate.data(), sh_up.data(), int64_t{n} * F, sh_gate.data());
  in_sh.Set(sh_gate.data(), F, n, F);
  Project(L.shexp_down, in_sh, sh_out.data(), D);
  for (int t = 0; t < n; ++t) {
    const float g =
        1.0f / (1.0f + std::exp(-DotF32(L.shexp_gate_inp.data(), xn.data() + t * D, D)));
    for (int64_t d = 0; d < D; ++d) ffn_out[t * D + d] += g * sh_out[t * D + d];
  }
}

Status Context::Impl::Forward(std::span<const BatchToken> batch, float* logits) {
  MT_RETURN_IF_ERROR(store->CheckFiles());
  ThreadPool::KeepAwake awake(pool);  // between regions, however long the serial parts
  const int n = static_cast<int>(batch.size());
  routing.AddTokens(static_cast<uint64_t>(n));
  const int64_t D = hp.n_embd;
  const int64_t QD = hp.n_embd_q(), KD = hp.n_embd_k_gqa(), VD = hp.n_embd_v_gqa();
  const int64_t AD = int64_t{hp.n_head} * hp.head_dim_v;
  const WeightMatrix& embd = model.token_embd();
  for (int t = 0; t < n; ++t) {
    DequantizeRow(embd.type, embd.row(batch[t].token), x.data() + t * D, D);
  }
  for (int t = 0; t < n; ++t) {
    RopeAngles(hp.n_rot, static_cast<int>(batch[t].pos), hp.rope_freq_base, hp.rope_freq_scale,
               rope_cs.data() + int64_t{t} * hp.n_rot);
  }
  FindAttentionRuns(batch);
  for (int il = 0; il < static_cast<int>(hp.n_layer); ++il) {
    const LayerWeights& L = model.layer(il);
    for (int t = 0; t < n; ++t) {
      RmsNorm(x.data() + t * D, L.attn_norm.data(), D, hp.rms_eps, xn.data() + t * D);
    }
    in_main.Set(xn.data(), D, n, D);
    ProjectAll({{&L.wq, q.data(), QD}, {&L.wk, k.data(), KD}, {&L.wv, v.data(), VD}}, in_main);
    PrepareAttention(il, batch);
    Attention(il, batch);
    in_main.Set(attn.data(), AD, n, AD);
    Project(L.wo, in_main, xn.data(), D);
    for (int64_t i = 0; i < int64_t{n} * D; ++i) x[i] += xn[i];

    for (int t = 0; t < n; ++t) {
      RmsNorm(x.data() + t * D, L.ffn_norm.data(), D, hp.rms_eps, xn.data() + t * D);
    }
    MT_RETURN_IF_ERROR(MoE(il, n));
    if (arch.shared_expert == SharedExpert::kSigmoidGated) SharedExpert(il, n);
    for (int64_t i = 0; i < int64_t{n} * D; ++i) x[i] += ffn_out[i];
  }
  // The head runs only for the tokens that want logits, gathered into consecutive rows.
  logit_rows.clear();
  for (int t = 0; t < n; ++t) {
    if (batch[t].logits) logit_rows.push_back(t);
  }
  if (logit_rows.empty()) return Status::Ok();
  for (size_t i = 0; i < logit_rows.size(); ++i) {
    RmsNorm(x.data() + logit_rows[i] * D, model.output_norm().data(), D, hp.rms_eps,
            xn.data() + i * D);
  }
  in_main.Set(xn.data(), D, static_cast<int64_t>(logit_rows.size()), D);
  Project(model.output(), in_main, logits, hp.n_vocab);
  return Status::Ok();
}

Context::Context(const Model& model, uint32_t n_ctx) : model_(model), n_ctx_(n_ctx) {}
Context::~Context() = default;

uint32_t Context::n_vocab() const { return model_.hparams().n_vocab; }
const StoragePlan& Context::storage_plan() const { return impl_->plan; }
ExpertStore& Context::expert_store() { return *impl_->store; }
RoutingStats& Context::routing_stats() { return impl_->routing; }
const std::vector<Context::PrefetchCounters>& Context::prefetch_counters() const {
  return impl_->prefetch_counters;
}

int Context::prefetch_depth() const { return impl_->prefetch_depth; }

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
  if (options.n_seq_max > 1024) return InvalidArgument("at most 1024 sequences per context");
  // Workers spin while they wait for the next region, so a thread without a CPU of its own
  // stalls every region it takes part in (-t 3 on 2 CPUs: prompt 30x slower).
  if (const int cpus = ThreadPool::DefaultThreads(); options.n_threads > cpus) {
    return InvalidArgument("-t {}: more threads than the {} CPU{} this process may use (use -t "
                           "{} or less)",
                           options.n_threads, cpus, cpus == 1 ? "" : "s", cpus);
  }
  std::unique_ptr<Context> ctx(new Context(model, n_ctx));
  ctx->impl_ = std::make_unique<Impl>(model, n_ctx, options);
  Impl& impl = *ctx->impl_;
  Result<StoragePlan> plan =
      PlanStorage(model, impl.kv_bytes(), impl.scratch_bytes(), options.storage);
  if (!plan.ok()) return plan.status();
  impl.plan = plan.value();
  impl.routing = RoutingStats(model.hparams().arch, model.hparams().n_layer,
                              model.hparams().n_expert);
  if (!options.routing_stats_file.empty()) {
    Result<RoutingStats> loaded =
        RoutingStats::Load(options.routing_stats_file, model.hparams().arch,
                           model.hparams().n_layer, model.hparams().n_expert);
    if (loaded.ok()) {
      impl.routing = std::move(loaded.value());
    } else if (loaded.status().code() != StatusCode::kNotFound) {
      return loaded.status();  // a file that exists must be right; a missing one starts cold
    }
  }
  std::optional<RoutingStats> profile;
  if (!options.storage.placement_file.empty()) {
    Result<RoutingStats> p =
        RoutingStats::Load(options.storage.placement_file, model.hparams().arch,
                           model.hparams().n_layer, model.hparams().n_expert);
    if (!p.ok()) return p.status();
    profile = std::move(p.value());
  } else if (impl.routing.tokens() > 0) {
    profile = impl.routing;  // a warm restart places what it saw last time
  }
  Result<std::unique_ptr<ExpertStore>> store = CreateExpertStore(
      model, impl.plan, options.storage, profile ? &*profile : nullptr, &impl.pool);
  if (!store.ok()) return store.status();
  impl.store = std::move(store.value());
  if (auto* stream = dynamic_cast<StreamStore*>(impl.store.get())) {
    if (options.storage.prefetch) {
      // A pack's single-request reads land early enough for a second layer of hints to pay
      // (olmoe pack, 25 %: +14 %, median of 3 pairs); on a tensor-major file they do not
      // (-2-3 %).
      const uint32_t depth = options.storage.prefetch_depth != 0 ? options.storage.prefetch_depth
                             : model.expert_layout().has_records() ? 2
                                                                   : 1;
      impl.prefetch_depth = static_cast<int>(depth);
    }
    if (profile) {
      stream->Place(profile->RankByActivationsPerByte(ExpertBytesPerLayer(model)),
                    static_cast<uint32_t>(options.storage.placement_share * stream->n_slots()));
    }
  }
  MT_RETURN_IF_ERROR(impl.Allocate());
  return ctx;
}

Status Context::Eval(std::span<const int32_t> tokens, LogitsFor which, std::vector<float>* logits) {
  if (tokens.empty()) return InvalidArgument("nothing to evaluate: no tokens");
  if (n_past_ + tokens.size() > n_ctx_) {
    return Status(StatusCode::kResourceExhausted,
                  fmt::format("the context is full: {} + {} tokens do not fit in {} positions "
                              "(raise -c)",
                              n_past_, tokens.size(), n_ctx_));
  }
  std::vector<BatchToken> batch(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    batch[i] = {tokens[i], 0, n_past_ + static_cast<uint32_t>(i),
                which == LogitsFor::kAll || i + 1 == tokens.size()};
  }
  MT_RETURN_IF_ERROR(Decode(batch, logits));
  n_past_ += static_cast<uint32_t>(tokens.size());
  return Status::Ok();
}

Status Context::Decode(std::span<const BatchToken> batch, std::vector<float>* logits) {
  if (batch.empty()) return InvalidArgument("nothing to evaluate: no tokens");
  const uint32_t n_vocab = model_.hparams().n_vocab;
  size_t n_out = 0;
  for (const BatchToken& b : batch) {
    if (b.token < 0 || static_cast<uint32_t>(b.token) >= n_vocab) {
      return InvalidArgument("token id {} is outside the vocabulary (0..{})", b.token, n_vocab - 1);
    }
    if (b.seq >= impl_->n_seq) {
      return InvalidArgument("sequence {} is out of range (the context has {})", b.seq,
                             impl_->n_seq);
    }
    if (b.pos >= n_ctx_) {
      return Status(StatusCode::kResourceExhausted,
                    fmt::format("the context is full: position {} does not fit in {} positions "
                                "(raise -c)",
                                b.pos, n_ctx_));
    }
    n_out += b.logits;
  }
  logits->resize(n_out * n_vocab);
  const size_t B = impl_->n_batch;
  float* out = logits->data();
  for (size_t i = 0; i < batch.size(); i += B) {
    std::span<const BatchToken> part = batch.subspan(i, std::min(B, batch.size() - i));
    MT_RETURN_IF_ERROR(impl_->Forward(part, out));
    for (const BatchToken& b : part) {
      if (!b.logits) continue;
      // NaN or Inf weights (a GGUF's bytes carry no checksum) would otherwise be sampled
      // from silently: one bad logit spreads to every later token.
      if (!std::all_of(out, out + n_vocab, [](float v) { return std::isfinite(v); })) {
        return Corrupt("the model computed a NaN or infinite logit at position {} of sequence "
                       "{}: some weight is NaN or infinite",
                       b.pos, b.seq);
      }
      out += n_vocab;
    }
  }
  return Status::Ok();
}

}  // namespace mt
