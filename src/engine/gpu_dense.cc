#include "engine/gpu_dense.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>

namespace mt {

std::string GpuOutputHead::Unsupported(const Model& model) {
  const GgmlType type = model.output().type;
  if (gpu::GpuCanMatMul(type)) return "";
  return fmt::format("the output head is {}, which the device cannot compute with", TypeName(type));
}

Result<std::unique_ptr<GpuOutputHead>> GpuOutputHead::Create(const Model& model, GpuBackend& gpu,
                                                             uint32_t n_batch) {
  if (std::string why = Unsupported(model); !why.empty()) return Unimplemented("{}", why);
  const WeightMatrix& w = model.output();
  std::unique_ptr<GpuOutputHead> head(new GpuOutputHead(gpu, w));
  gpu::Device& dev = *gpu.device;
  GpuWeightPack pack;
  pack.Add(w);
  head->weights_ = MT_TRY(pack.Upload(gpu));
  head->weight_bytes_ = pack.bytes();
  // Chunks of up to 64 rows: a prompt's logits for every token (perplexity) need no buffer
  // of n_batch x n_vocab on the device, and a chunk's logits fit one binding.
  const uint64_t D = static_cast<uint64_t>(w.cols), V = static_cast<uint64_t>(w.rows);
  const uint64_t range = dev.max_storage_range();
  head->part_rows_ = static_cast<int64_t>(std::max<uint64_t>(range / w.row_bytes, 1));
  head->chunk_ = static_cast<int64_t>(
      std::clamp<uint64_t>(range / (V * 4), 1, std::min<uint32_t>(n_batch, 64)));
  const uint64_t C = static_cast<uint64_t>(head->chunk_);
  head->in_ = MT_TRY(dev.CreateHostBuffer(C * D * 4));
  head->x_ = MT_TRY(dev.CreateBuffer(C * D * 4));
  head->y_ = MT_TRY(dev.CreateBuffer(C * V * 4));
  head->out_ = MT_TRY(dev.CreateHostBuffer(C * V * 4));
  head->scratch_bytes_ = 2 * C * (D + V) * 4;
  return head;
}

Status GpuOutputHead::Run(const float* xn, int64_t n, float* logits) {
  const int64_t D = w_.cols, V = w_.rows;
  for (int64_t t0 = 0; t0 < n; t0 += chunk_) {
    const int64_t m = std::min(chunk_, n - t0);
    std::memcpy(in_.host_data(), xn + t0 * D, static_cast<size_t>(m * D) * sizeof(float));
    Status recorded;
    Status run = gpu_.Execute([&](gpu::CommandRecorder& rec) {
      rec.Copy(in_, 0, x_, 0, static_cast<uint64_t>(m * D) * 4);
      rec.Barrier();
      // The vocabulary in parts that each fit one binding (a large vocabulary's f32 or f16
      // matrix passes a device's largest, 128 MiB on lavapipe).
      for (int64_t r0 = 0; r0 < V && recorded.ok(); r0 += part_rows_) {
        const int64_t rows = std::min(part_rows_, V - r0);
        recorded =
            gpu_.matmul->Record(rec, {w_.type, &weights_, static_cast<uint64_t>(r0) * w_.row_bytes,
                                      &x_, 0, &y_, static_cast<uint64_t>(r0), rows, D, m, D, V});
      }
      rec.Barrier();
      rec.Copy(y_, 0, out_, 0, static_cast<uint64_t>(m * V) * 4);
    });
    MT_RETURN_IF_ERROR(recorded.WithContext("device output head"));
    MT_RETURN_IF_ERROR(run.WithContext("device output head"));
    std::memcpy(logits + t0 * V, out_.host_data(), static_cast<size_t>(m * V) * sizeof(float));
  }
  return Status::Ok();
}

std::optional<std::array<const WeightMatrix*, 3>> GpuSwiGluBlocks::LayerMatrices(const Model& model,
                                                                                 uint32_t il) {
  const LayerWeights& L = model.layer(static_cast<int>(il));
  const FfnParts& f = model.parts().layers[il].ffn;
  if (f.kind == FfnKind::kDense) return std::array{&L.ffn_gate, &L.ffn_up, &L.ffn_down};
  if (f.n_ff_shared > 0) return std::array{&L.shexp_gate, &L.shexp_up, &L.shexp_down};
  return std::nullopt;
}

std::string GpuSwiGluBlocks::Unsupported(const Model& model) {
  for (uint32_t il = 0; il < model.hparams().n_layer; ++il) {
    const auto block = LayerMatrices(model, il);
    if (!block) continue;
    const GgmlType types[] = {(*block)[0]->type, (*block)[1]->type, (*block)[2]->type};
    const bool dense = model.parts().layers[il].ffn.kind == FfnKind::kDense;
    if (std::string why =
            NoShaderFor(types, static_cast<int>(il), dense ? "FFN are" : "shared experts are");
        !why.empty()) {
      return why;
    }
  }
  return "";
}

Result<std::unique_ptr<GpuSwiGluBlocks>> GpuSwiGluBlocks::Create(const Model& model,
                                                                 GpuBackend& gpu,
                                                                 uint32_t n_batch) {
  if (std::string why = Unsupported(model); !why.empty()) return Unimplemented("{}", why);
  std::unique_ptr<GpuSwiGluBlocks> b(new GpuSwiGluBlocks(gpu));
  const HParams& hp = model.hparams();
  b->n_embd_ = hp.n_embd;
  b->blocks_.resize(hp.n_layer);
  int64_t widest = 0;
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    const auto block = LayerMatrices(model, il);
    if (!block) continue;
    const WeightMatrix &gate = *(*block)[0], &up = *(*block)[1], &down = *(*block)[2];
    Block& k = b->blocks_[il];
    GpuWeightPack pack;
    k.gate = pack.Add(gate), k.up = pack.Add(up), k.down = pack.Add(down);
    k.gate_type = gate.type, k.up_type = up.type, k.down_type = down.type;
    k.n_ff = gate.rows;
    k.weights = MT_TRY(pack.Upload(gpu));
    b->weight_bytes_ += pack.bytes();
    widest = std::max(widest, k.n_ff);
    ++b->n_layers_;
  }
  if (b->n_layers_ == 0) return std::unique_ptr<GpuSwiGluBlocks>();
  gpu::Device& dev = *gpu.device;
  const uint64_t rows = uint64_t{n_batch} * static_cast<uint64_t>(hp.n_embd) * 4;
  const uint64_t hidden = 2 * uint64_t{n_batch} * static_cast<uint64_t>(widest) * 4;
  b->in_ = MT_TRY(dev.CreateHostBuffer(rows));
  b->x_ = MT_TRY(dev.CreateBuffer(rows));
  b->hidden_ = MT_TRY(dev.CreateBuffer(hidden));
  b->y_ = MT_TRY(dev.CreateBuffer(rows));
  b->out_ = MT_TRY(dev.CreateHostBuffer(rows));
  b->scratch_bytes_ = 4 * rows + hidden;
  return b;
}

