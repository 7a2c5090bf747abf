#include "model/memory_plan.h"

#include <algorithm>
#include <limits>

#include "gguf/gguf.h"
#include "model/hparams.h"
#include "model/tensor_names.h"

namespace mt {

Result<MemoryPlan> ComputeMemoryPlan(const GgufModel& model) {
  MemoryPlan plan;
  const GgufMetadata& md = model.metadata();
  if (const std::string* arch = md.FindString("general.architecture")) {
    plan.n_expert_used =
        static_cast<uint32_t>(md.FindUint(fmt::format("{}.expert_used_count", *arch)).value_or(0));
  }
  auto layer = [&](int il) -> LayerMemory& {
    if (static_cast<size_t>(il) >= plan.layers.size()) plan.layers.resize(il + 1);
    return plan.layers[il];
  };
  // The trunk's layers; the NextN/MTP layers after them are not part of the model we run.
  // (Metadata moetier cannot run still gets a plan, of every layer.)
  const Result<HParams> hp = ReadHParams(md);
  const int n_layer = hp.ok() ? static_cast<int>(hp->n_layer) : std::numeric_limits<int>::max();
  bool has_output = model.FindTensor("output.weight") != nullptr;
  for (const GgufTensor& t : model.tensors()) {
    int il = LayerOfTensorName(t.name);
    if (il >= n_layer) {
      plan.unused_bytes += t.n_bytes;
      continue;
    }
    plan.total_bytes += t.n_bytes;
    if (std::optional<PerExpertName> pe = ParsePerExpertTensorName(t.name)) {
      // A pack's expert slice (2-D); expert 0's slices give the bytes of one expert.
      LayerMemory& lm = layer(il);
      lm.expert_bytes += t.n_bytes;
      lm.n_expert = std::max<uint32_t>(lm.n_expert, static_cast<uint32_t>(pe->expert) + 1);
      if (pe->expert == 0) lm.bytes_per_expert += t.n_bytes;
      plan.expert_bytes += t.n_bytes;
      continue;
    }
    if (IsRoutedExpertTensorName(t.name) && il >= 0) {
      if (t.shape.size() != 3 || t.shape[2] == 0) {
        return InvalidArgument("tensor {}: routed experts must be stacked in a 3-D tensor", t.name);
      }
      LayerMemory& lm = layer(il);
      lm.expert_bytes += t.n_bytes;
      lm.n_expert = static_cast<uint32_t>(std::max<uint64_t>(lm.n_expert, t.shape[2]));
      lm.bytes_per_expert += t.n_bytes / t.shape[2];
      plan.expert_bytes += t.n_bytes;
      continue;
    }
    plan.dense_bytes += t.n_bytes;
    if (il >= 0) {
      layer(il).dense_bytes += t.n_bytes;
    } else {
      plan.global_dense_bytes += t.n_bytes;
    }
    bool embedding_row_only = t.name == "token_embd.weight" && has_output && t.rows() > 0;
    plan.dense_bytes_per_token += embedding_row_only ? t.n_bytes / t.rows() : t.n_bytes;
  }
  for (const LayerMemory& lm : plan.layers) {
    plan.expert_bytes_per_token +=
        uint64_t{std::min(plan.n_expert_used, lm.n_expert)} * lm.bytes_per_expert;
  }
  return plan;
}

}  // namespace mt
