// qwen3moe (Qwen3-30B-A3B, Qwen3-235B-A22B): per-head q/k RMSNorm, NEOX RoPE, softmax
// router with the top-k weights renormalised (norm_topk_prob), no shared expert.
#include "gguf/gguf.h"
#include "model/arch.h"

namespace mt {

static void WriteQwen3MoeKeys(const HParams& hp, GgufMetadata& md) {
  md.Set("qwen3moe.expert_feed_forward_length", GgufValue::Uint32(hp.n_ff_exp));
}

extern const ArchDef kArchQwen3Moe = {
    .name = "qwen3moe",
    .rope_type = RopeType::kNeox,
    .qk_norm = QkNorm::kPerHead,
    .norm_topk_prob = true,
    .shared_expert = SharedExpert::kNone,
    .expert_ff_key = true,
    .qkv_bias = false,
    .output_optional = true,
    .write_extra_keys = WriteQwen3MoeKeys,
};

}  // namespace mt
