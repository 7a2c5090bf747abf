// DeepSeek's multi-head latent attention on the device (engine/gpu_attention.h), the math of
// engine/attention_mla.cc: for head h with q = [q_nope | q_pe] and a cached row [c | k_pe],
//   score = kq_scale * ([k_b_h^T q_nope_h | q_pe_h] . [c | k_pe]),
//   out_h = v_b_h (sum_j p_j c_j),
// then the output projection of the heads' outputs side by side.
#include <algorithm>
#include <cstring>

#include "base/units.h"
#include "engine/gpu_attention.h"
#include "gpu/attention_ops.h"
#include "gpu/matmul.h"

namespace mt {

namespace {

constexpr uint64_t kNone = UINT64_MAX;  // an offset for a weight the layer does not have

bool IsMla(const Model& m, int il) {
  return m.parts().layers[il].attention.kind == AttentionKind::kMla;
}

// The first MLA layer's parts (all MLA layers of a model have the same).
MlaParts FirstMla(const Model& m) {
  for (const LayerParts& l : m.parts().layers) {
    if (l.attention.kind == AttentionKind::kMla) return l.attention.mla;
  }
  return {};
}

gpu::KvElem DeviceKvElem(KvElemType t) {
  return t == KvElemType::kF32    ? gpu::KvElem::kF32
         : t == KvElemType::kQ8_0 ? gpu::KvElem::kQ8_0
                                  : gpu::KvElem::kF16;
}

// A layer's matrices in the order Unsupported checks them (absent ones: no rows).
std::vector<const WeightMatrix*> Matrices(const LayerWeights& w, bool q_lora) {
  if (q_lora) return {&w.wq_a, &w.wq_b, &w.wkv_a, &w.wk_b, &w.wv_b, &w.wo};
  return {&w.wq, &w.wkv_a, &w.wk_b, &w.wv_b, &w.wo};
}

}  // namespace

struct GpuMlaAttention::Impl {
  // Sizes: L latent, R rope dims, N nope dims, V value dims, H heads, Q q LoRA rank (0: none).
  int64_t L = 0, R = 0, N = 0, V = 0, H = 0, Q = 0;

  // One MLA layer's weights in one device buffer (byte offsets; kNone: absent) and its cache.
  struct Layer {
    gpu::Buffer weights;
    GgmlType tq = GgmlType::kF32, tq_a = GgmlType::kF32, tq_b = GgmlType::kF32;
    GgmlType tkv_a = GgmlType::kF32, tk_b = GgmlType::kF32, tv_b = GgmlType::kF32;
    GgmlType to = GgmlType::kF32;
    uint64_t wq = kNone, wq_a = kNone, q_a_norm = kNone, wq_b = kNone;
    uint64_t wkv_a = 0, kv_a_norm = 0, wk_b = 0, wv_b = 0, wo = 0;
    uint64_t k_b_row = 0, v_b_row = 0;  // bytes a row of attn_k_b, attn_v_b
    gpu::Buffer cache;                  // (n_seq, n_ctx, L + R) of kv_types.k: rows [c | k_pe]
  };
  std::vector<Layer> layers;  // (n_layer) empty for other kinds' layers
  // Device-local rows.
  gpu::Buffer x;       // (n_batch, n_embd) the input
  gpu::Buffer qa;      // (n_batch, Q) the q LoRA, normed (Q > 0 only)
  gpu::Buffer q;       // (n_batch, H, N + R) [q_nope | q_pe], then N floats (RoPE's range)
  gpu::Buffer kva;     // (n_batch, L + R) [c | k_pe], normed and rotated in place
  gpu::Buffer q_abs;   // (n_batch, H, L + R) absorbed queries [k_b_h^T q_nope_h | q_pe_h]
  gpu::Buffer latent;  // (n_batch, H, L) each head's attention over the rows' c
  gpu::Buffer attn;    // (n_batch, H, V) each head's output after v_b
  gpu::Buffer y;       // (n_batch, n_embd) the output
};

std::string GpuMlaAttention::Unsupported(const Model& model, KvTypes kv_types) {
  const HParams& hp = model.hparams();
  const MlaParts mla = FirstMla(model);
  const int64_t L = mla.kv_lora_rank, R = hp.n_rot;
  if (kv_types.k == KvElemType::kQ8_0 && (L % kKvBlockQ8 != 0 || R % kKvBlockQ8 != 0)) {
    return fmt::format("a q8_0 latent cache of {} + {} dims (whole blocks of 32)", L, R);
  }
  if (L % 2 != 0 || R % 2 != 0 || L > 512 || L + R > 576 || model.parts().rope.n_rot != R) {
    return fmt::format("latent {} + rope {} dims (the device takes even ones up to 512 + 64)", L,
                       R);
  }
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    if (!IsMla(model, static_cast<int>(il))) continue;
    std::vector<GgmlType> types;
    for (const WeightMatrix* m : Matrices(model.layer(static_cast<int>(il)), mla.q_lora_rank > 0)) {
      types.push_back(m->type);
    }
    if (std::string why = NoShaderFor(types, static_cast<int>(il), "attention is"); !why.empty()) {
      return why;
    }
  }
  return "";
}

