// The architecture table, the tensor list that follows from a model's parts, and the RoPE
// and router every architecture builds from the common keys.
#include "model/arch.h"

#include <fmt/format.h>

#include <array>
#include <cmath>

#include "base/check.h"

namespace mt {

extern const ArchDef kArchQwen3Moe;
extern const ArchDef kArchOlmoe;
extern const ArchDef kArchLlama;
extern const ArchDef kArchQwen2Moe;
extern const ArchDef kArchDeepseek2;
extern const ArchDef kArchGlm4Moe;
extern const ArchDef kArchGptOss;
extern const ArchDef kArchQwen3Next;
extern const ArchDef kArchQwen35Moe;

namespace {
constexpr std::array<const ArchDef*, 9> kArchs = {&kArchQwen3Moe, &kArchOlmoe,     &kArchLlama,
                                                  &kArchQwen2Moe, &kArchDeepseek2, &kArchGlm4Moe,
                                                  &kArchGptOss,   &kArchQwen3Next, &kArchQwen35Moe};

// ggml_rope_yarn_corr_dim: the dim whose wavelength spins n_rot_turns times over n_ctx_orig.
float YarnCorrDim(int n_dims, uint32_t n_ctx_orig, float n_rot_turns, float base) {
  return n_dims * std::log(n_ctx_orig / (n_rot_turns * 2 * static_cast<float>(M_PI))) /
         (2 * std::log(base));
}

// llama_context's get_mscale.
float YarnMscale(float scale, float mscale) {
  return scale <= 1.0f ? 1.0f : 0.1f * mscale * std::log(scale) + 1.0f;
}

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

ModelParts DescribeModel(const HParams& hp) {
  const ArchDef* arch = FindArch(hp.arch);
  MT_CHECK_MSG(arch != nullptr, "DescribeModel: unregistered architecture");
  ModelParts parts = arch->describe(hp);
  MT_CHECK(parts.layers.size() == hp.n_layer);
  return parts;
}

std::vector<bool> ExpertLayers(const ModelParts& parts) {
  std::vector<bool> out;
  for (const LayerParts& l : parts.layers) out.push_back(l.has_experts());
  return out;
}

RopeParts RopeFromHParams(const HParams& hp, RopeType type, int n_rot, bool mscale_from_log_mul) {
  RopeParts r;
  r.type = type;
  r.n_rot = n_rot;
  r.freq_base = hp.rope_freq_base;
  r.freq_scale = hp.rope_scaling == RopeScalingType::kNone ? 1.0f : hp.rope_freq_scale;
  r.ext_factor = hp.rope_scaling == RopeScalingType::kYarn ? 1.0f : 0.0f;
  r.attn_factor = 1.0f;
  if (r.ext_factor != 0) {
    const float factor = 1.0f / r.freq_scale;
    if (hp.rope_yarn_log_mul != 0) {
      const float mscale_all_dims = hp.rope_yarn_log_mul;
      const float mscale = mscale_from_log_mul && mscale_all_dims != 1.0f ? mscale_all_dims : 1.0f;
      r.attn_factor = YarnMscale(factor, mscale) / YarnMscale(factor, mscale_all_dims);
    } else {
      r.attn_factor = YarnMscale(factor, 1.0f);
    }
    // ggml's rope multiplies by (1 + 0.1 ln factor) again when ext_factor != 0.
    r.attn_factor *= 1.0f / (1.0f + 0.1f * std::log(factor));
    // ggml_rope_yarn_corr_dims with llama.cpp's beta_fast 32 and beta_slow 1.
    const uint32_t n_ctx_orig = hp.n_ctx_orig_yarn != 0 ? hp.n_ctx_orig_yarn : hp.n_ctx_train;
    const float start = std::floor(YarnCorrDim(n_rot, n_ctx_orig, 32.0f, r.freq_base));
    const float end = std::ceil(YarnCorrDim(n_rot, n_ctx_orig, 1.0f, r.freq_base));
    r.corr_low = std::max(0.0f, start);
    r.corr_high = std::min(static_cast<float>(n_rot - 1), end);
  }
  r.attn_factor *= hp.rope_attn_factor;
  return r;
}

RouterPolicy RouterFromHParams(const HParams& hp, bool selection_bias) {
  RouterPolicy p;
  p.n_expert = hp.n_expert;
  p.n_expert_used = hp.n_expert_used;
  p.scoring = hp.expert_gating;
  p.selection_bias = selection_bias;
  p.n_group = hp.n_expert_groups;
  p.n_group_used = hp.n_group_used;
  p.normalize = hp.expert_weights_norm;
  p.scale = hp.expert_weights_scale;
  return p;
}

Status ReadDeepseekStyleMoeKeys(const HParamsKeys& keys, ExpertScoring absent_gating, HParams& hp) {
  MT_RETURN_IF_ERROR(keys.Uint("leading_dense_block_count", hp.n_layer_dense_lead, 0));
  MT_RETURN_IF_ERROR(keys.Uint("expert_feed_forward_length", hp.n_ff_exp, std::nullopt));
  MT_RETURN_IF_ERROR(keys.Uint("expert_shared_count", hp.n_expert_shared, std::nullopt, 64));
  MT_RETURN_IF_ERROR(keys.Float("expert_weights_scale", hp.expert_weights_scale, 0.0f));
  MT_RETURN_IF_ERROR(keys.Bool("expert_weights_norm", hp.expert_weights_norm, false));
  uint32_t gating = 0;
  MT_RETURN_IF_ERROR(keys.Uint("expert_gating_func", gating, 0));
  switch (gating) {
    case 0:
      hp.expert_gating = absent_gating;
      break;
    case 1:
      hp.expert_gating = ExpertScoring::kSoftmax;
      break;
    case 2:
      hp.expert_gating = ExpertScoring::kSigmoid;
      break;
    default:
      return Unimplemented("{} {} is not supported (1 softmax, 2 sigmoid)",
                           keys.Key("expert_gating_func"), gating);
  }
  uint32_t nextn = 0;
  MT_RETURN_IF_ERROR(keys.Uint("nextn_predict_layers", nextn, 0));
  if (nextn >= hp.n_layer) {
    return InvalidArgument("{} {} leaves no layer of {}", keys.Key("nextn_predict_layers"), nextn,
                           hp.n_layer);
  }
  hp.n_layer -= nextn;  // the NextN/MTP layers come last and are not part of the trunk
  hp.n_layer_nextn = nextn;
  if (hp.n_layer_dense_lead > hp.n_layer) {
    return InvalidArgument("{} {} exceeds the {} layers", keys.Key("leading_dense_block_count"),
                           hp.n_layer_dense_lead, hp.n_layer);
  }
  if (hp.n_layer_dense_lead > 0 && hp.n_ff == 0) {
    return InvalidArgument("{}: the dense layers' feed_forward_length is 0", hp.arch);
  }
  hp.n_ff_shexp = hp.n_ff_exp * hp.n_expert_shared;
  return Status::Ok();
}

TensorRole FfnNormRole(const FfnParts& ffn) {
  return ffn.norm_named_post_attention ? TensorRole::kAttnPostNorm : TensorRole::kFfnNorm;
}

ModelParts UniformGqaMoeModel(const HParams& hp, RopeType rope, GqaParts gqa,
                              SharedExpertGate shared_gate, bool output_optional) {
  ModelParts parts;
  parts.rope = RopeFromHParams(hp, rope, static_cast<int>(hp.n_rot), false);
  parts.router = RouterFromHParams(hp, false);
  parts.output_optional = output_optional;
  LayerParts layer;
  layer.attention.kind = AttentionKind::kGqa;
  layer.attention.gqa = gqa;
  layer.attention.kq_scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim_k));
  layer.ffn.kind = FfnKind::kMoe;
  layer.ffn.n_ff = hp.n_ff_exp;
  layer.ffn.n_ff_shared = hp.n_ff_shexp;
  layer.ffn.shared_gate = shared_gate;
  parts.layers.assign(hp.n_layer, layer);
  return parts;
}

