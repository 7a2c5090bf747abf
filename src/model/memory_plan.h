// How a model's bytes divide between the dense part (always resident) and the routed
// experts (tiered), and how many bytes one decoded token touches. Computed from the tensor
// table alone, so it works for any GGUF with stacked ffn_*_exps tensors, and for
// expert-major packs (per-expert blk.N.ffn_*.E tensors).
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"

namespace mt {

class GgufModel;

struct LayerMemory {
  uint64_t dense_bytes = 0;       // attention, norms, router, shared experts
  uint64_t expert_bytes = 0;      // all routed experts of the layer
  uint32_t n_expert = 0;          // experts in the layer (stacked, or per-expert tensors)
  uint64_t bytes_per_expert = 0;  // gate + up + down of one expert
};

struct MemoryPlan {
  uint64_t total_bytes = 0;         // all tensor data the model uses (not unused_bytes)
  uint64_t dense_bytes = 0;         // everything but routed experts
  uint64_t expert_bytes = 0;        // routed experts
  uint64_t global_dense_bytes = 0;  // dense tensors outside blk.N (embeddings, head, norm)
  std::vector<LayerMemory> layers;  // (n_layer) indexed by layer
  uint32_t n_expert_used = 0;       // top-k, 0 if the metadata does not say
  // Tensors of the layers past the trunk (NextN/MTP layers, {arch}.nextn_predict_layers):
  // never loaded, streamed or counted above.
  uint64_t unused_bytes = 0;
  // Bytes read to decode one token: every dense tensor except the token embedding (one
  // row of it, unless the head is tied to it), plus top-k experts in every layer.
  uint64_t dense_bytes_per_token = 0;
  uint64_t expert_bytes_per_token = 0;

  uint64_t bytes_per_token() const { return dense_bytes_per_token + expert_bytes_per_token; }
};

// Fails (naming the tensor) only if a routed-expert tensor is not 3-D.
Result<MemoryPlan> ComputeMemoryPlan(const GgufModel& model);

}  // namespace mt
