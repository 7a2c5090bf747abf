// Where the routed experts' bytes are, described without naming an architecture: the
// ExpertSpec (numerical shape) and ExpertLayout (physical extents) of DESIGN.md. Caches,
// I/O and schedulers see only these.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "kernels/matmul.h"
#include "quant/ggml_type.h"

namespace mt {

// The numerical shape of one layer's experts. Two experts with equal specs run the same
// kernels. (Types can differ between layers: q4_k_m gives some layers Q6_K ffn_down.)
struct ExpertSpec {
  uint32_t n_embd = 0;
  uint32_t n_ff = 0;  // hidden size of one expert
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

class ExpertLayout {
 public:
  // The architecture adapter builds the layout (model/expert_layout_gguf.h): files, then one
  // AddLayer per layer in order.
  ExpertLayout(std::vector<std::string> files, uint32_t n_expert)
      : n_expert_(n_expert), files_(std::move(files)) {}
  void AddLayer(const ExpertSpec& spec, const std::array<ExpertPartTensor, 3>& parts) {
    specs_.push_back(spec);
    parts_.push_back(parts);
  }

  uint32_t n_layer() const { return static_cast<uint32_t>(specs_.size()); }
  uint32_t n_expert() const { return n_expert_; }
  const std::vector<std::string>& files() const { return files_; }
  const ExpertSpec& spec(uint32_t layer) const { return specs_[layer]; }
  // The extent of one part of one expert.
  ByteExtent extent(uint32_t layer, uint32_t expert, ExpertPart part) const;
  // The largest payload of one expert over all layers (bytes).
  uint64_t max_expert_bytes() const;
  // Total bytes of all experts.
  uint64_t total_bytes() const;

  // Where one part of one expert is in the read-only file mapping.
  const uint8_t* mapped(uint32_t layer, uint32_t expert, ExpertPart part) const {
    const ExpertPartTensor& pt = parts_[layer][part];
    return pt.mapped + uint64_t{expert} * pt.expert_bytes;
  }
  // Bytes of one part of all experts of a layer (the stacked tensor's size).
  uint64_t part_tensor_bytes(uint32_t layer, ExpertPart part) const {
    return parts_[layer][part].expert_bytes * n_expert_;
  }

  // The matrices of an expert whose parts start at gate/up/down.
  ExpertMatrices Matrices(uint32_t layer, const uint8_t* gate, const uint8_t* up,
                          const uint8_t* down) const;

 private:
  uint32_t n_expert_ = 0;
  std::vector<std::string> files_;
  std::vector<ExpertSpec> specs_;                   // (n_layer)
  std::vector<std::array<ExpertPartTensor, 3>> parts_;  // (n_layer) gate, up, down
};

}  // namespace mt
