// glm4moe (GLM-4.5, GLM-4.6, GLM-4.5-Air): GQA with q/k/v biases (and per-head q/k norms in
// GLM-4.5/4.6, not in Air), NEOX RoPE over part of each head (rope.dimension_count, half of
// it in the released models), the FFN's norm stored as post_attention_norm, leading dense
// layers, then routed experts behind a sigmoid router with a selection bias (exp_probs_b),
// renormalised and scaled, plus one shared expert. The NextN/MTP layers at the end of
// block_count (nextn_predict_layers) are not part of the trunk: never loaded or streamed.
#include "gguf/gguf.h"
#include "model/arch.h"

namespace mt {
namespace {

Status ReadGlm4MoeKeys(const HParamsKeys& keys, HParams& hp) {
  MT_RETURN_IF_ERROR(keys.Uint("leading_dense_block_count", hp.n_layer_dense_lead, 0));
  MT_RETURN_IF_ERROR(keys.Uint("expert_feed_forward_length", hp.n_ff_exp, std::nullopt));
  MT_RETURN_IF_ERROR(keys.Uint("expert_shared_count", hp.n_expert_shared, std::nullopt, 64));
  MT_RETURN_IF_ERROR(keys.Float("expert_weights_scale", hp.expert_weights_scale, 0.0f));
  MT_RETURN_IF_ERROR(keys.Bool("expert_weights_norm", hp.expert_weights_norm, false));
  uint32_t gating = 0;
  MT_RETURN_IF_ERROR(keys.Uint("expert_gating_func", gating, 0));
  switch (gating) {
    case 0:  // absent: sigmoid, as llama.cpp assumes for GLM-4.5
    case 2:
      hp.expert_gating = ExpertScoring::kSigmoid;
      break;
    case 1:
      hp.expert_gating = ExpertScoring::kSoftmax;
      break;
    default:
      return Unimplemented("{} {} is not supported (1 softmax, 2 sigmoid)",
                           keys.Key("expert_gating_func"), gating);
  }
  if (keys.Has("rope.dimension_sections")) {
    return Unimplemented("{}: multimodal RoPE sections (GLM-4.5V) are not supported", hp.arch);
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

ModelParts DescribeGlm4Moe(const HParams& hp) {
  ModelParts parts =
      UniformGqaMoeModel(hp, RopeType::kNeox,
                         {.qk_norm = QkNorm::kPerHead, .qk_norm_optional = true, .qkv_bias = true},
                         SharedExpertGate::kNone, /*output_optional=*/true);
  parts.router = RouterFromHParams(hp, /*selection_bias=*/true);
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    FfnParts& ffn = parts.layers[il].ffn;
    if (!hp.has_experts(il)) ffn = {.kind = FfnKind::kDense, .n_ff = hp.n_ff};
    ffn.norm_named_post_attention = true;
  }
  return parts;
}

// What llama.cpp's Glm4MoeModel converter writes beyond the common keys.
void WriteGlm4MoeKeys(const HParams& hp, GgufMetadata& md) {
  auto key = [&](std::string_view suffix) { return fmt::format("{}.{}", hp.arch, suffix); };
  md.Set(key("leading_dense_block_count"), GgufValue::Uint32(hp.n_layer_dense_lead));
  md.Set(key("expert_feed_forward_length"), GgufValue::Uint32(hp.n_ff_exp));
  md.Set(key("expert_shared_count"), GgufValue::Uint32(hp.n_expert_shared));
  md.Set(key("expert_weights_scale"), GgufValue::Float32(hp.expert_weights_scale));
  md.Set(key("expert_weights_norm"), GgufValue::Bool(hp.expert_weights_norm));
  md.Set(key("expert_gating_func"),
         GgufValue::Uint32(hp.expert_gating == ExpertScoring::kSigmoid ? 2 : 1));
  md.Set(key("rope.dimension_count"), GgufValue::Uint32(hp.n_rot));
  md.Set(key("nextn_predict_layers"), GgufValue::Uint32(hp.n_layer_nextn));
}

}  // namespace

extern const ArchDef kArchGlm4Moe = {
    .name = "glm4moe",
    .read_keys = ReadGlm4MoeKeys,
    .describe = DescribeGlm4Moe,
    .write_keys = WriteGlm4MoeKeys,
};

}  // namespace mt
