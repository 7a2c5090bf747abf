#include "engine/gpu_attention.h"

#include <algorithm>
#include <cstring>

#include "base/units.h"
#include "gpu/attention_ops.h"
#include "gpu/matmul.h"

namespace mt {

namespace {

constexpr uint64_t kNone = UINT64_MAX;  // an offset for a weight the layer does not have

bool IsGqa(const Model& m, int il) {
  return m.parts().layers[il].attention.kind == AttentionKind::kGqa;
}

gpu::KvElem DeviceKvElem(KvElemType t) {
  return t == KvElemType::kF32    ? gpu::KvElem::kF32
         : t == KvElemType::kQ8_0 ? gpu::KvElem::kQ8_0
                                  : gpu::KvElem::kF16;
}

uint64_t CacheBytesPerPosition(const HParams& hp, KvTypes kv) {
  return KvBytes(kv.k, hp.n_embd_k_gqa()) + KvBytes(kv.v, hp.n_embd_v_gqa());
}

}  // namespace

struct GpuGqaAttention::Impl {
  // One GQA layer's weights in one device buffer (byte offsets; kNone: absent) and its cache.
  struct Layer {
    gpu::Buffer weights;
    GgmlType tq = GgmlType::kF32, tk = GgmlType::kF32, tv = GgmlType::kF32, to = GgmlType::kF32;
    uint64_t wq = 0, wk = 0, wv = 0, wo = 0;
    uint64_t bq = kNone, bk = kNone, bv = kNone, bo = kNone;
    uint64_t q_norm = kNone, k_norm = kNone, sinks = kNone;
    bool gated = false;   // attn_q's rows per head [q | gate]: the output times sigmoid(gate)
    gpu::Buffer k_cache;  // (n_seq, n_head_kv, n_ctx, head_dim_k) of kv_types.k
    gpu::Buffer v_cache;  // (n_seq, n_head_kv, n_ctx, head_dim_v) of kv_types.v
  };
  std::vector<Layer> layers;  // (n_layer) empty for other kinds' layers
  // Device-local rows.
  gpu::Buffer x;     // (n_batch, n_embd) the input
  gpu::Buffer qg;    // (n_batch, 2 * n_head * head_dim_k) [q | gate] per head (a gated model)
  gpu::Buffer q;     // (n_batch, n_head * head_dim_k)
  gpu::Buffer k;     // (n_batch, n_head_kv * head_dim_k)
  gpu::Buffer v;     // (n_batch, n_head_kv * head_dim_v)
  gpu::Buffer attn;  // (n_batch, n_head * head_dim_v) the heads' outputs
  gpu::Buffer y;     // (n_batch, n_embd) the output
};

Status GpuAttentionBlock::CreateStaging() {
  gpu::Device& dev = *gpu_.device;
  const uint64_t B = shape_.n_batch, D = hp_.n_embd;
  const uint64_t n_rot = std::max<uint64_t>(model_.parts().rope.n_rot, 1);
  in_ = MT_TRY(dev.CreateHostBuffer(B * D * 4));
  out_ = MT_TRY(dev.CreateHostBuffer(B * D * 4));
  tokens_ = MT_TRY(dev.CreateHostBuffer(B * 2 * 4));
  cos_sin_ = MT_TRY(dev.CreateHostBuffer(B * n_rot * 4));
  scratch_bytes_ += B * (2 * D + 2 + n_rot) * 4;
  return Status::Ok();
}

Status GpuAttentionBlock::CheckCacheBinding(const gpu::Device& device, uint64_t bytes,
                                            std::string_view what) {
  if (bytes <= device.max_storage_range()) return Status::Ok();
  return Unimplemented(
      "a layer's {} of {} is more than the device binds at once ({}): use a shorter -c or fewer "
      "sequences",
      what, HumanBytes(bytes), HumanBytes(device.max_storage_range()));
}

void GpuAttentionBlock::Stage(std::span<const BatchToken> batch, const float* xn,
                              const float* rope_cs) {
  const size_t n = batch.size();
  std::memcpy(in_.host_data(), xn, n * hp_.n_embd * sizeof(float));
  auto* tokens = reinterpret_cast<uint32_t*>(tokens_.host_data());
  for (size_t t = 0; t < n; ++t) {
    tokens[2 * t] = batch[t].seq;
    tokens[2 * t + 1] = batch[t].pos;
  }
  std::memcpy(cos_sin_.host_data(), rope_cs, n * model_.parts().rope.n_rot * sizeof(float));
}

void GpuAttentionBlock::Unstage(int64_t n, float* out) const {
  std::memcpy(out, out_.host_data(), static_cast<size_t>(n * hp_.n_embd) * sizeof(float));
}

std::string GpuGqaAttention::Unsupported(const Model& model, KvTypes kv_types) {
  const HParams& hp = model.hparams();
  if ((kv_types.k == KvElemType::kQ8_0 && hp.head_dim_k % kKvBlockQ8 != 0) ||
      (kv_types.v == KvElemType::kQ8_0 && hp.head_dim_v % kKvBlockQ8 != 0)) {
    return fmt::format("a q8_0 cache of heads of {}/{} dims (whole blocks of 32)", hp.head_dim_k,
                       hp.head_dim_v);
  }
  if (hp.head_dim_k % 2 != 0 || hp.head_dim_v % 2 != 0 || hp.head_dim_k > 256 ||
      hp.head_dim_v > 256 || model.parts().rope.n_rot % 2 != 0) {
    return fmt::format("head dimensions {}/{} (the device takes even ones up to 256)",
                       hp.head_dim_k, hp.head_dim_v);
  }
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    if (!IsGqa(model, static_cast<int>(il))) continue;
    if (model.parts().layers[il].attention.gqa.output_gate && hp.head_dim_k != hp.head_dim_v) {
      return fmt::format("an output gate over heads of {}/{} dims (the gate is as wide as V)",
                         hp.head_dim_k, hp.head_dim_v);
    }
    const LayerWeights& L = model.layer(static_cast<int>(il));
    const GgmlType types[] = {L.wq.type, L.wk.type, L.wv.type, L.wo.type};
    if (std::string why = NoShaderFor(types, static_cast<int>(il), "attention is"); !why.empty()) {
      return why;
    }
  }
  return "";
}

