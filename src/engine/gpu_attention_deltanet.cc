// Gated DeltaNet on the device (engine/gpu_attention.h), the math of
// engine/attention_deltanet.cc and model/layer_parts.h DeltaNetParts: per token
//   [q | k | v] = silu(causal conv of attn_qkv x),  z = attn_gate x,  b, a from ssm_ba (or
//   ssm_beta, ssm_alpha);  per value head the delta rule on its state;
//   out = ssm_out (rms_norm(o per head) * ssm_norm * silu(z)).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/units.h"
#include "engine/gpu_attention.h"
#include "gpu/deltanet_ops.h"
#include "gpu/matmul.h"

namespace mt {

namespace {

constexpr int64_t kMaxHeadDim = 256;  // gpu/deltanet_ops.h GatedDeltaArgs::dim
constexpr int64_t kMaxConv = 9;       // DeltaConvArgs::d_conv

bool IsDeltaNet(const Model& m, int il) {
  return m.parts().layers[il].attention.kind == AttentionKind::kDeltaNet;
}

// The first DeltaNet layer's parts (all DeltaNet layers of a model have the same).
DeltaNetParts FirstDeltaNet(const Model& m) {
  for (const LayerParts& l : m.parts().layers) {
    if (l.attention.kind == AttentionKind::kDeltaNet) return l.attention.delta_net;
  }
  return {};
}

// A layer's matrices (absent ones, ssm_ba or ssm_beta/ssm_alpha, are left out).
std::vector<const WeightMatrix*> Matrices(const LayerWeights& w, bool separate) {
  if (separate) return {&w.wqkv, &w.wqkv_gate, &w.ssm_beta, &w.ssm_alpha, &w.ssm_out};
  return {&w.wqkv, &w.wqkv_gate, &w.ssm_ba, &w.ssm_out};
}

}  // namespace

struct GpuDeltaNetAttention::Impl {
  DeltaNetParts d;
  int64_t C = 0, V = 0, H = 0, S = 0;  // conv channels, value dim, value heads, head dim
  uint64_t conv_floats = 0;            // (C, d_conv - 1) a copy's window
  uint64_t copy_floats = 0;            // a copy: the window, then H S S
  std::unique_ptr<gpu::DeltaNetOps> ops;

  // One DeltaNet layer's weights in one device buffer (byte offsets) and its states.
  struct Layer {
    gpu::Buffer weights;
    GgmlType tqkv = GgmlType::kF32, tgate = GgmlType::kF32, tba = GgmlType::kF32;
    GgmlType tbeta = GgmlType::kF32, talpha = GgmlType::kF32, tout = GgmlType::kF32;
    uint64_t wqkv = 0, wgate = 0, wba = 0, wbeta = 0, walpha = 0, wout = 0;
    uint64_t conv = 0, dt = 0, a = 0, norm = 0;
    gpu::Buffer states;  // (n_seq, 3, copy_floats) f32
  };
  std::vector<Layer> layers;  // (n_layer) empty for other kinds' layers
  // Device-local rows.
  gpu::Buffer x;    // (n_batch, n_embd) the input
  gpu::Buffer qkv;  // (n_batch, C) the projection, then its convolution (in place)
  gpu::Buffer z;    // (n_batch, V) the output norm's gate
  gpu::Buffer ba;   // (n_batch, 2 H) b and a as the file orders them
  gpu::Buffer o;    // (n_batch, V) the heads' outputs, normed and gated
  gpu::Buffer y;    // (n_batch, n_embd) the output
  // Host-visible: the run records (n_batch, 8 words), then the order (n_batch) of the batch's
  // tokens grouped by sequence (gpu/deltanet_ops.h DeltaNetRuns).
  gpu::Buffer runs;
  std::vector<int> order;  // (n_batch) the host's copy while grouping
};

std::string GpuDeltaNetAttention::Unsupported(const Model& model) {
  const HParams& hp = model.hparams();
  const DeltaNetParts d = FirstDeltaNet(model);
  if (d.head_k_dim != d.head_v_dim || d.head_k_dim > kMaxHeadDim || d.conv_kernel < 1 ||
      d.conv_kernel > kMaxConv) {
    return fmt::format(
        "heads of {}/{} and a convolution of {} (the device takes equal heads up "
        "to {} and up to {})",
        d.head_k_dim, d.head_v_dim, d.conv_kernel, kMaxHeadDim, kMaxConv);
  }
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    if (!IsDeltaNet(model, static_cast<int>(il))) continue;
    const LayerWeights& w = model.layer(static_cast<int>(il));
    for (const WeightMatrix* m : Matrices(w, d.separate_beta_alpha)) {
      if (!gpu::GpuCanMatMul(m->type)) {
        return fmt::format("layer {}'s DeltaNet is {}, which the device cannot compute with", il,
                           TypeName(m->type));
      }
    }
  }
  return "";
}