GpuSwiGluBlocks::~GpuSwiGluBlocks() = default;

Status GpuSwiGluBlocks::Run(int il, const float* xn, int n, float* out) {
  const Block& k = blocks_[il];
  const uint64_t bytes = static_cast<uint64_t>(n) * static_cast<uint64_t>(n_embd_) * 4;
  std::memcpy(in_.host_data(), xn, bytes);
  gpu::ExpertFfnArgs a;
  a.gate_type = k.gate_type;
  a.up_type = k.up_type;
  a.down_type = k.down_type;
  a.weights = &k.weights;
  a.gate_offset = k.gate;
  a.up_offset = k.up;
  a.down_offset = k.down;
  a.n_embd = n_embd_;
  a.n_ff = k.n_ff;
  a.m = n;
  a.x = &x_;
  a.hidden = &hidden_;
  a.y = &y_;
  Status recorded;
  Status run = gpu_.Execute([&](gpu::CommandRecorder& rec) {
    rec.Copy(in_, 0, x_, 0, bytes);
    rec.Barrier();
    recorded = gpu_.ffn->Record(rec, a);
    rec.Barrier();
    rec.Copy(y_, 0, out_, 0, bytes);
  });
  MT_RETURN_IF_ERROR(recorded.WithContext(fmt::format("device FFN, layer {}", il)));
  MT_RETURN_IF_ERROR(run.WithContext(fmt::format("device FFN, layer {}", il)));
  std::memcpy(out, out_.host_data(), bytes);
  return Status::Ok();
}

}  // namespace mt
