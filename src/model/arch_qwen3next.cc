// qwen3next (Qwen3-Next-80B-A3B): a hybrid of gated DeltaNet layers (linear attention with a
// recurrent state) and, every full_attention_interval-th layer, GQA whose query projection
// also carries an output gate (per-head q/k norms, NEOX RoPE over a quarter of each head).
// Every layer has routed experts (softmax, renormalised) plus a sigmoid-gated shared expert;
// the FFN's norm is stored as post_attention_norm. A value head of a DeltaNet layer reads its
// group's key head (the checkpoint's order). The NextN/MTP block after the trunk is never
// loaded. qwen35moe (arch_qwen35moe.cc) shares all of this but its rope and b/a tensors.
#include "gguf/gguf.h"
#include "model/arch.h"

namespace mt {

Status ReadHybridDeltaNetKeys(const HParamsKeys& keys, HParams& hp) {
  MT_RETURN_IF_ERROR(
      keys.Uint("expert_feed_forward_length", hp.n_ff_exp, hp.n_ff / hp.n_expert_used));
  MT_RETURN_IF_ERROR(keys.Uint("expert_shared_feed_forward_length", hp.n_ff_shexp, hp.n_ff));
  if (hp.n_ff_shexp == 0) return InvalidArgument("{}: the shared expert's size is 0", hp.arch);
  MT_RETURN_IF_ERROR(keys.Uint("ssm.conv_kernel", hp.ssm_d_conv, std::nullopt, 64));
  MT_RETURN_IF_ERROR(keys.Uint("ssm.inner_size", hp.ssm_d_inner, std::nullopt));
  MT_RETURN_IF_ERROR(keys.Uint("ssm.state_size", hp.ssm_d_state, std::nullopt, 4096));
  MT_RETURN_IF_ERROR(keys.Uint("ssm.time_step_rank", hp.ssm_dt_rank, std::nullopt, 4096));
  MT_RETURN_IF_ERROR(keys.Uint("ssm.group_count", hp.ssm_n_group, std::nullopt, 4096));
  if (keys.Has("attention.recurrent_layers")) {
    return Unimplemented("{}: a per-layer recurrent pattern is not supported (only {})",
                         keys.Key("attention.recurrent_layers"),
                         keys.Key("full_attention_interval"));
  }
  MT_RETURN_IF_ERROR(keys.Uint("full_attention_interval", hp.full_attn_interval, 4, 1024));
  if (hp.ssm_d_conv < 1 || hp.ssm_d_state == 0 || hp.ssm_dt_rank == 0 || hp.ssm_n_group == 0 ||
      hp.ssm_dt_rank % hp.ssm_n_group != 0 ||
      uint64_t{hp.ssm_dt_rank} * hp.ssm_d_state != hp.ssm_d_inner) {
    // llama.cpp sizes value heads as state_size too (S_k == S_v).
    return InvalidArgument(
        "{}: bad DeltaNet sizes (ssm.conv_kernel {}, inner_size {}, state_size {}, "
        "time_step_rank {}, group_count {}): time_step_rank must be a multiple of group_count "
        "and inner_size time_step_rank x state_size",
        hp.arch, hp.ssm_d_conv, hp.ssm_d_inner, hp.ssm_d_state, hp.ssm_dt_rank, hp.ssm_n_group);
  }
  if (hp.full_attn_interval == 0) {
    return InvalidArgument("{} is 0", keys.Key("full_attention_interval"));
  }
  uint32_t nextn = 0;
  MT_RETURN_IF_ERROR(keys.Uint("nextn_predict_layers", nextn, 0));
  if (nextn >= hp.n_layer) {
    return InvalidArgument("{} {} leaves no layer of {}", keys.Key("nextn_predict_layers"), nextn,
                           hp.n_layer);
  }
  hp.n_layer -= nextn;  // the NextN/MTP layers come last and are not part of the trunk
  hp.n_layer_nextn = nextn;
  hp.expert_weights_norm = true;  // llama.cpp's build_moe_ffn call for both architectures
  return keys.Float("expert_weights_scale", hp.expert_weights_scale, 0.0f);
}

ModelParts DescribeHybridDeltaNet(const HParams& hp, KeyHeadOrder key_heads,
                                  bool separate_beta_alpha) {
  ModelParts parts =
      UniformGqaMoeModel(hp, RopeType::kNeox, {.qk_norm = QkNorm::kPerHead, .output_gate = true},
                         SharedExpertGate::kSigmoid, /*output_optional=*/true);
  const DeltaNetParts delta_net{.conv_kernel = hp.ssm_d_conv,
                                .n_k_heads = hp.ssm_n_group,
                                .n_v_heads = hp.ssm_dt_rank,
                                .head_k_dim = hp.ssm_d_state,
                                .head_v_dim = hp.ssm_d_state,
                                .key_heads = key_heads,
                                .separate_beta_alpha = separate_beta_alpha};
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    LayerParts& layer = parts.layers[il];
    layer.ffn.norm_named_post_attention = true;
    if ((il + 1) % hp.full_attn_interval != 0) {
      layer.attention = {.kind = AttentionKind::kDeltaNet, .delta_net = delta_net};
    }
  }
  return parts;
}

void WriteHybridDeltaNetKeys(const HParams& hp, GgufMetadata& md) {
  auto key = [&](std::string_view suffix) { return fmt::format("{}.{}", hp.arch, suffix); };
  md.Set(key("expert_feed_forward_length"), GgufValue::Uint32(hp.n_ff_exp));
  md.Set(key("expert_shared_feed_forward_length"), GgufValue::Uint32(hp.n_ff_shexp));
  md.Set(key("ssm.conv_kernel"), GgufValue::Uint32(hp.ssm_d_conv));
  md.Set(key("ssm.state_size"), GgufValue::Uint32(hp.ssm_d_state));
  md.Set(key("ssm.group_count"), GgufValue::Uint32(hp.ssm_n_group));
  md.Set(key("ssm.time_step_rank"), GgufValue::Uint32(hp.ssm_dt_rank));
  md.Set(key("ssm.inner_size"), GgufValue::Uint32(hp.ssm_d_inner));
  md.Set(key("full_attention_interval"), GgufValue::Uint32(hp.full_attn_interval));
  md.Set(key("rope.dimension_count"), GgufValue::Uint32(hp.n_rot));
  if (hp.n_layer_nextn > 0) {
    md.Set(key("nextn_predict_layers"), GgufValue::Uint32(hp.n_layer_nextn));
  }
}

namespace {

ModelParts DescribeQwen3Next(const HParams& hp) {
  return DescribeHybridDeltaNet(hp, KeyHeadOrder::kGrouped, /*separate_beta_alpha=*/false);
}

}  // namespace

extern const ArchDef kArchQwen3Next = {
    .name = "qwen3next",
    .read_keys = ReadHybridDeltaNetKeys,
    .describe = DescribeQwen3Next,
    .write_keys = WriteHybridDeltaNetKeys,
};

}  // namespace mt
