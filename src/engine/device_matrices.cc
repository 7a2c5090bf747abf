#include "engine/device_matrices.h"

#include "engine/gpu_attention.h"
#include "engine/gpu_dense.h"
#include "gpu/device.h"

namespace mt {

namespace {

void AddPresent(std::vector<const WeightMatrix*>& to,
                std::initializer_list<const WeightMatrix*> m) {
  for (const WeightMatrix* w : m) {
    if (w->data != nullptr) to.push_back(w);
  }
}

}  // namespace

std::vector<const WeightMatrix*> DeviceOwnedMatrices(const Model& model,
                                                     const ContextOptions& options) {
  std::vector<const WeightMatrix*> owned;
  if (!options.gpu.wanted() || !gpu::NoDeviceReason(std::max(options.gpu.device, 0)).empty())
    return owned;
  const HParams& hp = model.hparams();
  const bool gqa = GpuGqaAttention::Unsupported(model, options.kv_types).empty();
  const bool mla = GpuMlaAttention::Unsupported(model, options.kv_types).empty();
  const bool deltanet = GpuDeltaNetAttention::Unsupported(model).empty();
  std::vector<const WeightMatrix*> swiglu;
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    const LayerWeights& L = model.layer(static_cast<int>(il));
    const LayerParts& parts = model.parts().layers[il];
    if (parts.attention.kind == AttentionKind::kGqa && gqa) {
      AddPresent(owned, {&L.wq, &L.wk, &L.wv, &L.wo});
    } else if (parts.attention.kind == AttentionKind::kMla && mla) {
      AddPresent(owned, {&L.wq, &L.wq_a, &L.wq_b, &L.wkv_a, &L.wk_b, &L.wv_b, &L.wo});
    } else if (parts.attention.kind == AttentionKind::kDeltaNet && deltanet) {
      AddPresent(owned, {&L.wqkv, &L.wqkv_gate, &L.ssm_ba, &L.ssm_beta, &L.ssm_alpha, &L.ssm_out});
    }
    if (const auto block = GpuSwiGluBlocks::LayerMatrices(model, il)) {
      swiglu.insert(swiglu.end(), block->begin(), block->end());
    }
  }
  // GpuSwiGluBlocks takes all of them or none.
  if (GpuSwiGluBlocks::Unsupported(model).empty()) {
    owned.insert(owned.end(), swiglu.begin(), swiglu.end());
  }
  // A head tied to the embedding shares the rows the CPU looks tokens up in.
  if (model.output().data != model.token_embd().data && GpuOutputHead::Unsupported(model).empty()) {
    owned.push_back(&model.output());
  }
  return owned;
}

LoadOptions LoadOptionsFor(const ContextOptions& options, LoadOptions base) {
  base.left_to_device = [options](const Model& model) {
    return DeviceOwnedMatrices(model, options);
  };
  return base;
}

}  // namespace mt