namespace {

std::string LayerSummary(const LayerParts& l, int n_rot) {
  std::string attn;
  if (l.attention.kind == AttentionKind::kDeltaNet) {
    const DeltaNetParts& d = l.attention.delta_net;
    attn = fmt::format("gated DeltaNet ({} key heads, {} value heads of {}, conv {}{})",
                       d.n_k_heads, d.n_v_heads, d.head_v_dim, d.conv_kernel,
                       d.n_k_heads == d.n_v_heads              ? ""
                       : d.key_heads == KeyHeadOrder::kGrouped ? ", grouped"
                                                               : ", tiled");
  } else if (l.attention.kind == AttentionKind::kMla) {
    const MlaParts& m = l.attention.mla;
    attn = fmt::format("MLA ({}kv rank {}, rope {}, nope {}, v {}{})",
                       m.q_lora_rank ? fmt::format("q rank {}, ", m.q_lora_rank) : "",
                       m.kv_lora_rank, n_rot, m.head_dim_nope, m.head_dim_v,
                       m.legacy_kv_b ? ", legacy attn_kv_b" : "");
  } else {
    const GqaParts& g = l.attention.gqa;
    attn = fmt::format("GQA{}{}",
                       g.qk_norm == QkNorm::kPerHead           ? " (q/k norm per head)"
                       : g.qk_norm == QkNorm::kWholeProjection ? " (q/k norm)"
                                                               : "",
                       g.qkv_bias ? (g.out_bias ? " (q/k/v/o bias)" : " (q/k/v bias)") : "");
    if (g.output_gate) attn += ", output gate";
    if (l.attention.sinks) attn += ", sinks";
    if (l.attention.sliding_window) attn += fmt::format(", window {}", l.attention.sliding_window);
  }
  if (l.ffn.kind == FfnKind::kDense) return fmt::format("{}, dense FFN {}", attn, l.ffn.n_ff);
  return fmt::format(
      "{}, experts of {}{}{}", attn, l.ffn.n_ff,
      l.ffn.activation == FfnActivation::kSwigluOai ? " (clamped SwiGLU, biases)" : "",
      l.ffn.n_ff_shared == 0
          ? ""
          : fmt::format(" + shared {}{}", l.ffn.n_ff_shared,
                        l.ffn.shared_gate == SharedExpertGate::kSigmoid ? " (gated)" : ""));
}

}  // namespace

