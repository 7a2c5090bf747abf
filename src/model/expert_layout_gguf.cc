#include "model/expert_layout_gguf.h"

#include <limits>
#include <optional>

#include "gguf/gguf.h"
#include "model/tensor_names.h"

namespace mt {
namespace {

constexpr TensorRole kStacked[3] = {TensorRole::kFfnGateExps, TensorRole::kFfnUpExps,
                                    TensorRole::kFfnDownExps};

std::vector<std::string> FilesOf(const GgufModel& model) {
  std::vector<std::string> files;
  for (const GgufShard& s : model.shards()) files.push_back(s.path);
  return files;
}

// The experts' count: the stacked tensors' third dimension in the first layer that has them.
Result<uint32_t> StackedExpertCount(const GgufModel& model, const std::vector<bool>& has_experts) {
  for (uint32_t il = 0; il < has_experts.size(); ++il) {
    if (!has_experts[il]) continue;
    std::string name = TensorName(kStacked[kGate], static_cast<int>(il));
    const GgufTensor* t = model.FindTensor(name);
    if (t == nullptr) return NotFound("missing tensor {}", name);
    if (t->shape.size() != 3) return InvalidArgument("tensor {} is not 3-D", name);
    return static_cast<uint32_t>(t->shape[2]);
  }
  return InvalidArgument("the model has no layer with experts");
}

Result<ExpertLayout> TensorMajorLayout(const GgufModel& model,
                                       const std::vector<bool>& has_experts) {
  uint32_t count = MT_TRY(StackedExpertCount(model, has_experts));
  ExpertLayout layout(FilesOf(model), count, ExpertLayout::Kind::kTensorMajor);
  for (uint32_t il = 0; il < has_experts.size(); ++il) {
    if (!has_experts[il]) {
      layout.AddEmptyLayer();
      continue;
    }
    const GgufTensor* t[3];
    for (int p = 0; p < 3; ++p) {
      std::string name = TensorName(kStacked[p], static_cast<int>(il));
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
    if (n_expert != layout.n_expert() || n_expert == 0 || n_ff == 0 ||
        n_ff > std::numeric_limits<uint32_t>::max() ||
        n_embd > std::numeric_limits<uint32_t>::max()) {
      return InvalidArgument("layer {} has {} experts of {}x{}, the first layer with experts {}",
                             il, n_expert, n_embd, n_ff, layout.n_expert());
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
    layout.AddLayer(spec, parts);
  }
  return layout;
}

// The checksum array of a pack, checked against n_layer; n_expert is its length / n_layer.
Result<const GgufArray*> PackChecksums(const GgufMetadata& md, uint32_t n_layer) {
  const GgufValue* v = md.Find(kKeyExpertChecksums);
  if (v == nullptr)
    return NotFound("an {} pack needs the key {}", kExpertMajor, kKeyExpertChecksums);
  const GgufArray* a = v->AsArray();
  if (a == nullptr || a->element_type != GgufType::kUint64) {
    return Corrupt("key {} is {}, expected an array of uint64", kKeyExpertChecksums,
                   v->ToShortString());
  }
  const uint64_t n = a->items.size();
  if (n == 0 || n % n_layer != 0 || n / n_layer > std::numeric_limits<uint32_t>::max()) {
    return Corrupt("key {} has {} checksums, expected n_layer ({}) x n_expert", kKeyExpertChecksums,
                   n, n_layer);
  }
  return a;
}

Result<ExpertLayout> PackLayout(const GgufModel& model, const std::vector<bool>& has_experts) {
  const uint32_t n_layer = static_cast<uint32_t>(has_experts.size());
  const GgufMetadata& md = model.metadata();
  const GgufValue* kind = md.Find(kKeyExpertLayout);
  const std::string* s = kind->AsString();
  if (s == nullptr || *s != kExpertMajor) {
    return Corrupt("key {} is {}; the only layout moetier knows is \"{}\"", kKeyExpertLayout,
                   kind->ToShortString(), kExpertMajor);
  }
  if (n_layer == 0) return InvalidArgument("the model has no layers");
  const GgufArray* sums = MT_TRY(PackChecksums(md, n_layer));
  const uint32_t n_expert = static_cast<uint32_t>(sums->items.size() / n_layer);
  ExpertLayout layout(FilesOf(model), n_expert, ExpertLayout::Kind::kRecords);
  if (const GgufValue* w = md.Find(kKeyExpertWeights); w != nullptr) {
    const std::string* form = w->AsString();
    if (form != nullptr && *form == kWeightsPanels) {
      layout.set_weight_layout(WeightLayout::kPanels);
    } else if (form == nullptr || *form != kWeightsRows) {
      return Corrupt("key {} is {}; moetier knows \"{}\" and \"{}\"", kKeyExpertWeights,
                     w->ToShortString(), kWeightsRows, kWeightsPanels);
    }
  }
  for (uint32_t il = 0; il < n_layer; ++il) {
    if (!has_experts[il]) {
      layout.AddEmptyLayer();
      continue;
    }
    ExpertSpec spec;
    RecordShape shape;
    std::vector<ExpertRecord> records(n_expert);
    for (uint32_t e = 0; e < n_expert; ++e) {
      const GgufTensor* t[3];
      for (int p = 0; p < 3; ++p) {
        std::string name =
            PerExpertTensorName(kStacked[p], static_cast<int>(il), static_cast<int>(e));
        t[p] = model.FindTensor(name);
        if (t[p] == nullptr) return NotFound("missing tensor {}", name);
        if (t[p]->shape.size() != 2) return Corrupt("tensor {} is not 2-D", name);
      }
      const GgufTensor& gate = *t[kGate];
      const GgufTensor& up = *t[kUp];
      const GgufTensor& down = *t[kDown];
      const uint64_t n_embd = gate.shape[0], n_ff = gate.shape[1];
      if (up.shape != gate.shape || down.shape != std::vector<uint64_t>{n_ff, n_embd} ||
          n_embd > std::numeric_limits<uint32_t>::max() ||
          n_ff > std::numeric_limits<uint32_t>::max()) {
        return Corrupt("layer {} expert {}: gate/up/down have inconsistent shapes", il, e);
      }
      if (up.shard != gate.shard || down.shard != gate.shard ||
          up.file_offset < gate.file_offset + gate.n_bytes ||
          down.file_offset < up.file_offset + up.n_bytes) {
        return Corrupt(
            "layer {} expert {}: gate, up and down are not one record in "
            "this order in one file",
            il, e);
      }
      const std::string& file = model.shards()[gate.shard].path;
      if (gate.file_offset % kPackAlignment != 0) {
        return Corrupt("{}: layer {} expert {}: record at offset {} is not {}-aligned", file, il, e,
                       gate.file_offset, kPackAlignment);
      }
      RecordShape here;
      here.part_offset = {0, up.file_offset - gate.file_offset,
                          down.file_offset - gate.file_offset};
      here.length = down.file_offset + down.n_bytes - gate.file_offset;
      if (e == 0) {
        spec.n_embd = static_cast<uint32_t>(n_embd);
        spec.n_ff = static_cast<uint32_t>(n_ff);
        spec.gate_type = gate.type;
        spec.up_type = up.type;
        spec.down_type = down.type;
        shape = here;
      } else if (n_embd != spec.n_embd || n_ff != spec.n_ff || gate.type != spec.gate_type ||
                 up.type != spec.up_type || down.type != spec.down_type) {
        return Corrupt("layer {} expert {}: shape or type differs from expert 0's", il, e);
      } else if (here.length != shape.length || here.part_offset != shape.part_offset) {
        return Corrupt("layer {} expert {}: record shape differs from expert 0's", il, e);
      }
      const uint64_t sum = *sums->items[uint64_t{il} * n_expert + e].AsUint();
      records[e] = {gate.shard, gate.file_offset, sum, gate.data};
    }
    layout.AddRecordLayer(spec, shape, std::move(records));
  }
  return layout;
}

}  // namespace

bool IsExpertMajorPack(const GgufMetadata& metadata) { return metadata.Contains(kKeyExpertLayout); }

Result<ExpertLayout> ExpertLayoutFromGguf(const GgufModel& model,
                                          const std::vector<bool>& has_experts) {
  if (IsExpertMajorPack(model.metadata())) return PackLayout(model, has_experts);
  return TensorMajorLayout(model, has_experts);
}

}  // namespace mt
