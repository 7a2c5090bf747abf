// qwen2moe (Qwen1.5-MoE, Qwen2-57B-A14B): q/k/v biases, NEOX RoPE, softmax router without
// renormalisation, plus a shared expert scaled by sigmoid(x . ffn_gate_inp_shexp).
#include "gguf/gguf.h"
#include "model/arch.h"

namespace mt {

static void WriteQwen2MoeKeys(const HParams& hp, GgufMetadata& md) {
  md.Set("qwen2moe.expert_feed_forward_length", GgufValue::Uint32(hp.n_ff_exp));
  md.Set("qwen2moe.expert_shared_feed_forward_length", GgufValue::Uint32(hp.n_ff_shexp));
}

extern const ArchDef kArchQwen2Moe = {
    .name = "qwen2moe",
    .rope_type = RopeType::kNeox,
    .qk_norm = QkNorm::kNone,
    .norm_topk_prob = false,
    .shared_expert = SharedExpert::kSigmoidGated,
    .expert_ff_key = true,
    .qkv_bias = true,
    .output_optional = false,
    .write_extra_keys = WriteQwen2MoeKeys,
};

}  // namespace mt