GpuGqaAttention::GpuGqaAttention(const Model& model, GpuBackend& gpu, const AttentionShape& shape)
    : GpuAttentionBlock(model, gpu, shape), impl_(std::make_unique<Impl>()) {}

GpuGqaAttention::~GpuGqaAttention() = default;

Result<std::unique_ptr<GpuGqaAttention>> GpuGqaAttention::Create(const Model& model,
                                                                 GpuBackend& gpu,
                                                                 const AttentionShape& shape) {
  if (std::string why = Unsupported(model, shape.kv_types); !why.empty()) {
    return Unimplemented("{}", why);
  }
  const HParams& hp = model.hparams();
  gpu::Device& dev = *gpu.device;
  // A layer's K (or V) cache is one binding.
  const uint64_t cache = uint64_t{shape.n_seq} * shape.n_ctx *
                         std::max(KvBytes(shape.kv_types.k, hp.n_embd_k_gqa()),
                                  KvBytes(shape.kv_types.v, hp.n_embd_v_gqa()));
  MT_RETURN_IF_ERROR(CheckCacheBinding(dev, cache, "KV cache"));
  std::unique_ptr<GpuGqaAttention> block(new GpuGqaAttention(model, gpu, shape));
  Impl& im = *block->impl_;
  im.layers.resize(hp.n_layer);
  bool gated = false;  // some layer has an output gate
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    if (!IsGqa(model, static_cast<int>(il))) continue;
    const LayerWeights& w = model.layer(static_cast<int>(il));
    Impl::Layer& L = im.layers[il];
    GpuWeightPack pack;
    L.tq = w.wq.type, L.tk = w.wk.type, L.tv = w.wv.type, L.to = w.wo.type;
    L.wq = pack.Add(w.wq), L.wk = pack.Add(w.wk), L.wv = pack.Add(w.wv), L.wo = pack.Add(w.wo);
    auto add = [&](const std::vector<float>& v) { return v.empty() ? kNone : pack.Add(v); };
    L.bq = add(w.bq), L.bk = add(w.bk), L.bv = add(w.bv), L.bo = add(w.bo);
    L.q_norm = add(w.attn_q_norm), L.k_norm = add(w.attn_k_norm), L.sinks = add(w.attn_sinks);
    L.gated = model.parts().layers[il].attention.gqa.output_gate;
    gated = gated || L.gated;
    L.weights = MT_TRY(pack.Upload(gpu));
    block->weight_bytes_ += pack.bytes();
    block->cache_bytes_ += CacheBytesPerPosition(hp, shape.kv_types) * shape.n_seq * shape.n_ctx;
    ++block->n_layers_;
  }
  const uint64_t B = shape.n_batch, D = hp.n_embd;
  const uint64_t QD = hp.n_embd_q(), KD = hp.n_embd_k_gqa(), VD = hp.n_embd_v_gqa();
  const uint64_t AD = uint64_t{hp.n_head} * hp.head_dim_v;
  MT_RETURN_IF_ERROR(block->CreateStaging());
  im.x = MT_TRY(dev.CreateBuffer(B * D * 4));
  if (gated) im.qg = MT_TRY(dev.CreateBuffer(B * 2 * QD * 4));
  im.q = MT_TRY(dev.CreateBuffer(B * QD * 4));
  im.k = MT_TRY(dev.CreateBuffer(B * KD * 4));
  im.v = MT_TRY(dev.CreateBuffer(B * VD * 4));
  im.attn = MT_TRY(dev.CreateBuffer(B * AD * 4));
  im.y = MT_TRY(dev.CreateBuffer(B * D * 4));
  // x and y, [q | gate], q, k, v, attn
  block->scratch_bytes_ += B * (2 * D + (gated ? 2 * QD : 0) + QD + KD + VD + AD) * 4;
  return block;
}

