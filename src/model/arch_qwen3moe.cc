// qwen3moe (Qwen3-30B-A3B, Qwen3-235B-A22B): per-head q/k RMSNorm, NEOX RoPE, softmax
// router with the top-k weights renormalised (norm_topk_prob), no shared expert.
#include "gguf/gguf.h"
#include "model/arch.h"

namespace mt {
namespace {

Status ReadQwen3MoeKeys(const HParamsKeys& keys, HParams& hp) {
  hp.expert_weights_norm = true;
  return keys.Uint("expert_feed_forward_length", hp.n_ff_exp, hp.n_ff / hp.n_expert_used);
}

ModelParts DescribeQwen3Moe(const HParams& hp) {
  return UniformGqaMoeModel(hp, RopeType::kNeox, {.qk_norm = QkNorm::kPerHead},
                            SharedExpertGate::kNone, /*output_optional=*/true);
}

void WriteQwen3MoeKeys(const HParams& hp, GgufMetadata& md) {
  md.Set("qwen3moe.expert_feed_forward_length", GgufValue::Uint32(hp.n_ff_exp));
}

}  // namespace

extern const ArchDef kArchQwen3Moe = {
    .name = "qwen3moe",
    .read_keys = ReadQwen3MoeKeys,
    .describe = DescribeQwen3Moe,
    .write_keys = WriteQwen3MoeKeys,
};

}  // namespace mt
