// A loaded MoE model: hyperparameters, architecture, tokenizer and views of every weight
// in the file's mapping. Immutable after Load and safe to share between contexts/threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/gguf.h"
#include "kernels/matmul.h"
#include "model/arch.h"
#include "model/hparams.h"
#include "quant/ggml_type.h"
#include "tokenizer/tokenizer.h"

namespace mt {


// The routed experts of one layer: three stacked tensors, expert e at index e.
struct ExpertWeights {
  const GgufTensor* gate = nullptr;  // (n_embd, n_ff_exp, n_expert)
  const GgufTensor* up = nullptr;    // (n_embd, n_ff_exp, n_expert)
  const GgufTensor* down = nullptr;  // (n_ff_exp, n_embd, n_expert)

  WeightMatrix Gate(int e) const;  // (n_ff_exp rows of n_embd)
  WeightMatrix Up(int e) const;    // (n_ff_exp rows of n_embd)
  WeightMatrix Down(int e) const;  // (n_embd rows of n_ff_exp)
};

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
  ExpertWeights experts;
  std::vector<float> shexp_gate_inp;  // (n_embd) or empty
  WeightMatrix shexp_gate, shexp_up;  // (n_ff_shexp rows of n_embd)
  WeightMatrix shexp_down;            // (n_embd rows of n_ff_shexp)
};

struct LoadOptions {
  bool require_tokenizer = true;  // refuse a file without tokenizer.ggml.* keys
};

class Model {
 public:
  // Opens the GGUF (or split set), checks the architecture, every tensor's presence,
  // shape and type against the architecture's table, and builds the tokenizer. Small
  // f32 vectors (norms, routers, biases) are copied; matrices stay in the mapping.
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

 private:
  Model(std::string path, GgufModel gguf);

  std::string path_;
  GgufModel gguf_;
  HParams hp_;
  const ArchDef* arch_ = nullptr;
  std::unique_ptr<Tokenizer> tokenizer_;
  WeightMatrix token_embd_;
  std::vector<float> output_norm_;
  WeightMatrix output_;
  std::vector<LayerWeights> layers_;  // (n_layer)
};

}  // namespace mt
