// Where the routed experts' bytes are, described without naming an architecture: the
// ExpertSpec (numerical shape) and ExpertLayout (physical extents) of an expert. Caches,
// I/O and schedulers see only these.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "kernels/matmul.h"
#include "quant/ggml_type.h"

namespace mt {

// The numerical shape of one layer's experts. Two experts with equal specs run the same
// kernels. (Types can differ between layers: q4_k_m gives some layers Q6_K ffn_down.) A
// layer without experts (DeepSeek's leading dense layers) has the empty spec: 0 bytes.
struct ExpertSpec {
  uint32_t n_embd = 0;
  uint32_t n_ff = 0;  // hidden size of one expert; 0 in a layer without experts
  GgmlType gate_type = GgmlType::kF32;
  GgmlType up_type = GgmlType::kF32;
  GgmlType down_type = GgmlType::kF32;

  uint64_t gate_bytes() const { return RowBytes(gate_type, n_embd) * n_ff; }
  uint64_t up_bytes() const { return RowBytes(up_type, n_embd) * n_ff; }
  uint64_t down_bytes() const { return RowBytes(down_type, n_ff) * n_embd; }
  uint64_t bytes() const { return gate_bytes() + up_bytes() + down_bytes(); }
};

// A run of bytes in one of the model's files.
struct ByteExtent {
  uint32_t file = 0;    // index into ExpertLayout::files()
  uint64_t offset = 0;  // absolute byte offset in that file
  uint64_t length = 0;  // bytes
};

enum ExpertPart { kGate = 0, kUp = 1, kDown = 2, kNumExpertParts = 3 };

// An expert's three weight matrices, wherever its bytes are (mapping, RAM, cache slot).
struct ExpertMatrices {
  WeightMatrix gate;  // (n_ff rows of n_embd)
  WeightMatrix up;    // (n_ff rows of n_embd)
  WeightMatrix down;  // (n_embd rows of n_ff)
};

// One part (gate, up or down) of all experts of a layer, stored expert after expert.
struct ExpertPartTensor {
  uint32_t file = 0;                // index into files()
  uint64_t offset = 0;              // absolute offset of expert 0's part
  uint64_t expert_bytes = 0;        // bytes of one expert's part (= stride)
  const uint8_t* mapped = nullptr;  // expert 0's part in the read-only file mapping
};

// An expert-major pack keeps each expert as one contiguous record: gate | up | down, each
// part at a fixed offset inside the record, zero padding between parts. All records of a
// layer have the same shape. The record is the unit of reading and of checksumming.
struct RecordShape {
  uint64_t length = 0;                    // bytes from the gate's first to the down's last
  std::array<uint64_t, 3> part_offset{};  // where gate, up, down start (gate at 0)
};

struct ExpertRecord {
  uint32_t file = 0;                // index into files()
  uint64_t offset = 0;              // absolute offset of the record's first byte
  uint64_t checksum = 0;            // RecordChecksum (experts/record_checksum.h) of its bytes
  const uint8_t* mapped = nullptr;  // the record in the read-only file mapping
};

// Where every routed expert's bytes are. Two physical layouts, one interface:
// - tensor-major (a llama.cpp GGUF): expert e's part p is slice e of the stacked part
//   tensor; the three parts are apart and there are no records;
// - expert-major (a pack): one record per expert (has_records()).
// extent(), mapped() and Matrices() work for both. Layers are the model's; a layer without
// experts has none (has_experts false): nothing may ask for its experts. Immutable once
// built; thread-safe to read.
class ExpertLayout {
 public:
  enum class Kind { kTensorMajor, kRecords };
  // The architecture adapter builds the layout (model/expert_layout_gguf.h): files, then per
  // layer in order AddLayer (tensor-major), AddRecordLayer (records) or AddEmptyLayer.
  ExpertLayout(std::vector<std::string> files, uint32_t n_expert, Kind kind)
      : n_expert_(n_expert), kind_(kind), files_(std::move(files)) {}
  void AddLayer(const ExpertSpec& spec, const std::array<ExpertPartTensor, 3>& parts);
  // `records` has n_expert() entries; each part fits its record.
  void AddRecordLayer(const ExpertSpec& spec, const RecordShape& shape,
                      std::vector<ExpertRecord> records);
  // A layer without routed experts.
  void AddEmptyLayer();