Status GpuGqaAttention::AllocateKv(bool /*populate*/) {
  gpu::Device& dev = *gpu_.device;
  const uint64_t cells = uint64_t{shape_.n_seq} * shape_.n_ctx;
  for (Impl::Layer& L : impl_->layers) {
    if (L.weights.size() == 0) continue;
    L.k_cache = MT_TRY(dev.CreateBuffer(cells * KvBytes(shape_.kv_types.k, hp_.n_embd_k_gqa())));
    L.v_cache = MT_TRY(dev.CreateBuffer(cells * KvBytes(shape_.kv_types.v, hp_.n_embd_v_gqa())));
  }
  return Status::Ok();
}

Status GpuGqaAttention::Run(int il, std::span<const BatchToken> batch, const float* xn,
                            const float* rope_cs, float* out) {
  Impl& im = *impl_;
  Impl::Layer& L = im.layers[il];
  const AttentionParts& parts = model_.parts().layers[il].attention;
  const RopeParts& rp = model_.parts().rope;
  const int64_t n = static_cast<int64_t>(batch.size());
  const int64_t D = hp_.n_embd, QD = hp_.n_embd_q(), KD = hp_.n_embd_k_gqa();
  const int64_t VD = hp_.n_embd_v_gqa();
  const int64_t dk = hp_.head_dim_k, dv = hp_.head_dim_v;
  const int64_t H = hp_.n_head, HKV = hp_.n_head_kv;
  Stage(batch, xn, rope_cs);

  gpu::MatMul& mm = *gpu_.matmul;
  gpu::AttentionOps& ops = *gpu_.ops;
  const gpu::TokenSlots slots{&tokens_, 0};
  Status recorded;
  auto keep = [&](Status s) {
    if (recorded.ok()) recorded = std::move(s);
  };
  auto bias = [&](gpu::CommandRecorder& rec, gpu::Buffer& x, int64_t width, uint64_t at) {
    if (at != kNone)
      keep(ops.Record(rec, gpu::AddBiasArgs{&x, 0, n, width, 0, &L.weights, at / 4}));
  };
  // The q/k norm of rows of `heads` heads: per head, or over the whole projection.
  auto norm = [&](gpu::CommandRecorder& rec, gpu::Buffer& x, int64_t heads, uint64_t at) {
    if (at == kNone) return;
    const bool per_head = parts.gqa.qk_norm == QkNorm::kPerHead;
    const int64_t dim = per_head ? dk : heads * dk;
    keep(ops.Record(rec, gpu::RmsNormArgs{&x, 0, &x, 0, n * heads * dk / dim, dim, 0, &L.weights,
                                          at / 4, hp_.rms_eps}));
  };
  auto rope = [&](gpu::CommandRecorder& rec, gpu::Buffer& x, int64_t heads) {
    if (rp.n_rot == 0) return;
    keep(ops.Record(rec, gpu::RopeArgs{&x, 0, n, heads, dk, 0, rp.n_rot, rp.type == RopeType::kNeox,
                                       &cos_sin_, 0}));
  };
  const gpu::KvElem kt = DeviceKvElem(shape_.kv_types.k), vt = DeviceKvElem(shape_.kv_types.v);
  Status run = gpu_.Execute([&](gpu::CommandRecorder& rec) {
    rec.Copy(in_, 0, im.x, 0, static_cast<uint64_t>(n * D) * 4);
    rec.Barrier();
    if (L.gated) {
      keep(mm.Record(rec, {L.tq, &L.weights, L.wq, &im.x, 0, &im.qg, 0, 2 * QD, D, n}));
    } else {
      keep(mm.Record(rec, {L.tq, &L.weights, L.wq, &im.x, 0, &im.q, 0, QD, D, n}));
    }
    keep(mm.Record(rec, {L.tk, &L.weights, L.wk, &im.x, 0, &im.k, 0, KD, D, n}));
    keep(mm.Record(rec, {L.tv, &L.weights, L.wv, &im.x, 0, &im.v, 0, VD, D, n}));
    rec.Barrier();
    if (L.gated) {  // each head's q out of its [q | gate]; the gates stay in qg
      keep(ops.Record(rec, gpu::CopyRowsArgs{&im.qg, 0, &im.q, 0, n * H, dk, 2 * dk, dk}));
      rec.Barrier();
    }
    bias(rec, im.q, QD, L.bq);
    bias(rec, im.k, KD, L.bk);
    bias(rec, im.v, VD, L.bv);
    rec.Barrier();
    norm(rec, im.q, H, L.q_norm);
    norm(rec, im.k, HKV, L.k_norm);
    rec.Barrier();
    rope(rec, im.q, H);
    rope(rec, im.k, HKV);
    rec.Barrier();
    const uint32_t cells = shape_.n_ctx;
    keep(ops.Record(rec,
                    gpu::StoreKvArgs{&im.k, 0, n, HKV, dk, 0, slots, &L.k_cache, 0, cells, kt}));
    keep(ops.Record(rec,
                    gpu::StoreKvArgs{&im.v, 0, n, HKV, dv, 0, slots, &L.v_cache, 0, cells, vt}));
    rec.Barrier();
    gpu::AttendArgs a;
    a.q = &im.q;
    a.out = &im.attn;
    a.n = n;
    a.n_head = H;
    a.n_head_kv = HKV;
    a.d_k = dk;
    a.d_v = dv;
    a.tokens = slots;
    a.k_cache = &L.k_cache;
    a.v_cache = &L.v_cache;
    a.cells = cells;
    a.k_type = kt;
    a.v_type = vt;
    a.scale = parts.kq_scale;
    a.window = parts.sliding_window;
    if (L.sinks != kNone) {
      a.sinks = &L.weights;
      a.sinks_offset = L.sinks / 4;
    }
    keep(ops.Record(rec, a));
    rec.Barrier();
    if (L.gated) {  // each head's output times sigmoid(its gate): dv == dk
      keep(ops.Record(rec, gpu::SigmoidGateArgs{&im.attn, 0, &im.qg, static_cast<uint64_t>(dk),
                                                n * H, dv, dv, 2 * dk}));
      rec.Barrier();
    }
    keep(mm.Record(rec, {L.to, &L.weights, L.wo, &im.attn, 0, &im.y, 0, D, H * dv, n}));
    rec.Barrier();
    bias(rec, im.y, D, L.bo);
    rec.Barrier();
    rec.Copy(im.y, 0, out_, 0, static_cast<uint64_t>(n * D) * 4);
  });
  MT_RETURN_IF_ERROR(recorded.WithContext(fmt::format("device attention, layer {}", il)));
  MT_RETURN_IF_ERROR(run.WithContext(fmt::format("device attention, layer {}", il)));
  Unstage(n, out);
  return Status::Ok();
}

}  // namespace mt