namespace {

// "layer 3: ..." or "layers 0-2: ..." for each run of equal summaries in [begin, end), the
// numbers shifted by -begin and prefixed (for the pattern of a repeating block).
void AddRuns(const std::vector<std::string>& summary, int begin, int end, std::string_view prefix,
             bool relative, std::vector<std::string>& out) {
  for (int first = begin; first < end;) {
    int last = first;
    while (last + 1 < end && summary[last + 1] == summary[first]) ++last;
    const int a = relative ? first - begin : first, b = relative ? last - begin : last;
    out.push_back(a == b ? fmt::format("{}layer {}: {}", prefix, a, summary[first])
                         : fmt::format("{}layers {}-{}: {}", prefix, a, b, summary[first]));
    first = last + 1;
  }
}

}  // namespace

std::vector<std::string> DescribeParts(const ModelParts& parts) {
  std::vector<std::string> out;
  const int n = static_cast<int>(parts.layers.size());
  std::vector<std::string> summary;
  for (const LayerParts& l : parts.layers) summary.push_back(LayerSummary(l, parts.rope.n_rot));
  // A block of p layers repeated to the end from some layer on (qwen3next: 3 DeltaNet layers
  // and one attention layer) is shown once, when that takes fewer lines than the runs.
  std::vector<std::string> runs;
  AddRuns(summary, 0, n, "", false, runs);
  std::vector<std::string> best = runs;
  for (int p = 2; p <= 8; ++p) {
    for (int start = 0; start + 3 * p <= n; ++start) {
      bool periodic = (n - start) % p == 0;
      for (int l = start + p; l < n && periodic; ++l) periodic = summary[l] == summary[l - p];
      if (!periodic) continue;
      std::vector<std::string> lines;
      AddRuns(summary, 0, start, "", false, lines);
      lines.push_back(fmt::format("layers {}-{}: a block of {} layers, {} times:", start, n - 1, p,
                                  (n - start) / p));
      AddRuns(summary, start, start + p, "  ", true, lines);
      if (lines.size() < best.size()) best = std::move(lines);
      break;
    }
  }
  out = std::move(best);
  const RouterPolicy& r = parts.router;
  out.push_back(fmt::format(
      "router: {}{}{}, top-{} of {}{}{}",
      r.scoring == ExpertScoring::kSoftmax   ? "softmax"
      : r.scoring == ExpertScoring::kSigmoid ? "sigmoid"
                                             : "top-k logits, softmax over them",
      r.selection_bias ? " + selection bias" : "",
      r.n_group > 1 ? fmt::format(", {} groups ({} used)", r.n_group, r.n_group_used) : "",
      r.n_expert_used, r.n_expert, r.normalize ? ", renormalised" : "",
      r.scale != 0 && r.scale != 1 ? fmt::format(", x{}", r.scale) : ""));
  const RopeParts& p = parts.rope;
  out.push_back(fmt::format(
      "rope: {} over {} dims, base {}{}", p.type == RopeType::kNorm ? "adjacent pairs" : "neox",
      p.n_rot, p.freq_base,
      p.ext_factor != 0
          ? fmt::format(", YaRN x{:g} (ramp {}-{})", 1 / p.freq_scale, p.corr_low, p.corr_high)
      : p.freq_scale != 1 ? fmt::format(", linear x{:g}", 1 / p.freq_scale)
                          : ""));
  return out;
}