  uint32_t n_layer() const { return static_cast<uint32_t>(specs_.size()); }
  uint32_t n_expert() const { return n_expert_; }
  bool has_experts(uint32_t layer) const { return specs_[layer].n_ff != 0; }
  // Layers with experts.
  uint32_t n_expert_layers() const;
  const std::vector<std::string>& files() const { return files_; }
  const ExpertSpec& spec(uint32_t layer) const { return specs_[layer]; }
  // The extent of one part of one expert (inside its record for a pack).
  ByteExtent extent(uint32_t layer, uint32_t expert, ExpertPart part) const;
  // The largest payload of one expert over all layers (bytes; parts only, no padding).
  uint64_t max_expert_bytes() const;
  // Total payload bytes of all experts.
  uint64_t total_bytes() const;

  // Where one part of one expert is in the read-only file mapping.
  const uint8_t* mapped(uint32_t layer, uint32_t expert, ExpertPart part) const;
  // Bytes of one part of all experts of a layer (n_expert x the part's bytes). Contiguous
  // at mapped(layer, 0, part) only when !has_records().
  uint64_t part_tensor_bytes(uint32_t layer, ExpertPart part) const {
    return extent(layer, 0, part).length * n_expert_;
  }

  // Records (expert-major packs only; the accessors below require has_records()).
  bool has_records() const { return kind_ == Kind::kRecords; }
  const RecordShape& record_shape(uint32_t layer) const;
  const ExpertRecord& record(uint32_t layer, uint32_t expert) const;
  ByteExtent record_extent(uint32_t layer, uint32_t expert) const;
  // Ok when `sum` (RecordChecksum of a copy of the record) is the checksum the pack stores
  // for it; else the one-line error naming the file, layer, expert and offset.
  Status CheckRecordSum(uint32_t layer, uint32_t expert, uint64_t sum) const;
  // CheckRecordSum of the record as the mapping holds it (before a copy made from there).
  Status CheckMappedRecord(uint32_t layer, uint32_t expert) const;
  // The longest record over all layers (bytes); 0 without records.
  uint64_t max_record_bytes() const;

  // The mapped byte ranges that hold experts, for madvise and warm-up: one per stacked part
  // tensor (tensor-major) or one per record (pack), in file order within each layer.
  std::vector<std::span<const uint8_t>> MappedRanges() const;

  // How the file stores the matrices that have a 16-row panel form (HasPanelForm,
  // kernels/panel_layout.h): kRows (GGUF, the default) or kPanels (a pack written so). The
  // others are always kRows.
  WeightLayout weight_layout() const { return weight_layout_; }
  void set_weight_layout(WeightLayout layout) { weight_layout_ = layout; }

  // The matrices of an expert whose parts start at gate/up/down, in the file's layout.
  ExpertMatrices Matrices(uint32_t layer, const uint8_t* gate, const uint8_t* up,
                          const uint8_t* down) const;

 private:
  uint32_t n_expert_ = 0;
  Kind kind_;
  std::vector<std::string> files_;
  std::vector<ExpertSpec> specs_;                       // (n_layer)
  std::vector<std::array<ExpertPartTensor, 3>> parts_;  // (n_layer) tensor-major only
  std::vector<RecordShape> record_shapes_;              // (n_layer) packs only
  // (n_layer, n_expert) packs only; a layer without experts has none
  std::vector<std::vector<ExpertRecord>> records_;
  WeightLayout weight_layout_ = WeightLayout::kRows;
};

}  // namespace mt
