// llama with experts (Mixtral): normal (adjacent-pair) RoPE, no q/k norm, top-k over the
// router logits then softmax over the chosen k (= softmax, top-k, renormalise).
#include "gguf/gguf.h"
#include "model/arch.h"

namespace mt {

// llama.cpp's converter for LlamaModel also writes the vocab size and RoPE dimensions.
static void WriteLlamaKeys(const HParams& hp, GgufMetadata& md) {
  md.Set("llama.vocab_size", GgufValue::Uint32(hp.n_vocab));
  md.Set("llama.rope.dimension_count", GgufValue::Uint32(hp.n_rot));
}

extern const ArchDef kArchLlama = {
    .name = "llama",
    .rope_type = RopeType::kNorm,
    .qk_norm = QkNorm::kNone,
    .norm_topk_prob = true,
    .shared_expert = SharedExpert::kNone,
    .expert_ff_key = false,
    .qkv_bias = false,
    .output_optional = true,
    .write_extra_keys = WriteLlamaKeys,
};

}  // namespace mt
