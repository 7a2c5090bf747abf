// Architectures, one file each (arch_<name>.cc), registered in one table (arch.cc).
//
// An ArchDef says what differs between MoE transformer families: the tensors a file must
// have, how their hyperparameters are named, and the few graph choices (RoPE variant,
// q/k norm, router normalisation, shared expert). The engine's forward pass reads these
// flags; adding an architecture adds a file and a line in the table.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "model/hparams.h"
#include "model/tensor_names.h"

namespace mt {

class GgufMetadata;

enum class RopeType {
  kNorm,  // rotate adjacent pairs (x[2i], x[2i+1]): llama
  kNeox,  // rotate halves (x[i], x[i + n_rot/2]): qwen2/3, olmoe
};

enum class QkNorm {
  kNone,
  kPerHead,         // RMSNorm over each head's head_dim before RoPE (qwen3moe)
  kWholeProjection  // RMSNorm over the whole q / k projection (olmoe)
};

enum class SharedExpert {
  kNone,
  kSigmoidGated  // + sigmoid(x . ffn_gate_inp_shexp) * SwiGLU shared FFN (qwen2moe)
};

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
  RopeType rope_type;
  QkNorm qk_norm;
  // Router: softmax over all experts' logits, top-k; then, if true, the k weights are
  // renormalised to sum to 1 (equivalently: softmax over the chosen k logits).
  bool norm_topk_prob;
  SharedExpert shared_expert;
  // True if the routed experts' hidden size is {arch}.expert_feed_forward_length (falling
  // back to feed_forward_length / n_expert_used as llama.cpp does); false if it is
  // feed_forward_length itself (olmoe, llama/Mixtral).
  bool expert_ff_key;
  // Optional q/k/v projection biases (qwen2moe checkpoints have them).
  bool qkv_bias;
  // True if output.weight may be absent, the head then being tied to token_embd.
  bool output_optional;

  // Writes keys beyond the common ones (see WriteHParams), as llama.cpp's converter does.
  void (*write_extra_keys)(const HParams& hp, GgufMetadata& metadata);
};

// Every tensor of a model of `arch` with hyperparameters `hp`, in file order.
std::vector<TensorDesc> ArchTensors(const ArchDef& arch, const HParams& hp);

// The registered architectures.
std::span<const ArchDef* const> Architectures();

// The definition for general.architecture == name, or nullptr.
const ArchDef* FindArch(std::string_view name);

// "qwen3moe, olmoe, llama, qwen2moe", for error messages.
std::string SupportedArchNames();

}  // namespace mt
