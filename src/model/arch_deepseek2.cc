// deepseek2 (DeepSeek-V2, V2-Lite, V3, R1, Kimi-K2): multi-head latent attention with NORMAL
// RoPE on the rope part of each head (YaRN), leading dense layers, then routed experts with
// shared experts; the router is softmax (V2) or sigmoid with a selection bias and groups
// (V3), optionally renormalised and scaled.
//
// Two file layouts, told apart by attention.key_length_mla: the current one (split attn_k_b
// and attn_v_b; key_length = kv_lora_rank + rope dims and value_length = kv_lora_rank, the
// sizes of the latent MQA) and the legacy one (attn_kv_b only; key_length and value_length
// are a head's q/k and v sizes).
#include <cmath>

#include "gguf/gguf.h"
#include "model/arch.h"

namespace mt {
namespace {

bool IsMla(const HParams& hp) { return hp.head_dim_k_mla != 0; }
uint32_t HeadDimK(const HParams& hp) { return IsMla(hp) ? hp.head_dim_k_mla : hp.head_dim_k; }
uint32_t HeadDimV(const HParams& hp) { return IsMla(hp) ? hp.head_dim_v_mla : hp.head_dim_v; }

Status ReadDeepseek2Keys(const HParamsKeys& keys, HParams& hp) {
  // expert_gating_func absent: DeepSeek-V2 and V2.5 files written before the key (softmax)
  MT_RETURN_IF_ERROR(ReadDeepseekStyleMoeKeys(keys, ExpertScoring::kSoftmax, hp));
  MT_RETURN_IF_ERROR(keys.Uint("attention.q_lora_rank", hp.n_lora_q, 0));
  MT_RETURN_IF_ERROR(keys.Uint("attention.kv_lora_rank", hp.n_lora_kv, std::nullopt));
  MT_RETURN_IF_ERROR(keys.Uint("attention.key_length_mla", hp.head_dim_k_mla, 0));
  MT_RETURN_IF_ERROR(keys.Uint("attention.value_length_mla", hp.head_dim_v_mla, 0));
  if (keys.Has("rope.scaling.yarn_log_multiplier")) {
    // The converter stores 0.1 * mscale_all_dim; llama.cpp cancels the 0.1.
    MT_RETURN_IF_ERROR(keys.Float("rope.scaling.yarn_log_multiplier", hp.rope_yarn_log_mul, 0.0f));
    hp.rope_yarn_log_mul /= 0.1f;
  }

  // Consistency of the ranks: a bad file must not index past a tensor.
  if (hp.n_lora_kv == 0) return InvalidArgument("{} is 0", keys.Key("attention.kv_lora_rank"));
  if ((hp.head_dim_k_mla == 0) != (hp.head_dim_v_mla == 0)) {
    return InvalidArgument("{} and {} must both be present or both absent",
                           keys.Key("attention.key_length_mla"),
                           keys.Key("attention.value_length_mla"));
  }
  if (IsMla(hp) && (hp.head_dim_k != hp.n_lora_kv + hp.n_rot || hp.head_dim_v != hp.n_lora_kv)) {
    return InvalidArgument(
        "{}: key_length {} and value_length {} must be kv_lora_rank + rope "
        "dims ({} + {}) and kv_lora_rank",
        hp.arch, hp.head_dim_k, hp.head_dim_v, hp.n_lora_kv, hp.n_rot);
  }
  // The per-head products run on whole 16-row panels of k_b and v_b.
  if (hp.n_lora_kv % 16 != 0 || HeadDimV(hp) % 16 != 0) {
    return Unimplemented("{}: kv_lora_rank {} and the value length {} must be multiples of 16",
                         hp.arch, hp.n_lora_kv, HeadDimV(hp));
  }
  if (HeadDimK(hp) <= hp.n_rot || HeadDimV(hp) == 0) {
    return InvalidArgument("{}: a head's key length {} must exceed its rope dims {}", hp.arch,
                           HeadDimK(hp), hp.n_rot);
  }
  return Status::Ok();
}

ModelParts DescribeDeepseek2(const HParams& hp) {
  ModelParts parts;
  parts.rope = RopeFromHParams(hp, RopeType::kNorm, static_cast<int>(hp.n_rot),
                               /*mscale_from_log_mul=*/true);
  // DeepSeek-V3's e_score_correction_bias comes with its sigmoid router.
  parts.router = RouterFromHParams(hp, hp.expert_gating == ExpertScoring::kSigmoid);
  parts.output_optional = true;

  // llama.cpp scales the scores by mscale^2 / sqrt(head size): YaRN's magnitude correction,
  // which the rope part alone would not carry to the latent part's scores.
  const float ln_factor = std::log(1.0f / parts.rope.freq_scale);
  const float attn_factor_org = parts.rope.attn_factor * (1.0f + 0.1f * ln_factor);
  const float mscale = attn_factor_org * (1.0f + 0.1f * hp.rope_yarn_log_mul * ln_factor);
  LayerParts layer;
  layer.attention.kind = AttentionKind::kMla;
  layer.attention.kq_scale = 1.0f * mscale * mscale / std::sqrt(static_cast<float>(HeadDimK(hp)));
  MlaParts& mla = layer.attention.mla;
  mla.q_lora_rank = hp.n_lora_q;
  mla.kv_lora_rank = hp.n_lora_kv;
  mla.head_dim_nope = HeadDimK(hp) - hp.n_rot;
  mla.head_dim_v = HeadDimV(hp);
  mla.legacy_kv_b = !IsMla(hp);
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    if (hp.has_experts(il)) {
      layer.ffn = {.kind = FfnKind::kMoe, .n_ff = hp.n_ff_exp, .n_ff_shared = hp.n_ff_shexp};
    } else {
      layer.ffn = {.kind = FfnKind::kDense, .n_ff = hp.n_ff};
    }
    parts.layers.push_back(layer);
  }
  return parts;
}

// What llama.cpp's DeepseekV2Model converter writes beyond the common keys.
void WriteDeepseek2Keys(const HParams& hp, GgufMetadata& md) {
  auto key = [&](std::string_view suffix) { return fmt::format("{}.{}", hp.arch, suffix); };
  md.Set(key("leading_dense_block_count"), GgufValue::Uint32(hp.n_layer_dense_lead));
  md.Set(key("vocab_size"), GgufValue::Uint32(hp.n_vocab));
  // The converter writes the q LoRA rank only when the model has one. llama.cpp then
  // requires it, except at V2-Lite's layer counts (26, 27): other files without a q LoRA get
  // an explicit 0, which it reads as "attn_q", so that it loads them too.
  if (hp.n_lora_q > 0 || (hp.n_layer != 26 && hp.n_layer != 27)) {
    md.Set(key("attention.q_lora_rank"), GgufValue::Uint32(hp.n_lora_q));
  }
  md.Set(key("attention.kv_lora_rank"), GgufValue::Uint32(hp.n_lora_kv));
  md.Set(key("attention.key_length"), GgufValue::Uint32(hp.head_dim_k));
  md.Set(key("attention.value_length"), GgufValue::Uint32(hp.head_dim_v));
  if (IsMla(hp)) {
    md.Set(key("attention.key_length_mla"), GgufValue::Uint32(hp.head_dim_k_mla));
    md.Set(key("attention.value_length_mla"), GgufValue::Uint32(hp.head_dim_v_mla));
  }
  md.Set(key("expert_feed_forward_length"), GgufValue::Uint32(hp.n_ff_exp));
  md.Set(key("expert_shared_count"), GgufValue::Uint32(hp.n_expert_shared));
  if (hp.expert_weights_scale != 0) {
    md.Set(key("expert_weights_scale"), GgufValue::Float32(hp.expert_weights_scale));
  }
  if (hp.expert_weights_norm) md.Set(key("expert_weights_norm"), GgufValue::Bool(true));
  md.Set(key("expert_gating_func"),
         GgufValue::Uint32(hp.expert_gating == ExpertScoring::kSigmoid ? 2 : 1));
  md.Set(key("rope.dimension_count"), GgufValue::Uint32(hp.n_rot));
  if (hp.n_layer_nextn > 0) {
    md.Set(key("nextn_predict_layers"), GgufValue::Uint32(hp.n_layer_nextn));
  }
  if (hp.rope_yarn_log_mul != 0) {
    md.Set(key("rope.scaling.yarn_log_multiplier"),
           GgufValue::Float32(0.1f * hp.rope_yarn_log_mul));
  }
}

}  // namespace

extern const ArchDef kArchDeepseek2 = {
    .name = "deepseek2",
    .read_keys = ReadDeepseek2Keys,
    .describe = DescribeDeepseek2,
    .write_keys = WriteDeepseek2Keys,
};

}  // namespace mt