namespace {

void AddAttentionTensors(const AttentionParts& a, const HParams& hp, int il,
                         std::vector<TensorDesc>& t) {
  using R = TensorRole;
  constexpr TensorSuffix kW = TensorSuffix::kWeight;
  constexpr TensorSuffix kB = TensorSuffix::kBias;
  const uint64_t n_embd = hp.n_embd;
  if (a.kind == AttentionKind::kDeltaNet) {
    const DeltaNetParts& d = a.delta_net;
    t.push_back({R::kAttnQkv, il, kW, {n_embd, d.conv_channels()}, true});
    t.push_back({R::kAttnGate, il, kW, {n_embd, d.value_dim()}, true});
    t.push_back({R::kSsmConv1d, il, kW, {d.conv_kernel, d.conv_channels()}, true});
    t.push_back({R::kSsmDt, il, kB, {d.n_v_heads}, true});
    t.push_back({R::kSsmA, il, TensorSuffix::kNone, {d.n_v_heads}, true});
    if (d.separate_beta_alpha) {
      t.push_back({R::kSsmBeta, il, kW, {n_embd, d.n_v_heads}, true});
      t.push_back({R::kSsmAlpha, il, kW, {n_embd, d.n_v_heads}, true});
    } else {
      t.push_back({R::kSsmBetaAlpha, il, kW, {n_embd, 2 * uint64_t{d.n_v_heads}}, true});
    }
    t.push_back({R::kSsmNorm, il, kW, {d.head_v_dim}, true});
    t.push_back({R::kSsmOut, il, kW, {d.value_dim(), n_embd}, true});
    return;
  }
  if (a.kind == AttentionKind::kMla) {
    const MlaParts& m = a.mla;
    const uint64_t head_k = uint64_t{m.head_dim_nope} + hp.n_rot;
    if (m.q_lora_rank > 0) {
      t.push_back({R::kAttnQA, il, kW, {n_embd, m.q_lora_rank}, true});
      t.push_back({R::kAttnQANorm, il, kW, {m.q_lora_rank}, true});
      t.push_back({R::kAttnQB, il, kW, {m.q_lora_rank, hp.n_head * head_k}, true});
    } else {
      t.push_back({R::kAttnQ, il, kW, {n_embd, hp.n_head * head_k}, true});
    }
    t.push_back({R::kAttnKvAMqa, il, kW, {n_embd, uint64_t{m.kv_lora_rank} + hp.n_rot}, true});
    t.push_back({R::kAttnKvANorm, il, kW, {m.kv_lora_rank}, true});
    if (m.legacy_kv_b) {
      t.push_back({R::kAttnKvB,
                   il,
                   kW,
                   {m.kv_lora_rank, uint64_t{hp.n_head} * (m.head_dim_nope + m.head_dim_v)},
                   true});
    } else {
      t.push_back({R::kAttnKB, il, kW, {m.head_dim_nope, m.kv_lora_rank, hp.n_head}, true});
      t.push_back({R::kAttnVB, il, kW, {m.kv_lora_rank, m.head_dim_v, hp.n_head}, true});
    }
    t.push_back({R::kAttnOutput, il, kW, {uint64_t{hp.n_head} * m.head_dim_v, n_embd}, true});
    return;
  }
  t.push_back({R::kAttnQ, il, kW, {n_embd, (a.gqa.output_gate ? 2u : 1u) * hp.n_embd_q()}, true});
  t.push_back({R::kAttnK, il, kW, {n_embd, hp.n_embd_k_gqa()}, true});
  t.push_back({R::kAttnV, il, kW, {n_embd, hp.n_embd_v_gqa()}, true});
  if (a.gqa.qkv_bias) {
    const bool required = a.gqa.qkv_bias_required;
    t.push_back({R::kAttnQ, il, kB, {hp.n_embd_q()}, required});
    t.push_back({R::kAttnK, il, kB, {hp.n_embd_k_gqa()}, required});
    t.push_back({R::kAttnV, il, kB, {hp.n_embd_v_gqa()}, required});
  }
  t.push_back({R::kAttnOutput, il, kW, {uint64_t{hp.n_head} * hp.head_dim_v, n_embd}, true});
  if (a.gqa.out_bias) t.push_back({R::kAttnOutput, il, kB, {n_embd}, true});
  if (a.sinks) t.push_back({R::kAttnSinks, il, kW, {hp.n_head}, true});
  if (a.gqa.qk_norm == QkNorm::kPerHead) {
    t.push_back({R::kAttnQNorm, il, kW, {hp.head_dim_k}, !a.gqa.qk_norm_optional});
    t.push_back({R::kAttnKNorm, il, kW, {hp.head_dim_k}, !a.gqa.qk_norm_optional});
  } else if (a.gqa.qk_norm == QkNorm::kWholeProjection) {
    t.push_back({R::kAttnQNorm, il, kW, {hp.n_embd_q()}, true});
    t.push_back({R::kAttnKNorm, il, kW, {hp.n_embd_k_gqa()}, true});
  }
}

void AddFfnTensors(const FfnParts& f, const RouterPolicy& router, const HParams& hp, int il,
                   std::vector<TensorDesc>& t) {
  using R = TensorRole;
  constexpr TensorSuffix kW = TensorSuffix::kWeight;
  const uint64_t n_embd = hp.n_embd;
  if (f.kind == FfnKind::kDense) {
    t.push_back({R::kFfnGate, il, kW, {n_embd, f.n_ff}, true});
    t.push_back({R::kFfnDown, il, kW, {f.n_ff, n_embd}, true});
    t.push_back({R::kFfnUp, il, kW, {n_embd, f.n_ff}, true});
    return;
  }
  constexpr TensorSuffix kB = TensorSuffix::kBias;
  t.push_back({R::kFfnGateInp, il, kW, {n_embd, hp.n_expert}, true});
  if (f.router_bias) t.push_back({R::kFfnGateInp, il, kB, {hp.n_expert}, true});
  if (router.selection_bias) t.push_back({R::kFfnExpProbsB, il, kB, {hp.n_expert}, true});
  t.push_back({R::kFfnGateExps, il, kW, {n_embd, f.n_ff, hp.n_expert}, true});
  t.push_back({R::kFfnUpExps, il, kW, {n_embd, f.n_ff, hp.n_expert}, true});
  t.push_back({R::kFfnDownExps, il, kW, {f.n_ff, n_embd, hp.n_expert}, true});
  if (f.expert_biases) {
    t.push_back({R::kFfnGateExps, il, kB, {f.n_ff, hp.n_expert}, true});
    t.push_back({R::kFfnUpExps, il, kB, {f.n_ff, hp.n_expert}, true});
    t.push_back({R::kFfnDownExps, il, kB, {n_embd, hp.n_expert}, true});
  }
  if (f.n_ff_shared > 0) {
    if (f.shared_gate == SharedExpertGate::kSigmoid) {
      t.push_back({R::kFfnGateInpShexp, il, kW, {n_embd}, true});
    }
    t.push_back({R::kFfnGateShexp, il, kW, {n_embd, f.n_ff_shared}, true});
    t.push_back({R::kFfnUpShexp, il, kW, {n_embd, f.n_ff_shared}, true});
    t.push_back({R::kFfnDownShexp, il, kW, {f.n_ff_shared, n_embd}, true});
  }
}

}  // namespace

