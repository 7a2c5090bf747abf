// The forward pass: embeddings -> per layer (attention, then the FFN: engine/moe_step.h) ->
// output norm -> logits. Buffers are sized in Create; Eval allocates nothing but the
// caller's logits.
#include "engine/context.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <utility>

#include "base/aligned_buffer.h"
#include "base/thread_pool.h"
#include "engine/moe_step.h"
#include "engine/projection.h"
#include "engine/scratch.h"
#include "experts/stream_store.h"
#include "kernels/attention.h"
#include "kernels/ops.h"
#include "quant/dequant.h"

namespace mt {

struct Context::Impl {
  Impl(const Model& m, uint32_t n_ctx, const ContextOptions& o);

  // The bytes Allocate will take, for the memory plan.
  uint64_t kv_bytes() const;
  uint64_t scratch_bytes();
  Status Allocate();
  // Counts (the memory plan) or allocates the scratch of the forward pass.
  void SizeScratch(ScratchSizer& sizer);

  // Runs a batch of at most n_batch tokens; writes the logits of the tokens that want them,
  // in batch order, to `logits` (n_vocab each).
  Status Forward(std::span<const BatchToken> batch, float* logits);
  // The q, k, v rows of the batch made ready for attention (bias, q/k norm, rotation), and k
  // and v stored into the cache; tokens' q and k/v in parallel (each item is independent).
  void PrepareAttention(int il, std::span<const BatchToken> batch);
  // Stores one token's projection (n_head_kv heads of head_dim) into a layer's K or V cache.
  void StoreHeads(const float* row, uint32_t head_dim, KvElemType type, uint8_t* cache,
                  const BatchToken& token) const;
  // Splits the batch into Attention's runs (run_start, n_runs): the same for every layer.
  void FindAttentionRuns(std::span<const BatchToken> batch);
  void Attention(int il, std::span<const BatchToken> batch);

  const Model& model;
  const HParams& hp;
  const ArchDef& arch;
  const uint32_t n_ctx;
  const uint32_t n_seq;
  const uint32_t n_batch;
  const KvTypes kv_types;  // K's and V's element types
  const bool populate_kv;
  ThreadPool pool;
  StoragePlan plan;
  std::unique_ptr<ExpertStore> store;
  MoeStep moe;  // the FFN blocks

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
  std::vector<float> ffn_out;  // (n_batch, n_embd) the FFN block's output
  QuantizedInput in_main;      // the current block input (xn, attn) for dense projections
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
      kv_types(o.kv_types),
      populate_kv(o.populate_kv),
      pool(o.n_threads, o.pin_threads),
      moe(m, pool, n_batch) {}

uint64_t Context::Impl::kv_bytes() const {
  const uint64_t positions = uint64_t{hp.n_layer} * n_seq * n_ctx;
  return positions *
         (KvBytes(kv_types.k, hp.n_embd_k_gqa()) + KvBytes(kv_types.v, hp.n_embd_v_gqa()));
}

uint64_t Context::Impl::scratch_bytes() {
  ScratchSizer count(ScratchSizer::kCount);
  SizeScratch(count);
  return count.bytes();
}

void Context::Impl::SizeScratch(ScratchSizer& sizer) {
  const size_t B = n_batch, D = hp.n_embd;
  sizer.Resize(x, B * D);
  sizer.Resize(xn, B * D);
  sizer.Resize(q, B * hp.n_embd_q());
  sizer.Resize(k, B * hp.n_embd_k_gqa());
  sizer.Resize(v, B * hp.n_embd_v_gqa());
  sizer.Resize(attn, B * hp.n_head * hp.head_dim_v);
  sizer.Resize(rope_cs, B * hp.n_rot);
  sizer.Resize(scores,
               static_cast<size_t>(pool.size()) * attend_heads() * attend_tokens * kAttendTile);
  sizer.Resize(run_start, B + 1);
  sizer.Resize(ffn_out, B * D);
  sizer.Reserve(logit_rows, B);
  const int64_t widest = std::max<int64_t>(static_cast<int64_t>(D),
                                           int64_t{hp.n_head} * hp.head_dim_v);
  sizer.Reserve(in_main, static_cast<int64_t>(B), widest);
  moe.SizeScratch(sizer);
}

Status Context::Impl::Allocate() {
  ScratchSizer allocate(ScratchSizer::kAllocate);
  SizeScratch(allocate);
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    const uint64_t positions = uint64_t{n_seq} * n_ctx;
    Result<AlignedBuffer> kb =
        AlignedBuffer::Allocate(positions * KvBytes(kv_types.k, hp.n_embd_k_gqa()));
    Result<AlignedBuffer> vb =
        AlignedBuffer::Allocate(positions * KvBytes(kv_types.v, hp.n_embd_v_gqa()));
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

void Context::Impl::StoreHeads(const float* row, uint32_t head_dim, KvElemType type,
                               uint8_t* cache, const BatchToken& token) const {
  const int64_t row_bytes = KvBytes(type, head_dim);
  for (uint32_t h = 0; h < hp.n_head_kv; ++h) {
    const int64_t cell = (int64_t{token.seq} * hp.n_head_kv + h) * n_ctx + token.pos;
    StoreKv(row + size_t{h} * head_dim, head_dim, type, cache + cell * row_bytes);
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
          StoreHeads(kt, hp.head_dim_k, kv_types.k, k_cache[il].data(), batch[t]);
          break;
        }
        case kV: {
          float* vt = v.data() + t * VD;
          for (int64_t i = 0; i < VD && !L.bv.empty(); ++i) vt[i] += L.bv[i];
          StoreHeads(vt, hp.head_dim_v, kv_types.v, v_cache[il].data(), batch[t]);
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
  const int64_t k_row = KvBytes(kv_types.k, dk), v_row = KvBytes(kv_types.v, dv);  // bytes
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
        AttendTokens(qs, kc + head * k_row, vc + head * v_row, kv_types, dk, dv, dk, dv, scale, p);
      }
    }
  });
}

