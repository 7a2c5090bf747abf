// The forward pass: embeddings -> per layer (attention, then the FFN: engine/moe_step.h) ->
// output norm -> logits. Buffers are sized in Create; Eval allocates nothing but the
// caller's logits.
#include "engine/context.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <utility>

#include "base/aligned_buffer.h"
#include "base/thread_pool.h"
#include "base/units.h"
#include "engine/attention_block.h"
#include "engine/gpu_attention.h"
#include "engine/gpu_dense.h"
#include "engine/moe_step.h"
#include "engine/projection.h"
#include "engine/scratch.h"
#include "engine/swiglu_ffn.h"
#include "gpu/device.h"
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
  // --device, --gpu-expert-cache: opens the device and moves there what it can run (the GQA
  // layers' attention, the experts asked for), sets what the storage options must know of
  // it, and returns the plan's line (or why there is no device).
  Result<std::string> PlaceOnDevice(const ContextOptions& o, const RoutingStats* profile,
                                    StorageOptions* storage);
  // What the device takes, for the plan's line: each part's description and device bytes, or
  // the name and reason of a part left on the CPU.
  struct DevicePlacement {
    std::vector<std::string> held;    // "the output head (25.9 MiB, rows 63.2 MiB)"
    std::vector<std::string> on_cpu;  // "the output head (the output head is ..., which ...)"
    uint64_t used = 0;                // device bytes
    void Hold(std::string what, uint64_t bytes) {
      held.push_back(std::move(what));
      used += bytes;
    }
    // The part `create` makes, or none when it says kUnimplemented (`name (why)` noted for the
    // CPU, and its uploads not counted as the device's); other errors are returned.
    template <class Create>
    auto Take(std::string_view name, GpuBackend& device, Create create) -> decltype(create()) {
      const size_t uploads = device.uploaded_from.size();
      auto made = create();
      if (made.ok() || made.status().code() != StatusCode::kUnimplemented) return made;
      on_cpu.push_back(fmt::format("{} ({})", name, made.status().message()));
      device.uploaded_from.resize(uploads);                  // the CPU computes from those bytes
      return std::remove_cvref_t<decltype(made.value())>();  // none
    }
  };
  // Moves the attention of `kind`'s layers to the device as a `Block` (GpuGqaAttention, ...),
  // when the model has such layers and the device takes them.
  template <class Block>
  Status PlaceAttention(AttentionKind kind, std::string_view what, std::string_view on_cpu_name,
                        std::string_view cache, Block** on_device, DevicePlacement& p);
  // Counts (the memory plan) or allocates the scratch of the forward pass.
  void SizeScratch(ScratchSizer& sizer);

  // Runs a batch of at most n_batch tokens; writes the logits of the tokens that want them,
  // in batch order, to `logits` (n_vocab each).
  Status Forward(std::span<const BatchToken> batch, float* logits);

  const Model& model;
  const HParams& hp;
  const ModelParts& parts;
  const uint32_t n_ctx;
  const uint32_t n_seq;
  const uint32_t n_batch;
  const KvTypes kv_types;  // K's and V's element types
  const bool populate_kv;
  ThreadPool pool;
  StoragePlan plan;
  std::unique_ptr<ExpertStore> store;
  std::unique_ptr<GpuBackend> device;       // --device: what runs there shares it; before its parts
  std::unique_ptr<GpuExpertTier> gpu;       // the experts on a device, or none
  std::unique_ptr<GpuOutputHead> head;      // the output head on a device, or none
  std::unique_ptr<GpuSwiGluBlocks> swiglu;  // shared experts and dense FFNs on a device, or none
  // The blocks a layer is made of, by its parts; a kind no layer uses has none.
  std::array<std::unique_ptr<AttentionBlock>, kAttentionKinds> attention;  // by AttentionKind
  GpuGqaAttention* gpu_attention = nullptr;  // attention[kGqa] when it runs on the device
  GpuMlaAttention* gpu_mla = nullptr;        // attention[kMla] when it runs on the device
  MoeStep moe;                               // routed (and shared) experts
  std::optional<SwiGluFfn> dense;            // dense FFN layers
  // attention[kDeltaNet] when it runs on the device
  GpuDeltaNetAttention* gpu_deltanet = nullptr;

  // Activations, one row per token of the batch.
  std::vector<float> x;             // (n_batch, n_embd) residual stream
  std::vector<float> xn;            // (n_batch, n_embd) normed input of a block, then its output
  std::vector<float> rope_cs;       // (n_batch, n_rot) each token's rotation cosines, then sines
  std::vector<float> ffn_out;       // (n_batch, n_embd) the FFN block's output
  QuantizedInput in_head;           // the output head's input
  std::vector<int32_t> logit_rows;  // (n_batch) batch indices of the tokens that want logits
};

