// A loaded MoE model: hyperparameters, architecture, tokenizer and views of every weight
// in the file's mapping. Immutable after Load and safe to share between contexts/threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/aligned_buffer.h"
#include "experts/expert_layout.h"
#include "gguf/gguf.h"
#include "kernels/matmul.h"
#include "model/arch.h"
#include "model/hparams.h"
#include "quant/ggml_type.h"
#include "tokenizer/tokenizer.h"

namespace mt {


struct LayerWeights {
  std::vector<float> attn_norm;       // (n_embd)
  WeightMatrix wq;                    // (n_head*head_dim_k rows of n_embd)
  WeightMatrix wk;                    // (n_head_kv*head_dim_k rows of n_embd)
  WeightMatrix wv;                    // (n_head_kv*head_dim_v rows of n_embd)
  WeightMatrix wo;                    // (n_embd rows of n_head*head_dim_v)
  std::vector<float> bq, bk, bv;      // (rows of wq/wk/wv) or empty
  std::vector<float> attn_q_norm;     // (head_dim_k) per-head or (n_embd_q) whole, or empty
  std::vector<float> attn_k_norm;     // (head_dim_k) or (n_embd_k_gqa), or empty
  std::vector<float> ffn_norm;        // (n_embd)
  std::vector<float> router;          // (n_expert, n_embd) ffn_gate_inp, row-major
  std::vector<float> shexp_gate_inp;  // (n_embd) or empty
  WeightMatrix shexp_gate, shexp_up;  // (n_ff_shexp rows of n_embd)
  WeightMatrix shexp_down;            // (n_embd rows of n_ff_shexp)
};

struct LoadOptions {
  bool require_tokenizer = true;  // refuse a file without tokenizer.ggml.* keys
};

// Routed experts are not part of the Model's weights: they are reached through an
// ExpertStore (src/experts/) built from expert_layout(), so the same forward pass runs
// whatever tier serves them.

class Model {
 public:
  // Opens the GGUF (or split set), checks the architecture, every tensor's presence,
  // shape and type against the architecture's table, and builds the tokenizer. The dense
  // weights are copied into anonymous memory (resident whatever the expert tier: the page
  // cache may drop mapped pages under memory pressure); the routed experts stay in the
  // read-only mapping and are described by expert_layout().
  // Errors are one line naming the file and the tensor or key.
  static Result<std::unique_ptr<Model>> Load(const std::string& path, const LoadOptions& options);

  ~Model();

  const std::string& path() const { return path_; }
  const HParams& hparams() const { return hp_; }
  const ArchDef& arch() const { return *arch_; }
  const GgufModel& gguf() const { return gguf_; }
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }  // null if absent

  const WeightMatrix& token_embd() const { return token_embd_; }  // (n_vocab rows of n_embd)
  const std::vector<float>& output_norm() const { return output_norm_; }  // (n_embd)
  const WeightMatrix& output() const { return output_; }  // (n_vocab rows of n_embd)
  const LayerWeights& layer(int il) const { return layers_[il]; }
  const ExpertLayout& expert_layout() const { return *expert_layout_; }
  // Bytes of the resident dense weights (everything but routed experts).
  uint64_t dense_bytes() const { return dense_bytes_; }

 private:
  Model(std::string path, GgufModel gguf);
  Status CopyDenseWeights();

  std::string path_;
  GgufModel gguf_;
  HParams hp_;
  const ArchDef* arch_ = nullptr;
  std::unique_ptr<Tokenizer> tokenizer_;
  WeightMatrix token_embd_;
  std::vector<float> output_norm_;
  WeightMatrix output_;
  std::vector<LayerWeights> layers_;  // (n_layer)
  std::unique_ptr<ExpertLayout> expert_layout_;
  std::vector<AlignedBuffer> dense_copies_;  // owned bytes of the dense matrices
  uint64_t dense_bytes_ = 0;
};

}  // namespace mt
