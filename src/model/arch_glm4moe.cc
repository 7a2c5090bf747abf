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
  if (keys.Has("rope.dimension_sections")) {
    return Unimplemented("{}: multimodal RoPE sections (GLM-4.5V) are not supported", hp.arch);
  }
  // expert_gating_func absent: sigmoid, as llama.cpp assumes for GLM-4.5
  return ReadDeepseekStyleMoeKeys(keys, ExpertScoring::kSigmoid, hp);
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