namespace {

int64_t WidestDenseFfn(const ModelParts& parts) {
  int64_t widest = 0;
  for (const LayerParts& l : parts.layers) {
    if (l.ffn.kind == FfnKind::kDense) widest = std::max<int64_t>(widest, l.ffn.n_ff);
  }
  return widest;
}

}  // namespace

Context::Impl::Impl(const Model& m, uint32_t n_ctx_, const ContextOptions& o)
    : model(m),
      hp(m.hparams()),
      parts(m.parts()),
      n_ctx(n_ctx_),
      n_seq(std::max(o.n_seq_max, 1u)),
      n_batch(std::max(o.n_batch, 1u)),
      kv_types(o.kv_types),
      populate_kv(o.populate_kv),
      pool(o.n_threads, o.pin_threads),
      moe(m, pool, n_batch) {
  const AttentionShape shape{n_ctx, n_seq, n_batch, kv_types};
  for (const LayerParts& l : parts.layers) {
    std::unique_ptr<AttentionBlock>& block = attention[static_cast<int>(l.attention.kind)];
    if (!block) block = MakeAttentionBlock(l.attention.kind, m, pool, shape);
  }
  if (const int64_t widest = WidestDenseFfn(parts); widest > 0) {
    dense.emplace(pool, n_batch, hp.n_embd, widest);
  }
}

uint64_t Context::Impl::kv_bytes() const {
  uint64_t bytes = 0;
  for (const auto& block : attention) bytes += block ? block->kv_bytes() : 0;
  return bytes;
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
  sizer.Resize(rope_cs, B * parts.rope.n_rot);
  sizer.Resize(ffn_out, B * D);
  sizer.Reserve(logit_rows, B);
  sizer.Reserve(in_head, static_cast<int64_t>(B), static_cast<int64_t>(D));
  for (const auto& block : attention) {
    if (block) block->SizeScratch(sizer);
  }
  if (dense) dense->SizeScratch(sizer);
  moe.SizeScratch(sizer);
}

Status Context::Impl::Allocate() {
  ScratchSizer allocate(ScratchSizer::kAllocate);
  SizeScratch(allocate);
  for (const auto& block : attention) {
    if (block) MT_RETURN_IF_ERROR(block->AllocateKv(populate_kv));
  }
  return Status::Ok();
}

