// The architecture table, and the tensor list every registered MoE architecture shares.
#include "model/arch.h"

#include <array>

#include <fmt/format.h>

namespace mt {

extern const ArchDef kArchQwen3Moe;
extern const ArchDef kArchOlmoe;
extern const ArchDef kArchLlama;
extern const ArchDef kArchQwen2Moe;

namespace {
constexpr std::array<const ArchDef*, 4> kArchs = {&kArchQwen3Moe, &kArchOlmoe, &kArchLlama,
                                                  &kArchQwen2Moe};
}  // namespace

std::span<const ArchDef* const> Architectures() { return kArchs; }

const ArchDef* FindArch(std::string_view name) {
  for (const ArchDef* a : kArchs) {
    if (a->name == name) return a;
  }
  return nullptr;
}

std::string SupportedArchNames() {
  std::string out;
  for (const ArchDef* a : kArchs) {
    if (!out.empty()) out += ", ";
    out += a->name;
  }
  return out;
}

std::vector<TensorDesc> ArchTensors(const ArchDef& arch, const HParams& hp) {
  using R = TensorRole;
  constexpr TensorSuffix kW = TensorSuffix::kWeight;
  constexpr TensorSuffix kB = TensorSuffix::kBias;
  const uint64_t n_embd = hp.n_embd, n_vocab = hp.n_vocab;
  std::vector<TensorDesc> t;
  t.push_back({R::kTokenEmbd, -1, kW, {n_embd, n_vocab}, true});
  for (int il = 0; il < static_cast<int>(hp.n_layer); ++il) {
    t.push_back({R::kAttnNorm, il, kW, {n_embd}, true});
    t.push_back({R::kAttnQ, il, kW, {n_embd, hp.n_embd_q()}, true});
    t.push_back({R::kAttnK, il, kW, {n_embd, hp.n_embd_k_gqa()}, true});
    t.push_back({R::kAttnV, il, kW, {n_embd, hp.n_embd_v_gqa()}, true});
    if (arch.qkv_bias) {
      t.push_back({R::kAttnQ, il, kB, {hp.n_embd_q()}, false});
      t.push_back({R::kAttnK, il, kB, {hp.n_embd_k_gqa()}, false});
      t.push_back({R::kAttnV, il, kB, {hp.n_embd_v_gqa()}, false});
    }
    t.push_back({R::kAttnOutput, il, kW, {uint64_t{hp.n_head} * hp.head_dim_v, n_embd}, true});
    if (arch.qk_norm == QkNorm::kPerHead) {
      t.push_back({R::kAttnQNorm, il, kW, {hp.head_dim_k}, true});
      t.push_back({R::kAttnKNorm, il, kW, {hp.head_dim_k}, true});
    } else if (arch.qk_norm == QkNorm::kWholeProjection) {
      t.push_back({R::kAttnQNorm, il, kW, {hp.n_embd_q()}, true});
      t.push_back({R::kAttnKNorm, il, kW, {hp.n_embd_k_gqa()}, true});
    }
    t.push_back({R::kFfnNorm, il, kW, {n_embd}, true});
    t.push_back({R::kFfnGateInp, il, kW, {n_embd, hp.n_expert}, true});
    t.push_back({R::kFfnGateExps, il, kW, {n_embd, hp.n_ff_exp, hp.n_expert}, true});
    t.push_back({R::kFfnUpExps, il, kW, {n_embd, hp.n_ff_exp, hp.n_expert}, true});
    t.push_back({R::kFfnDownExps, il, kW, {hp.n_ff_exp, n_embd, hp.n_expert}, true});
    if (arch.shared_expert == SharedExpert::kSigmoidGated) {
      t.push_back({R::kFfnGateInpShexp, il, kW, {n_embd}, true});
      t.push_back({R::kFfnGateShexp, il, kW, {n_embd, hp.n_ff_shexp}, true});
      t.push_back({R::kFfnUpShexp, il, kW, {n_embd, hp.n_ff_shexp}, true});
      t.push_back({R::kFfnDownShexp, il, kW, {hp.n_ff_shexp, n_embd}, true});
    }
  }
  t.push_back({R::kOutputNorm, -1, kW, {n_embd}, true});
  t.push_back({R::kOutput, -1, kW, {n_embd, n_vocab}, !arch.output_optional});
  return t;
}

}  // namespace mt
