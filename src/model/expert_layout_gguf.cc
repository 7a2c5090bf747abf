#include "model/expert_layout_gguf.h"

#include <optional>

#include "gguf/gguf.h"

namespace mt {

Result<ExpertLayout> ExpertLayoutFromGguf(const GgufModel& model, uint32_t n_layer) {
  std::vector<std::string> files;
  for (const GgufShard& s : model.shards()) files.push_back(s.path);
  std::optional<ExpertLayout> layout;
  static constexpr const char* kNames[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
  for (uint32_t il = 0; il < n_layer; ++il) {
    const GgufTensor* t[3];
    for (int p = 0; p < 3; ++p) {
      std::string name = fmt::format("blk.{}.{}.weight", il, kNames[p]);
      t[p] = model.FindTensor(name);
      if (t[p] == nullptr) return NotFound("missing tensor {}", name);
      if (t[p]->shape.size() != 3) return InvalidArgument("tensor {} is not 3-D", name);
    }
    const uint64_t n_embd = t[kGate]->shape[0], n_ff = t[kGate]->shape[1];
    const uint64_t n_expert = t[kGate]->shape[2];
    if (t[kUp]->shape != t[kGate]->shape ||
        t[kDown]->shape != std::vector<uint64_t>{n_ff, n_embd, n_expert}) {
      return InvalidArgument("layer {}: expert tensors have inconsistent shapes", il);
    }
    if (!layout) layout.emplace(files, static_cast<uint32_t>(n_expert));
    if (n_expert != layout->n_expert()) {
      return InvalidArgument("layer {} has {} experts, layer 0 has {}", il, n_expert,
                             layout->n_expert());
    }
    ExpertSpec spec;
    spec.n_embd = static_cast<uint32_t>(n_embd);
    spec.n_ff = static_cast<uint32_t>(n_ff);
    spec.gate_type = t[kGate]->type;
    spec.up_type = t[kUp]->type;
    spec.down_type = t[kDown]->type;
    std::array<ExpertPartTensor, 3> parts;
    for (int p = 0; p < 3; ++p) {
      parts[p] = {t[p]->shard, t[p]->file_offset, t[p]->n_bytes / n_expert, t[p]->data};
    }
    layout->AddLayer(spec, parts);
  }
  if (!layout) return InvalidArgument("the model has no layers");
  return std::move(*layout);
}


}  // namespace mt