Status Context::Impl::Forward(std::span<const BatchToken> batch, float* logits) {
  MT_RETURN_IF_ERROR(store->CheckFiles());
  ThreadPool::KeepAwake awake(pool);  // between regions, however long the serial parts
  const int n = static_cast<int>(batch.size());
  moe.routing().AddTokens(static_cast<uint64_t>(n));
  const int64_t D = hp.n_embd;
  const WeightMatrix& embd = model.token_embd();
  for (int t = 0; t < n; ++t) {
    DequantizeRow(embd.type, embd.row(batch[t].token), x.data() + t * D, D);
  }
  const RopeParts& rp = parts.rope;
  const RopeFreqs freqs{rp.n_rot,       rp.freq_base, rp.freq_scale, rp.ext_factor,
                        rp.attn_factor, rp.corr_low,  rp.corr_high};
  for (int t = 0; t < n; ++t) {
    RopeAngles(freqs, static_cast<int>(batch[t].pos), rope_cs.data() + int64_t{t} * rp.n_rot);
  }
  for (int il = 0; il < static_cast<int>(hp.n_layer); ++il) {
    const LayerWeights& L = model.layer(il);
    const LayerParts& lp = parts.layers[il];
    for (int t = 0; t < n; ++t) {
      RmsNorm(x.data() + t * D, L.attn_norm.data(), D, hp.rms_eps, xn.data() + t * D);
    }
    MT_RETURN_IF_ERROR(attention[static_cast<int>(lp.attention.kind)]->Run(
        il, batch, xn.data(), rope_cs.data(), xn.data()));
    for (int64_t i = 0; i < int64_t{n} * D; ++i) x[i] += xn[i];

    for (int t = 0; t < n; ++t) {
      RmsNorm(x.data() + t * D, L.ffn_norm.data(), D, hp.rms_eps, xn.data() + t * D);
    }
    if (lp.has_experts()) {
      MT_RETURN_IF_ERROR(moe.Run(il, n, x.data(), xn.data(), ffn_out.data()));
    } else if (swiglu) {
      MT_RETURN_IF_ERROR(swiglu->Run(il, xn.data(), n, ffn_out.data()));
    } else {
      dense->Run(L.ffn_gate, L.ffn_up, L.ffn_down, xn.data(), n, ffn_out.data());
    }
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
  if (head) return head->Run(xn.data(), static_cast<int64_t>(logit_rows.size()), logits);
  in_head.Set(xn.data(), D, static_cast<int64_t>(logit_rows.size()), D);
  Project(pool, model.output(), in_head, logits, hp.n_vocab);
  return Status::Ok();
}

Context::Context(const Model& model, uint32_t n_ctx) : model_(model), n_ctx_(n_ctx) {}
Context::~Context() = default;

uint32_t Context::n_vocab() const { return model_.hparams().n_vocab; }
const StoragePlan& Context::storage_plan() const { return impl_->plan; }
ExpertStore& Context::expert_store() { return *impl_->store; }
GpuExpertTier* Context::gpu_experts() const { return impl_->gpu.get(); }

Result<uint32_t> Context::PromoteDeviceExperts() {
  if (!impl_->gpu) return 0u;
  return impl_->gpu->Promote(impl_->moe.routing(), *impl_->store);
}

Context::DeviceParts Context::device_parts() const {
  DeviceParts d;
  const Impl& im = *impl_;
  if (!im.device) return d;
  d.name = im.device->name();
  d.attention_layers = (im.gpu_attention != nullptr ? im.gpu_attention->n_layers() : 0) +
                       (im.gpu_mla != nullptr ? im.gpu_mla->n_layers() : 0) +
                       (im.gpu_deltanet != nullptr ? im.gpu_deltanet->n_layers() : 0);
  d.output_head = im.head != nullptr;
  d.swiglu_layers = im.swiglu ? im.swiglu->n_layers() : 0;
  return d;
}
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

template <class Block>
Status Context::Impl::PlaceAttention(AttentionKind kind, std::string_view what,
                                     std::string_view on_cpu_name, std::string_view cache,
                                     Block** on_device, DevicePlacement& p) {
  std::unique_ptr<AttentionBlock>& slot = attention[static_cast<int>(kind)];
  if (!slot) return Status::Ok();  // no layer of this kind
  const AttentionShape shape{n_ctx, n_seq, n_batch, kv_types};
  std::unique_ptr<Block> block =
      MT_TRY(p.Take(on_cpu_name, *device, [&] { return Block::Create(model, *device, shape); }));
  if (!block) return Status::Ok();
  p.Hold(fmt::format("the {} of {} layers ({}, {} {}, rows {})", what, block->n_layers(),
                     HumanBytes(block->weight_bytes()), cache, HumanBytes(block->cache_bytes()),
                     HumanBytes(block->scratch_bytes())),
         block->weight_bytes() + block->cache_bytes() + block->scratch_bytes());
  *on_device = block.get();
  slot = std::move(block);
  return Status::Ok();
}

Result<std::string> Context::Impl::PlaceOnDevice(const ContextOptions& o,
                                                 const RoutingStats* profile,
                                                 StorageOptions* storage) {
  Result<std::unique_ptr<GpuBackend>> opened = GpuBackend::Open(std::max(o.gpu.device, 0), pool);
  if (!opened.ok()) {
    const Status& s = opened.status();
    if (s.code() == StatusCode::kNotFound ||
        (s.code() == StatusCode::kUnimplemented && !gpu::HaveVulkan())) {
      // No device (or no Vulkan in this build): said once, and the CPU does it all.
      return fmt::format("no device, everything on the CPU ({})", s.message());
    }
    return s;
  }
  device = std::move(opened.value());
  DevicePlacement p;
  MT_RETURN_IF_ERROR(
      PlaceAttention(AttentionKind::kGqa, "attention", "attention", "KV cache", &gpu_attention, p));
  MT_RETURN_IF_ERROR(PlaceAttention(AttentionKind::kMla, "MLA attention", "MLA attention",
                                    "latent cache", &gpu_mla, p));
  MT_RETURN_IF_ERROR(PlaceAttention(AttentionKind::kDeltaNet, "DeltaNet attention",
                                    "DeltaNet layers", "states", &gpu_deltanet, p));
  p.on_cpu.push_back("norms and routers");
  head = MT_TRY(p.Take("the output head", *device,
                       [&] { return GpuOutputHead::Create(model, *device, n_batch); }));
  if (head) {
    p.Hold(fmt::format("the output head ({}, rows {})", HumanBytes(head->weight_bytes()),
                       HumanBytes(head->scratch_bytes())),
           head->weight_bytes() + head->scratch_bytes());
  }
  swiglu = MT_TRY(p.Take("the shared experts and dense FFNs", *device,
                         [&] { return GpuSwiGluBlocks::Create(model, *device, n_batch); }));
  if (swiglu) {
    p.Hold(fmt::format("the shared experts and dense FFNs of {} layers ({}, rows {})",
                       swiglu->n_layers(), HumanBytes(swiglu->weight_bytes()),
                       HumanBytes(swiglu->scratch_bytes())),
           swiglu->weight_bytes() + swiglu->scratch_bytes());
    moe.AttachGpuBlocks(swiglu.get());
  }
  const uint64_t memory = device->device->info().device_local_bytes;
  if (p.used > memory) {
    return Status(StatusCode::kResourceExhausted,
                  fmt::format("--device: the dense part's {} do not fit the "
                              "{} of device memory of {} (use a shorter -c)",
                              HumanBytes(p.used), HumanBytes(memory), device->name()));
  }
  if (o.gpu.experts_wanted()) {
    gpu = MT_TRY(
        GpuExpertTier::Create(model, *device, o.gpu, n_batch * hp.n_expert_used, profile, p.used));
    storage->on_device = gpu->OwnedFlags();
    storage->on_device_bytes = gpu->payload_bytes();
    p.Hold(fmt::format("{} routed experts ({}, rows {})", gpu->n_experts(),
                       HumanBytes(gpu->weight_bytes()), HumanBytes(gpu->scratch_bytes())),
           gpu->weight_bytes() + gpu->scratch_bytes());
  }
  device->ReleaseUploadedPages(model.gguf());  // no host copy of what the device holds
  if (device->shares_host_memory()) storage->device_in_ram = p.used;
  return fmt::format(
      "device {}: {}{}; {} on the CPU", device->name(),
      p.held.empty() ? std::string("nothing") : fmt::format("{}", fmt::join(p.held, ", ")),
      device->shares_host_memory() ? ", in the host's RAM (counted in the budget)" : "",
      fmt::join(p.on_cpu, ", "));
}

Result<std::unique_ptr<Context>> Context::Create(const Model& model,
                                                 const ContextOptions& options) {
  const uint32_t n_train = model.hparams().n_ctx_train;
  const uint32_t n_ctx = options.n_ctx == 0 ? n_train : options.n_ctx;
  if (n_ctx > n_train) {
    return InvalidArgument(
        "context size {} is longer than the model's training context {} "
        "(use -c {} or less)",
        n_ctx, n_train, n_train);
  }
  if (n_ctx < 1) return InvalidArgument("context size must be at least 1");
  if (options.n_seq_max > 1024) return InvalidArgument("at most 1024 sequences per context");
  const HParams& hp = model.hparams();
  // The cache rows: a head's K and V (GQA), or the latent row and its first L values (MLA,
  // cached in K's type).
  const AttentionParts& attn0 = model.parts().layers[0].attention;
  const bool mla = attn0.kind == AttentionKind::kMla;
  const uint32_t k_row = mla ? attn0.mla.kv_lora_rank + hp.n_rot : hp.head_dim_k;
  const uint32_t v_row = mla ? attn0.mla.kv_lora_rank : hp.head_dim_v;
  const KvElemType v_type = mla ? options.kv_types.k : options.kv_types.v;
  if (options.kv_types.k == KvElemType::kQ8_0 && (k_row % kKvBlockQ8 != 0 || k_row > kKvMaxDimQ8)) {
    return InvalidArgument(
        "a q8_0 K cache needs a K head dimension that is a multiple of {} "
        "and at most {} (this model's: {}); use f16",
        kKvBlockQ8, kKvMaxDimQ8, k_row);
  }
  if (v_type == KvElemType::kQ8_0 && v_row % kKvBlockQ8 != 0) {
    return InvalidArgument(
        "a q8_0 V cache needs a V head dimension that is a multiple of {} "
        "(this model's: {}); use f16",
        kKvBlockQ8, v_row);
  }
  // Workers spin while they wait for the next region, so a thread without a CPU of its own
  // stalls every region it takes part in (-t 3 on 2 CPUs: prompt 30x slower).
  if (const int cpus = ThreadPool::DefaultThreads(); options.n_threads > cpus) {
    return InvalidArgument(
        "-t {}: more threads than the {} CPU{} this process may use (use -t "
        "{} or less)",
        options.n_threads, cpus, cpus == 1 ? "" : "s", cpus);
  }
  std::unique_ptr<Context> ctx(new Context(model, n_ctx));
  ctx->impl_ = std::make_unique<Impl>(model, n_ctx, options);
  Impl& impl = *ctx->impl_;
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
    profile = MT_TRY(RoutingStats::Load(options.storage.placement_file, model.hparams().arch,
                                        model.hparams().n_layer, model.hparams().n_expert));
  } else if (routing.tokens() > 0) {
    profile = routing;  // a warm restart places what it saw last time
  }
  // The device's parts first: the memory plan leaves them out of RAM.
  StorageOptions storage = options.storage;
  std::string gpu_line;
  if (options.gpu.wanted()) {
    gpu_line = MT_TRY(impl.PlaceOnDevice(options, profile ? &*profile : nullptr, &storage));
  }
  impl.plan = MT_TRY(PlanStorage(model, impl.kv_bytes(), impl.scratch_bytes(), storage));
  impl.plan.gpu = gpu_line;
  if (mla) {
    impl.plan.kv_layout = fmt::format("MLA latent: {} values a position and layer, {}", k_row,
                                      KvTypeName(options.kv_types.k));
  }
  if (const auto& delta = impl.attention[static_cast<int>(AttentionKind::kDeltaNet)]) {
    uint32_t layers = 0;
    DeltaNetParts d;
    for (const LayerParts& l : model.parts().layers) {
      if (l.attention.kind != AttentionKind::kDeltaNet) continue;
      ++layers;
      d = l.attention.delta_net;
    }
    impl.plan.kv_layout = fmt::format(
        "with recurrent states: {} layers x {} a sequence, kept 3 times (live, next, the "
        "checkpoint before a prompt's last token)",
        layers, HumanBytes(DeltaNetAttention::StateBytes(d)));
  }
  impl.store = MT_TRY(
      CreateExpertStore(model, impl.plan, storage, profile ? &*profile : nullptr, &impl.pool));
  model.ReleaseCopiedPages();  // those the experts' copy or upload mapped back in
  int prefetch_depth = 0;
  if (ExpertStore& bounded = *impl.store; bounded.cache_slots() > 0) {
    if (options.storage.prefetch) {
      // A pack's single-request reads land early enough for a second layer of hints to pay
      // (olmoe pack, 25 %: +14 %, median of 3 pairs); on a tensor-major file they do not
      // (-2-3 %).
      const uint32_t depth = options.storage.prefetch_depth != 0   ? options.storage.prefetch_depth
                             : model.expert_layout().has_records() ? 2
                                                                   : 1;
      prefetch_depth = static_cast<int>(depth);
    }
    if (profile) {
      bounded.Place(profile->RankByActivationsPerByte(ExpertBytesPerLayer(model)),
                    static_cast<uint32_t>(options.storage.placement_share * bounded.cache_slots()));
    }
  }
  impl.moe.Attach(impl.store.get(), prefetch_depth);
  impl.moe.AttachGpu(impl.gpu.get());
  MT_RETURN_IF_ERROR(impl.Allocate());
  return ctx;
}

