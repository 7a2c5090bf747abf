// olmoe (OLMoE-1B-7B): q/k RMSNorm over the whole projection, NEOX RoPE, softmax router
// without renormalising the top-k weights; experts sized by feed_forward_length.
#include "gguf/gguf.h"
#include "model/arch.h"

namespace mt {
namespace {

Status ReadOlmoeKeys(const HParamsKeys&, HParams& hp) {
  hp.n_ff_exp = hp.n_ff;
  return Status::Ok();
}

ModelParts DescribeOlmoe(const HParams& hp) {
  return UniformGqaMoeModel(hp, RopeType::kNeox, {.qk_norm = QkNorm::kWholeProjection},
                            SharedExpertGate::kNone, /*output_optional=*/false);
}

void WriteOlmoeKeys(const HParams&, GgufMetadata&) {}

}  // namespace

extern const ArchDef kArchOlmoe = {
    .name = "olmoe",
    .read_keys = ReadOlmoeKeys,
    .describe = DescribeOlmoe,
    .write_keys = WriteOlmoeKeys,
};

}  // namespace mt