GpuMlaAttention::GpuMlaAttention(const Model& model, GpuBackend& gpu, const AttentionShape& shape)
    : GpuAttentionBlock(model, gpu, shape), impl_(std::make_unique<Impl>()) {}

GpuMlaAttention::~GpuMlaAttention() = default;

Result<std::unique_ptr<GpuMlaAttention>> GpuMlaAttention::Create(const Model& model,
                                                                 GpuBackend& gpu,
                                                                 const AttentionShape& shape) {
  if (std::string why = Unsupported(model, shape.kv_types); !why.empty()) {
    return Unimplemented("{}", why);
  }
  const HParams& hp = model.hparams();
  const MlaParts mla = FirstMla(model);
  gpu::Device& dev = *gpu.device;
  const int64_t L = mla.kv_lora_rank, R = hp.n_rot;
  // A layer's cache is one binding.
  const uint64_t cache = uint64_t{shape.n_seq} * shape.n_ctx * KvBytes(shape.kv_types.k, L + R);
  MT_RETURN_IF_ERROR(CheckCacheBinding(dev, cache, "latent cache"));
  std::unique_ptr<GpuMlaAttention> block(new GpuMlaAttention(model, gpu, shape));
  Impl& im = *block->impl_;
  im.L = L, im.R = R, im.N = mla.head_dim_nope, im.V = mla.head_dim_v, im.H = hp.n_head;
  im.Q = mla.q_lora_rank;
  im.layers.resize(hp.n_layer);
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    if (!IsMla(model, static_cast<int>(il))) continue;
    const LayerWeights& w = model.layer(static_cast<int>(il));
    Impl::Layer& Ly = im.layers[il];
    GpuWeightPack pack;
    if (im.Q > 0) {
      Ly.tq_a = w.wq_a.type, Ly.tq_b = w.wq_b.type;
      Ly.wq_a = pack.Add(w.wq_a), Ly.wq_b = pack.Add(w.wq_b), Ly.q_a_norm = pack.Add(w.q_a_norm);
    } else {
      Ly.tq = w.wq.type;
      Ly.wq = pack.Add(w.wq);
    }
    Ly.tkv_a = w.wkv_a.type, Ly.tk_b = w.wk_b.type, Ly.tv_b = w.wv_b.type, Ly.to = w.wo.type;
    Ly.wkv_a = pack.Add(w.wkv_a), Ly.kv_a_norm = pack.Add(w.kv_a_norm);
    Ly.wk_b = pack.Add(w.wk_b), Ly.wv_b = pack.Add(w.wv_b), Ly.wo = pack.Add(w.wo);
    Ly.k_b_row = w.wk_b.row_bytes, Ly.v_b_row = w.wv_b.row_bytes;
    Ly.weights = MT_TRY(pack.Upload(gpu));
    block->weight_bytes_ += pack.bytes();
    block->cache_bytes_ += cache;
    ++block->n_layers_;
  }
  const uint64_t B = shape.n_batch, D = hp.n_embd;
  const uint64_t H = im.H, N = im.N, V = im.V, Q = im.Q;
  const uint64_t QW = H * (N + R), KVW = L + R, AW = H * KVW;
  MT_RETURN_IF_ERROR(block->CreateStaging());
  im.x = MT_TRY(dev.CreateBuffer(B * D * 4));
  if (Q > 0) im.qa = MT_TRY(dev.CreateBuffer(B * Q * 4));
  im.q = MT_TRY(dev.CreateBuffer((B * QW + N) * 4));
  im.kva = MT_TRY(dev.CreateBuffer(B * KVW * 4));
  im.q_abs = MT_TRY(dev.CreateBuffer(B * AW * 4));
  im.latent = MT_TRY(dev.CreateBuffer(B * H * L * 4));
  im.attn = MT_TRY(dev.CreateBuffer(B * H * V * 4));
  im.y = MT_TRY(dev.CreateBuffer(B * D * 4));
  block->scratch_bytes_ += (B * (2 * D + Q + QW + KVW + AW + H * L + H * V) + N) * 4;
  return block;
}