GpuDeltaNetAttention::GpuDeltaNetAttention(const Model& model, GpuBackend& gpu,
                                           const AttentionShape& shape)
    : GpuAttentionBlock(model, gpu, shape), impl_(std::make_unique<Impl>()), states_(shape.n_seq) {}

GpuDeltaNetAttention::~GpuDeltaNetAttention() = default;

Result<std::unique_ptr<GpuDeltaNetAttention>> GpuDeltaNetAttention::Create(
    const Model& model, GpuBackend& gpu, const AttentionShape& shape) {
  if (std::string why = Unsupported(model); !why.empty()) return Unimplemented("{}", why);
  const HParams& hp = model.hparams();
  const DeltaNetParts d = FirstDeltaNet(model);
  gpu::Device& dev = *gpu.device;
  const uint64_t C = d.conv_channels(), V = d.value_dim(), H = d.n_v_heads, S = d.head_v_dim;
  const uint64_t conv_floats = C * (d.conv_kernel - 1);
  const uint64_t copy_floats = conv_floats + H * S * S;
  // A layer's states are one binding: past the device's largest, the shaders would not reach
  // the last sequences.
  const uint64_t states = uint64_t{shape.n_seq} * 3 * copy_floats * 4;
  if (states > dev.max_storage_range() || states / 4 >= (uint64_t{1} << 31)) {
    return Unimplemented(
        "a layer's recurrent states of {} are more than the device binds at once ({}): use "
        "fewer sequences",
        HumanBytes(states), HumanBytes(dev.max_storage_range()));
  }
  std::unique_ptr<GpuDeltaNetAttention> block(new GpuDeltaNetAttention(model, gpu, shape));
  Impl& im = *block->impl_;
  im.d = d;
  im.C = static_cast<int64_t>(C), im.V = static_cast<int64_t>(V);
  im.H = static_cast<int64_t>(H), im.S = static_cast<int64_t>(S);
  im.conv_floats = conv_floats, im.copy_floats = copy_floats;
  im.ops = MT_TRY(gpu::DeltaNetOps::Create(&dev));
  im.layers.resize(hp.n_layer);
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    if (!IsDeltaNet(model, static_cast<int>(il))) continue;
    const LayerWeights& w = model.layer(static_cast<int>(il));
    Impl::Layer& Ly = im.layers[il];
    GpuWeightPack pack;
    Ly.tqkv = w.wqkv.type, Ly.tgate = w.wqkv_gate.type, Ly.tout = w.ssm_out.type;
    Ly.wqkv = pack.Add(w.wqkv), Ly.wgate = pack.Add(w.wqkv_gate);
    if (d.separate_beta_alpha) {
      Ly.tbeta = w.ssm_beta.type, Ly.talpha = w.ssm_alpha.type;
      Ly.wbeta = pack.Add(w.ssm_beta), Ly.walpha = pack.Add(w.ssm_alpha);
    } else {
      Ly.tba = w.ssm_ba.type;
      Ly.wba = pack.Add(w.ssm_ba);
    }
    Ly.wout = pack.Add(w.ssm_out);
    Ly.conv = pack.Add(w.ssm_conv1d), Ly.dt = pack.Add(w.ssm_dt), Ly.a = pack.Add(w.ssm_a);
    Ly.norm = pack.Add(w.ssm_norm);
    Ly.weights = MT_TRY(pack.Upload(gpu));
    block->weight_bytes_ += pack.bytes();
    block->cache_bytes_ += states;
    ++block->n_layers_;
  }
  const uint64_t B = shape.n_batch, D = hp.n_embd;
  MT_RETURN_IF_ERROR(block->CreateStaging());
  im.x = MT_TRY(dev.CreateBuffer(B * D * 4));
  im.qkv = MT_TRY(dev.CreateBuffer(B * C * 4));
  im.z = MT_TRY(dev.CreateBuffer(B * V * 4));
  im.ba = MT_TRY(dev.CreateBuffer(B * 2 * H * 4));
  im.o = MT_TRY(dev.CreateBuffer(B * V * 4));
  im.y = MT_TRY(dev.CreateBuffer(B * D * 4));
  im.runs = MT_TRY(dev.CreateHostBuffer(B * 9 * 4));
  im.order.resize(B);
  block->scratch_bytes_ += B * (2 * D + C + 2 * V + 2 * H + 9) * 4;
  return block;
}

