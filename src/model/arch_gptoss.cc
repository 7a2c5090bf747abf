// gpt-oss (gpt-oss-20b, gpt-oss-120b): GQA with q/k/v/o biases and a learned sink logit per
// head, a sliding window (128) on every other layer (the even ones), NEOX RoPE with YaRN,
// the FFN's norm stored as post_attention_norm; every layer has routed experts behind a
// biased router whose top-k logits are softmaxed, experts with biases on gate, up and down
// and a clamped SwiGLU. kq_scale is 1/sqrt(head_dim) (head_dim 64 is not n_embd / n_head).
#include <cmath>

#include "gguf/gguf.h"
#include "model/arch.h"

namespace mt {
namespace {

Status ReadGptOssKeys(const HParamsKeys& keys, HParams& hp) {
  MT_RETURN_IF_ERROR(keys.Uint("expert_feed_forward_length", hp.n_ff_exp, std::nullopt));
  MT_RETURN_IF_ERROR(keys.Uint("attention.sliding_window", hp.n_swa, std::nullopt));
  MT_RETURN_IF_ERROR(keys.Uint("attention.sliding_window_pattern", hp.swa_pattern, 2, 1024));
  if (hp.n_swa == 0) {
    return InvalidArgument("{} is 0 (gpt-oss slides on every other layer)",
                           keys.Key("attention.sliding_window"));
  }
  if (keys.Has("rope.freq_base_swa")) {
    // llama.cpp rotates the sliding layers with this base; moetier computes one set of
    // angles per token for all layers, so a different one is refused rather than ignored.
    float base_swa = 0;
    MT_RETURN_IF_ERROR(keys.Float("rope.freq_base_swa", base_swa, 0.0f));
    if (base_swa != hp.rope_freq_base) {
      return Unimplemented("{} {} differs from rope.freq_base {}: not supported",
                           keys.Key("rope.freq_base_swa"), base_swa, hp.rope_freq_base);
    }
  }
  if (hp.n_expert == 0 || hp.n_expert_used == 0) {
    return InvalidArgument("{}: gpt-oss needs expert_count and expert_used_count", hp.arch);
  }
  hp.expert_gating = ExpertScoring::kSoftmaxOfTopK;
  return keys.Float("expert_weights_scale", hp.expert_weights_scale, 0.0f);
}

// llama.cpp's set_swa_pattern without dense_first: il % P < P - 1 slides (P = 0: all do).
bool Slides(const HParams& hp, uint32_t il) {
  return hp.swa_pattern == 0 || il % hp.swa_pattern < hp.swa_pattern - 1;
}

ModelParts DescribeGptOss(const HParams& hp) {
  ModelParts parts = UniformGqaMoeModel(
      hp, RopeType::kNeox, {.qkv_bias = true, .qkv_bias_required = true, .out_bias = true},
      SharedExpertGate::kNone, /*output_optional=*/false);
  parts.router = RouterFromHParams(hp, /*selection_bias=*/false);
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    LayerParts& layer = parts.layers[il];
    layer.attention.sinks = true;
    layer.attention.sliding_window = Slides(hp, il) ? hp.n_swa : 0;
    layer.attention.kq_scale = 1.0f / std::sqrt(static_cast<float>(hp.n_rot));
    layer.ffn.norm_named_post_attention = true;
    layer.ffn.activation = FfnActivation::kSwigluOai;
    layer.ffn.router_bias = true;
    layer.ffn.expert_biases = true;
  }
  return parts;
}

// What llama.cpp's GptOssModel converter writes beyond the common keys.
void WriteGptOssKeys(const HParams& hp, GgufMetadata& md) {
  auto key = [&](std::string_view suffix) { return fmt::format("{}.{}", hp.arch, suffix); };
  md.Set(key("attention.sliding_window"), GgufValue::Uint32(hp.n_swa));
  md.Set(key("expert_feed_forward_length"), GgufValue::Uint32(hp.n_ff_exp));
}

}  // namespace

extern const ArchDef kArchGptOss = {
    .name = "gpt-oss",
    .read_keys = ReadGptOssKeys,
    .describe = DescribeGptOss,
    .write_keys = WriteGptOssKeys,
};

}  // namespace mt