Status GpuMlaAttention::AllocateKv(bool /*populate*/) {
  gpu::Device& dev = *gpu_.device;
  const uint64_t cells = uint64_t{shape_.n_seq} * shape_.n_ctx;
  for (Impl::Layer& Ly : impl_->layers) {
    if (Ly.weights.size() == 0) continue;
    Ly.cache = MT_TRY(dev.CreateBuffer(cells * KvBytes(shape_.kv_types.k, impl_->L + impl_->R)));
  }
  return Status::Ok();
}

Status GpuMlaAttention::Run(int il, std::span<const BatchToken> batch, const float* xn,
                            const float* rope_cs, float* out) {
  Impl& im = *impl_;
  Impl::Layer& Ly = im.layers[il];
  const AttentionParts& parts = model_.parts().layers[il].attention;
  const RopeParts& rp = model_.parts().rope;
  const int64_t n = static_cast<int64_t>(batch.size());
  const int64_t D = hp_.n_embd, L = im.L, R = im.R, N = im.N, V = im.V, H = im.H, Q = im.Q;
  const int64_t QW = H * (N + R), KVW = L + R, AW = H * KVW;
  Stage(batch, xn, rope_cs);

  gpu::MatMul& mm = *gpu_.matmul;
  gpu::AttentionOps& ops = *gpu_.ops;
  const gpu::TokenSlots slots{&tokens_, 0};
  Status recorded;
  auto keep = [&](Status s) {
    if (recorded.ok()) recorded = std::move(s);
  };
  // x (n, rows) = in (n, cols) . W^T for the matrix at `at` in the layer's buffer.
  auto product = [&](gpu::CommandRecorder& rec, GgmlType type, uint64_t at, gpu::Buffer& in,
                     gpu::Buffer& y, int64_t rows, int64_t cols) {
    keep(mm.Record(rec, {type, &Ly.weights, at, &in, 0, &y, 0, rows, cols, n}));
  };
  // Each head's slice of attn_k_b or attn_v_b (`rows` rows of `row_bytes` a head) applied to
  // the head's `cols` inputs (x_head floats apart in a token's row of x_stride), written
  // y_head apart in rows of y_stride: H products in one dispatch.
  auto heads = [&](gpu::CommandRecorder& rec, GgmlType type, uint64_t at, uint64_t row_bytes,
                   int64_t rows, int64_t cols, gpu::Buffer& x, int64_t x_stride, int64_t x_head,
                   gpu::Buffer& y, int64_t y_stride, int64_t y_head) {
    gpu::MatMulArgs a{type, &Ly.weights, at, &x, 0, &y, 0, rows, cols, n, x_stride, y_stride};
    a.heads = H;
    a.w_head_bytes = static_cast<uint64_t>(rows) * row_bytes;
    a.x_head_floats = static_cast<uint64_t>(x_head);
    a.y_head_floats = static_cast<uint64_t>(y_head);
    keep(mm.Record(rec, a));
  };
  auto rope = [&](gpu::CommandRecorder& rec, gpu::Buffer& x, uint64_t at, int64_t n_heads,
                  int64_t head_dim, int64_t stride) {
    if (rp.n_rot == 0) return;
    keep(ops.Record(rec, gpu::RopeArgs{&x, at, n, n_heads, head_dim, stride, rp.n_rot,
                                       rp.type == RopeType::kNeox, &cos_sin_, 0}));
  };
  const gpu::KvElem kt = DeviceKvElem(shape_.kv_types.k);
  Status run = gpu_.Execute([&](gpu::CommandRecorder& rec) {
    rec.Copy(in_, 0, im.x, 0, static_cast<uint64_t>(n * D) * 4);
    rec.Barrier();
    // The query (directly, or through the q LoRA and its norm) and the compressed KV.
    if (Q > 0) {
      product(rec, Ly.tq_a, Ly.wq_a, im.x, im.qa, Q, D);
    } else {
      product(rec, Ly.tq, Ly.wq, im.x, im.q, QW, D);
    }
    product(rec, Ly.tkv_a, Ly.wkv_a, im.x, im.kva, KVW, D);
    rec.Barrier();
    if (Q > 0) {
      keep(ops.Record(rec, gpu::RmsNormArgs{&im.qa, 0, &im.qa, 0, n, Q, 0, &Ly.weights,
                                            Ly.q_a_norm / 4, hp_.rms_eps}));
    }
    // c normed and k_pe rotated: disjoint floats of each row.
    keep(ops.Record(rec, gpu::RmsNormArgs{&im.kva, 0, &im.kva, 0, n, L, KVW, &Ly.weights,
                                          Ly.kv_a_norm / 4, hp_.rms_eps}));
    rope(rec, im.kva, static_cast<uint64_t>(L), 1, R, KVW);
    rec.Barrier();
    if (Q > 0) {
      product(rec, Ly.tq_b, Ly.wq_b, im.qa, im.q, QW, Q);
      rec.Barrier();
    }
    // Every head's q_pe rotated (the heads' rows start N floats into q); the rows cached.
    rope(rec, im.q, static_cast<uint64_t>(N), H, N + R, QW);
    keep(ops.Record(
        rec, gpu::StoreKvArgs{&im.kva, 0, n, 1, KVW, KVW, slots, &Ly.cache, 0, shape_.n_ctx, kt}));
    rec.Barrier();
    // Absorb: head h's query becomes [k_b_h^T q_nope_h | q_pe_h].
    heads(rec, Ly.tk_b, Ly.wk_b, Ly.k_b_row, L, N, im.q, QW, N + R, im.q_abs, AW, KVW);
    keep(ops.Record(rec, gpu::CopyRowsArgs{&im.q, static_cast<uint64_t>(N), &im.q_abs,
                                           static_cast<uint64_t>(L), n * H, R, N + R, KVW}));
    rec.Barrier();
    // Attention over the cached rows: K is the whole row, V its first L values.
    gpu::AttendArgs a;
    a.q = &im.q_abs;
    a.out = &im.latent;
    a.n = n;
    a.n_head = H;
    a.n_head_kv = 1;
    a.d_k = KVW;
    a.d_v = L;
    a.tokens = slots;
    a.k_cache = a.v_cache = &Ly.cache;
    a.v_row = KVW;
    a.cells = shape_.n_ctx;
    a.k_type = a.v_type = kt;
    a.scale = parts.kq_scale;
    keep(ops.Record(rec, a));
    rec.Barrier();
    // Decompress each head's output, then the output projection.
    heads(rec, Ly.tv_b, Ly.wv_b, Ly.v_b_row, V, L, im.latent, H * L, L, im.attn, H * V, V);
    rec.Barrier();
    product(rec, Ly.to, Ly.wo, im.attn, im.y, D, H * V);
    rec.Barrier();
    rec.Copy(im.y, 0, out_, 0, static_cast<uint64_t>(n * D) * 4);
  });
  MT_RETURN_IF_ERROR(recorded.WithContext(fmt::format("device MLA attention, layer {}", il)));
  MT_RETURN_IF_ERROR(run.WithContext(fmt::format("device MLA attention, layer {}", il)));
  Unstage(n, out);
  return Status::Ok();
}

}  // namespace mt
