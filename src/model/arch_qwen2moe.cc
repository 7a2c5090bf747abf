// qwen2moe (Qwen1.5-MoE, Qwen2-57B-A14B): q/k/v biases, NEOX RoPE, softmax router without
// renormalisation, plus a shared expert scaled by sigmoid(x . ffn_gate_inp_shexp).
#include "gguf/gguf.h"
#include "model/arch.h"

namespace mt {
namespace {

Status ReadQwen2MoeKeys(const HParamsKeys& keys, HParams& hp) {
  MT_RETURN_IF_ERROR(
      keys.Uint("expert_feed_forward_length", hp.n_ff_exp, hp.n_ff / hp.n_expert_used));
  MT_RETURN_IF_ERROR(keys.Uint("expert_shared_feed_forward_length", hp.n_ff_shexp, hp.n_ff));
  if (hp.n_ff_shexp == 0) return InvalidArgument("{}: the shared expert's size is 0", hp.arch);
  return Status::Ok();
}

ModelParts DescribeQwen2Moe(const HParams& hp) {
  return UniformGqaMoeModel(hp, RopeType::kNeox, {.qkv_bias = true}, SharedExpertGate::kSigmoid,
                            /*output_optional=*/false);
}

void WriteQwen2MoeKeys(const HParams& hp, GgufMetadata& md) {
  md.Set("qwen2moe.expert_feed_forward_length", GgufValue::Uint32(hp.n_ff_exp));
  md.Set("qwen2moe.expert_shared_feed_forward_length", GgufValue::Uint32(hp.n_ff_shexp));
}

}  // namespace

extern const ArchDef kArchQwen2Moe = {
    .name = "qwen2moe",
    .read_keys = ReadQwen2MoeKeys,
    .describe = DescribeQwen2Moe,
    .write_keys = WriteQwen2MoeKeys,
};

}  // namespace mt