Status GpuDeltaNetAttention::AllocateKv(bool /*populate*/) {
  gpu::Device& dev = *gpu_.device;
  for (Impl::Layer& Ly : impl_->layers) {
    if (Ly.weights.size() == 0) continue;
    Ly.states = MT_TRY(dev.CreateBuffer(uint64_t{shape_.n_seq} * 3 * impl_->copy_floats * 4));
  }
  return Status::Ok();
}

Status GpuDeltaNetAttention::Run(int il, std::span<const BatchToken> batch, const float* xn,
                                 const float* rope_cs, float* out) {
  Impl& im = *impl_;
  Impl::Layer& Ly = im.layers[il];
  const int64_t n = static_cast<int64_t>(batch.size());
  const int64_t D = hp_.n_embd, C = im.C, V = im.V, H = im.H, S = im.S;
  Stage(batch, xn, rope_cs);

  // The batch's tokens grouped by sequence (in batch order within one), a run each: its first
  // token reads the state its sequence resumes from (the Decode's first token) or the next
  // copy an earlier pass of the Decode wrote.
  for (int64_t t = 0; t < n; ++t) im.order[t] = static_cast<int>(t);
  std::stable_sort(im.order.begin(), im.order.begin() + n,
                   [&](int a, int b) { return batch[a].seq < batch[b].seq; });
  auto* words = reinterpret_cast<uint32_t*>(im.runs.host_data());
  const uint64_t order_at = uint64_t{shape_.n_batch} * 8;
  auto copy_at = [&](uint32_t seq, int copy) {
    return static_cast<uint32_t>((uint64_t{seq} * 3 + static_cast<uint64_t>(copy)) *
                                 im.copy_floats);
  };
  int64_t n_runs = 0;
  gpu::DeltaNetRun run;
  for (int64_t r = 0; r < n; ++r) {
    const BatchToken& b = batch[im.order[r]];
    words[order_at + r] = static_cast<uint32_t>(im.order[r]);
    if (r == 0 || batch[im.order[r - 1]].seq != b.seq) {
      if (r > 0) std::memcpy(words + n_runs++ * 8, &run, sizeof(run));
      run = {};
      run.begin = static_cast<uint32_t>(r);
      run.next = copy_at(b.seq, states_.NextCopy(b.seq));
      const int source = states_.SourceCopy(b.seq);
      run.source = !states_.IsFirst(b.seq, b.pos) ? run.next
                   : source < 0                   ? gpu::DeltaNetRun::kNone
                                                  : copy_at(b.seq, source);
      run.checkpoint = copy_at(b.seq, RecurrentStates::kCheckpoint);
    }
    run.end = static_cast<uint32_t>(r + 1);
    if (states_.CheckpointAfter(b.seq, b.pos)) run.checkpoint_at = static_cast<uint32_t>(r);
  }
  if (n > 0) std::memcpy(words + n_runs++ * 8, &run, sizeof(run));
  const gpu::DeltaNetRuns runs{&im.runs, 0, n_runs, order_at, n};

  gpu::MatMul& mm = *gpu_.matmul;
  Status recorded;
  auto keep = [&](Status s) {
    if (recorded.ok()) recorded = std::move(s);
  };
  // y (n, rows), y_stride floats a token from y_offset, = x (n, cols) . W^T for the matrix at
  // `at` in the layer's buffer.
  auto product = [&](gpu::CommandRecorder& rec, GgmlType type, uint64_t at, gpu::Buffer& x,
                     gpu::Buffer& y, uint64_t y_offset, int64_t rows, int64_t cols,
                     int64_t y_stride) {
    keep(mm.Record(rec, {type, &Ly.weights, at, &x, 0, &y, y_offset, rows, cols, n, 0, y_stride}));
  };
  const uint64_t state_heads = im.conv_floats;
  Status ran = gpu_.Execute([&](gpu::CommandRecorder& rec) {
    rec.Copy(in_, 0, im.x, 0, static_cast<uint64_t>(n * D) * 4);
    rec.Barrier();
    product(rec, Ly.tqkv, Ly.wqkv, im.x, im.qkv, 0, C, D, 0);
    product(rec, Ly.tgate, Ly.wgate, im.x, im.z, 0, V, D, 0);
    if (im.d.separate_beta_alpha) {
      product(rec, Ly.tbeta, Ly.wbeta, im.x, im.ba, 0, H, D, 2 * H);
      product(rec, Ly.talpha, Ly.walpha, im.x, im.ba, static_cast<uint64_t>(H), H, D, 2 * H);
    } else {
      product(rec, Ly.tba, Ly.wba, im.x, im.ba, 0, 2 * H, D, 0);
    }
    rec.Barrier();
    gpu::DeltaConvArgs conv;
    conv.x = &im.qkv;
    conv.n = n;
    conv.channels = C;
    conv.weight = &Ly.weights;
    conv.weight_offset = Ly.conv / 4;
    conv.d_conv = im.d.conv_kernel;
    conv.runs = runs;
    conv.state = &Ly.states;
    conv.copy_floats = im.copy_floats;
    keep(im.ops->Record(rec, conv));
    rec.Barrier();
    gpu::GatedDeltaArgs g;
    g.qkv = &im.qkv;
    g.ba = &im.ba;
    g.z = &im.z;
    g.out = &im.o;
    g.n = n;
    g.n_k_heads = im.d.n_k_heads;
    g.n_v_heads = H;
    g.dim = S;
    g.tiled = im.d.key_heads == KeyHeadOrder::kTiled;
    g.separate_beta_alpha = im.d.separate_beta_alpha;
    g.params = &Ly.weights;
    g.dt_offset = Ly.dt / 4, g.a_offset = Ly.a / 4, g.norm_offset = Ly.norm / 4;
    g.runs = runs;
    g.state = &Ly.states;
    g.heads_offset = state_heads;
    g.copy_floats = im.copy_floats;
    g.eps = hp_.rms_eps;
    g.scale = 1.0f / std::sqrt(static_cast<float>(S));
    keep(im.ops->Record(rec, g));
    rec.Barrier();
    product(rec, Ly.tout, Ly.wout, im.o, im.y, 0, D, V, 0);
    rec.Barrier();
    rec.Copy(im.y, 0, out_, 0, static_cast<uint64_t>(n * D) * 4);
  });
  MT_RETURN_IF_ERROR(recorded.WithContext(fmt::format("device DeltaNet, layer {}", il)));
  MT_RETURN_IF_ERROR(ran.WithContext(fmt::format("device DeltaNet, layer {}", il)));
  Unstage(n, out);
  return Status::Ok();
}

}  // namespace mt