Status Context::Impl::Forward(std::span<const BatchToken> batch, float* logits) {
  MT_RETURN_IF_ERROR(store->CheckFiles());
  ThreadPool::KeepAwake awake(pool);  // between regions, however long the serial parts
  const int n = static_cast<int>(batch.size());
  moe.routing().AddTokens(static_cast<uint64_t>(n));
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
    ProjectAll(pool, {{&L.wq, q.data(), QD}, {&L.wk, k.data(), KD}, {&L.wv, v.data(), VD}},
               in_main);
    PrepareAttention(il, batch);
    Attention(il, batch);
    in_main.Set(attn.data(), AD, n, AD);
    Project(pool, L.wo, in_main, xn.data(), D);
    for (int64_t i = 0; i < int64_t{n} * D; ++i) x[i] += xn[i];

    for (int t = 0; t < n; ++t) {
      RmsNorm(x.data() + t * D, L.ffn_norm.data(), D, hp.rms_eps, xn.data() + t * D);
    }
    MT_RETURN_IF_ERROR(moe.Run(il, n, x.data(), xn.data(), ffn_out.data()));
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
  Project(pool, model.output(), in_main, logits, hp.n_vocab);
  return Status::Ok();
}

Context::Context(const Model& model, uint32_t n_ctx) : model_(model), n_ctx_(n_ctx) {}
Context::~Context() = default;

uint32_t Context::n_vocab() const { return model_.hparams().n_vocab; }
const StoragePlan& Context::storage_plan() const { return impl_->plan; }
ExpertStore& Context::expert_store() { return *impl_->store; }
RoutingStats& Context::routing_stats() { return impl_->moe.routing(); }
const std::vector<Context::PrefetchCounters>& Context::prefetch_counters() const {
  return impl_->moe.prefetch_counters();
}

int Context::prefetch_depth() const { return impl_->moe.prefetch_depth(); }

// The KV cache types by their CLI names.
constexpr std::pair<std::string_view, KvElemType> kKvTypeNames[] = {
    {"f16", KvElemType::kF16}, {"f32", KvElemType::kF32}, {"q8_0", KvElemType::kQ8_0}};