uint32_t Context::ReusablePrefix(uint32_t seq, uint32_t n) const {
  // Until every block agrees: a shorter prefix one block needs may not suit another.
  for (uint32_t before = n + 1; n != before;) {
    before = n;
    for (const auto& block : impl_->attention) {
      if (block) n = std::min(n, block->ReusablePrefix(seq, n));
    }
  }
  return n;
}

Result<size_t> Context::EvalAfterPrefix(std::span<const int32_t> held,
                                        std::span<const int32_t> tokens,
                                        std::vector<float>* logits) {
  if (tokens.empty()) return InvalidArgument("nothing to evaluate: no tokens");
  const size_t limit = std::min<size_t>(n_past_, held.size());
  size_t keep = 0;
  while (keep < limit && keep + 1 < tokens.size() && held[keep] == tokens[keep]) ++keep;
  keep = ReusablePrefix(0, static_cast<uint32_t>(keep));
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
  auto& blocks = impl_->attention;
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (!blocks[i]) continue;
    if (Status s = blocks[i]->BeginDecode(batch); !s.ok()) {
      for (size_t j = 0; j < i; ++j) {
        if (blocks[j]) blocks[j]->EndDecode(false);
      }
      return s;
    }
  }
  const Status status = DecodeParts(batch, logits->data());
  for (const auto& block : blocks) {
    if (block) block->EndDecode(status.ok());
  }
  return status;
}

Status Context::DecodeParts(std::span<const BatchToken> batch, float* out) {
  const uint32_t n_vocab = model_.hparams().n_vocab;
  const size_t B = impl_->n_batch;
  for (size_t i = 0; i < batch.size(); i += B) {
    std::span<const BatchToken> part = batch.subspan(i, std::min(B, batch.size() - i));
    MT_RETURN_IF_ERROR(impl_->Forward(part, out));
    for (const BatchToken& b : part) {
      if (!b.logits) continue;
      // NaN or Inf weights (a GGUF's bytes carry no checksum) would otherwise be sampled
      // from silently: one bad logit spreads to every later token.
      if (!std::all_of(out, out + n_vocab, [](float v) { return std::isfinite(v); })) {
        return Corrupt(
            "the model computed a NaN or infinite logit at position {} of sequence "
            "{}: some weight is NaN or infinite",
            b.pos, b.seq);
      }
      out += n_vocab;
    }
  }
  return Status::Ok();
}

}  // namespace mt