std::vector<TensorDesc> NextnTensors(const ModelParts& parts, const HParams& hp) {
  using R = TensorRole;
  constexpr TensorSuffix kW = TensorSuffix::kWeight;
  const uint64_t n_embd = hp.n_embd;
  std::vector<TensorDesc> t;
  if (parts.layers.empty()) return t;
  const LayerParts& last = parts.layers.back();
  for (uint32_t i = 0; i < hp.n_layer_nextn; ++i) {
    const int il = static_cast<int>(hp.n_layer + i);
    t.push_back({R::kAttnNorm, il, kW, {n_embd}, true});
    AddAttentionTensors(last.attention, hp, il, t);
    t.push_back({FfnNormRole(last.ffn), il, kW, {n_embd}, true});
    AddFfnTensors(last.ffn, parts.router, hp, il, t);
    t.push_back({R::kNextnEhProj, il, kW, {2 * n_embd, n_embd}, true});
    t.push_back({R::kNextnEnorm, il, kW, {n_embd}, true});
    t.push_back({R::kNextnHnorm, il, kW, {n_embd}, true});
    t.push_back({R::kNextnSharedHeadNorm, il, kW, {n_embd}, true});
  }
  return t;
}

std::vector<TensorDesc> ArchTensors(const ModelParts& parts, const HParams& hp) {
  using R = TensorRole;
  constexpr TensorSuffix kW = TensorSuffix::kWeight;
  const uint64_t n_embd = hp.n_embd, n_vocab = hp.n_vocab;
  std::vector<TensorDesc> t;
  t.push_back({R::kTokenEmbd, -1, kW, {n_embd, n_vocab}, true});
  for (int il = 0; il < static_cast<int>(parts.layers.size()); ++il) {
    const LayerParts& layer = parts.layers[il];
    t.push_back({R::kAttnNorm, il, kW, {n_embd}, true});
    AddAttentionTensors(layer.attention, hp, il, t);
    t.push_back({FfnNormRole(layer.ffn), il, kW, {n_embd}, true});
    AddFfnTensors(layer.ffn, parts.router, hp, il, t);
  }
  t.push_back({R::kOutputNorm, -1, kW, {n_embd}, true});
  t.push_back({R::kOutput, -1, kW, {n_embd, n_vocab}, !parts.output_optional});
  return t;
}

}  // namespace mt
