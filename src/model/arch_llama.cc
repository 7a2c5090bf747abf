// llama with experts (Mixtral): normal (adjacent-pair) RoPE, no q/k norm, top-k over the
// router logits then softmax over the chosen k (= softmax, top-k, renormalise).
#include "gguf/gguf.h"
#include "model/arch.h"

namespace mt {
namespace {

Status ReadLlamaKeys(const HParamsKeys&, HParams& hp) {
  hp.n_ff_exp = hp.n_ff;
  hp.expert_weights_norm = true;
  return Status::Ok();
}

ModelParts DescribeLlama(const HParams& hp) {
  return UniformGqaMoeModel(hp, RopeType::kNorm, {}, SharedExpertGate::kNone,
                            /*output_optional=*/true);
}

// llama.cpp's converter for LlamaModel also writes the vocab size and RoPE dimensions.
void WriteLlamaKeys(const HParams& hp, GgufMetadata& md) {
  md.Set("llama.vocab_size", GgufValue::Uint32(hp.n_vocab));
  md.Set("llama.rope.dimension_count", GgufValue::Uint32(hp.n_rot));
}

}  // namespace

extern const ArchDef kArchLlama = {
    .name = "llama",
    .read_keys = ReadLlamaKeys,
    .describe = DescribeLlama,
    .write_keys = WriteLlamaKeys,
};

}  // namespace mt
