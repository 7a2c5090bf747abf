// olmoe (OLMoE-1B-7B): q/k RMSNorm over the whole projection, NEOX RoPE, softmax router
// without renormalising the top-k weights; experts sized by feed_forward_length.
#include "gguf/gguf.h"
#include "model/arch.h"

namespace mt {

static void WriteOlmoeKeys(const HParams&, GgufMetadata&) {}

extern const ArchDef kArchOlmoe = {
    .name = "olmoe",
    .rope_type = RopeType::kNeox,
    .qk_norm = QkNorm::kWholeProjection,
    .norm_topk_prob = false,
    .shared_expert = SharedExpert::kNone,
    .expert_ff_key = false,
    .qkv_bias = false,
    .output_optional = false,
    .write_extra_keys = WriteOlmoeKeys,
};

}  // namespace mt