Result<KvElemType> ParseKvType(std::string_view name) {
  for (const auto& [text, type] : kKvTypeNames) {
    if (name == text) return type;
  }
  return InvalidArgument("--kv-type must be f16, f32 or q8_0, not '{}'", name);
}

const char* KvTypeName(KvElemType type) {
  for (const auto& [text, t] : kKvTypeNames) {
    if (t == type) return text.data();
  }
  return "?";
}

std::string KvTypesName(KvTypes types) {
  if (types.k == types.v) return KvTypeName(types.k);
  return fmt::format("K {}, V {}", KvTypeName(types.k), KvTypeName(types.v));
}

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
  const HParams& hp = model.hparams();
  if (options.kv_types.k == KvElemType::kQ8_0 &&
      (hp.head_dim_k % kKvBlockQ8 != 0 || hp.head_dim_k > kKvMaxDimQ8)) {
    return InvalidArgument("a q8_0 K cache needs a K head dimension that is a multiple of {} "
                           "and at most {} (this model's: {}); use f16",
                           kKvBlockQ8, kKvMaxDimQ8, hp.head_dim_k);
  }
  if (options.kv_types.v == KvElemType::kQ8_0 && hp.head_dim_v % kKvBlockQ8 != 0) {
    return InvalidArgument("a q8_0 V cache needs a V head dimension that is a multiple of {} "
                           "(this model's: {}); use f16",
                           kKvBlockQ8, hp.head_dim_v);
  }
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
  RoutingStats& routing = impl.moe.routing();
  routing = RoutingStats(model.hparams().arch, model.hparams().n_layer, model.hparams().n_expert);
  if (!options.routing_stats_file.empty()) {
    Result<RoutingStats> loaded =
        RoutingStats::Load(options.routing_stats_file, model.hparams().arch,
                           model.hparams().n_layer, model.hparams().n_expert);
    if (loaded.ok()) {
      routing = std::move(loaded.value());
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
  } else if (routing.tokens() > 0) {
    profile = routing;  // a warm restart places what it saw last time
  }
  Result<std::unique_ptr<ExpertStore>> store = CreateExpertStore(
      model, impl.plan, options.storage, profile ? &*profile : nullptr, &impl.pool);
  if (!store.ok()) return store.status();
  impl.store = std::move(store.value());
  int prefetch_depth = 0;
  if (auto* stream = dynamic_cast<StreamStore*>(impl.store.get())) {
    if (options.storage.prefetch) {
      // A pack's single-request reads land early enough for a second layer of hints to pay
      // (olmoe pack, 25 %: +14 %, median of 3 pairs); on a tensor-major file they do not
      // (-2-3 %).
      const uint32_t depth = options.storage.prefetch_depth != 0 ? options.storage.prefetch_depth
                             : model.expert_layout().has_records() ? 2
                                                                   : 1;
      prefetch_depth = static_cast<int>(depth);
    }
    if (profile) {
      stream->Place(profile->RankByActivationsPerByte(ExpertBytesPerLayer(model)),
                    static_cast<uint32_t>(options.storage.placement_share * stream->n_slots()));
    }
  }
  impl.moe.Attach(impl.store.get(), prefetch_depth);
  MT_RETURN_IF_ERROR(impl.Allocate());
  return ctx;
}

Result<size_t> Context::EvalAfterPrefix(std::span<const int32_t> held,
                                        std::span<const int32_t> tokens,
                                        std::vector<float>* logits) {
  if (tokens.empty()) return InvalidArgument("nothing to evaluate: no tokens");
  const size_t limit = std::min<size_t>(n_past_, held.size());
  size_t keep = 0;
  while (keep < limit && keep + 1 < tokens.size() && held[keep] == tokens[keep]) ++keep;
  TruncateKv(static_cast<uint32_t>(keep));
  MT_RETURN_IF_ERROR(Eval(tokens.subspan(keep), LogitsFor::kLast, logits));
  return keep;
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
