// Architectures, one file each (arch_<name>.cc), registered in one table (arch.cc).
//
// An ArchDef reads its architecture's GGUF keys into HParams and describes the model as
// composed parts (model/layer_parts.h): per layer an attention kind and an FFN kind, plus
// the RoPE and the router policy. Everything else follows the parts: the tensor list
// (ArchTensors), the loader, the forward pass, the memory plan and synth. Adding an
// architecture adds a file, a line in the table, a synth preset and tests.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "model/hparams.h"
#include "model/layer_parts.h"
#include "model/tensor_names.h"

namespace mt {

class GgufMetadata;

// One tensor a model of this architecture has.
struct TensorDesc {
  TensorRole role;
  int layer;  // -1 for non-layer tensors
  TensorSuffix suffix;
  std::vector<uint64_t> shape;  // ggml order: shape[0] is the row length
  bool required;                // false: optional (e.g. output, tied to token_embd)
};

struct ArchDef {
  std::string_view name;  // general.architecture

  // Reads the keys beyond the common ones (hparams.cc) into `hp` and checks them: the
  // experts' and shared experts' widths, the router, MLA ranks. Errors are one line naming
  // the key or the inconsistency.
  Status (*read_keys)(const HParamsKeys& keys, HParams& hp);
  // The model as parts. `hp` is valid: read by ReadHParams or a synth preset.
  ModelParts (*describe)(const HParams& hp);
  // Writes the keys beyond the common ones (WriteHParams), as llama.cpp's converter does.
  void (*write_keys)(const HParams& hp, GgufMetadata& metadata);
};

// The parts of a model with hyperparameters `hp` (its architecture must be registered).
ModelParts DescribeModel(const HParams& hp);

// Per layer, whether it has routed experts (ExpertLayoutFromGguf's argument).
std::vector<bool> ExpertLayers(const ModelParts& parts);

// Every tensor of a model with these parts, in file order, as llama.cpp names and shapes
// them.
std::vector<TensorDesc> ArchTensors(const ModelParts& parts, const HParams& hp);

// The RoPE of a model whose heads rotate `n_rot` dims, from the rope.* keys as llama.cpp's
// context computes it (llama_context's YaRN attn_factor and ggml's correction dims).
// `mscale_from_log_mul`: deepseek2's special case, where YaRN's mscale is the
// yarn_log_multiplier too (llama.cpp [TAG_DEEPSEEK2_YARN_LOG_MUL_FIX]).
RopeParts RopeFromHParams(const HParams& hp, RopeType type, int n_rot, bool mscale_from_log_mul);

// The tensors of the NextN/MTP blocks after the trunk (layers n_layer .. + n_layer_nextn):
// each a whole layer like the trunk's last, plus its own projection and norms, as llama.cpp's
// converter writes them. Only synth writes them; nothing loads them.
std::vector<TensorDesc> NextnTensors(const ModelParts& parts, const HParams& hp);

// The tensor that holds a layer's FFN norm: ffn_norm, or post_attention_norm (glm4moe).
TensorRole FfnNormRole(const FfnParts& ffn);

// The parts of a model whose every layer is GQA attention with routed experts (the
// architectures before deepseek2): `hp`'s router and RoPE, kq_scale 1/sqrt(head_dim_k), and
// shared experts of width hp.n_ff_shexp (none if 0).
ModelParts UniformGqaMoeModel(const HParams& hp, RopeType rope, GqaParts gqa,
                              SharedExpertGate shared_gate, bool output_optional);

// The RouterPolicy of hp's router keys.
RouterPolicy RouterFromHParams(const HParams& hp, bool selection_bias);

// The keys of DeepSeek-style MoE models (deepseek2, glm4moe): leading dense layers, routed
// and shared experts, the gating function (`absent_gating` where the key is missing: files
// older than it), the weights' norm and scale, and the NextN/MTP layers after the trunk
// (subtracted from n_layer into n_layer_nextn); each checked against the others.
Status ReadDeepseekStyleMoeKeys(const HParamsKeys& keys, ExpertScoring absent_gating, HParams& hp);

// The keys of the hybrid DeltaNet models (qwen3next, qwen35moe): expert and shared-expert
// widths, the ssm.* sizes (checked against each other), full_attention_interval and the
// NextN/MTP layers after the trunk.
Status ReadHybridDeltaNetKeys(const HParamsKeys& keys, HParams& hp);
// Their parts: DeltaNet layers but every full_attention_interval-th, which is GQA with an
// output gate and per-head q/k norms; experts + a sigmoid-gated shared expert everywhere.
ModelParts DescribeHybridDeltaNet(const HParams& hp, KeyHeadOrder key_heads,
                                  bool separate_beta_alpha);
void WriteHybridDeltaNetKeys(const HParams& hp, GgufMetadata& md);

// One line per run of layers with the same parts, then the router and the RoPE, e.g.
//   "layers 0-1: MLA (q rank 128, kv rank 128, rope 32), dense FFN 768"
//   "router: sigmoid + bias, 4 groups (2 used), top-4, renormalised, x2.5"
// (moetier inspect).
std::vector<std::string> DescribeParts(const ModelParts& parts);

// The registered architectures.
std::span<const ArchDef* const> Architectures();

// The definition for general.architecture == name, or nullptr.
const ArchDef* FindArch(std::string_view name);

// "qwen3moe, olmoe, llama, qwen2moe, deepseek2", for error messages.
std::string SupportedArchNames();

}  // namespace mt
