// A loaded MoE model: hyperparameters, architecture, tokenizer and views of every weight
// in the file's mapping. Immutable after Load and safe to share between contexts/threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/status.h"
#include "experts/expert_layout.h"
#include "gguf/gguf.h"
#include "kernels/matmul.h"
#include "model/arch.h"
#include "model/hparams.h"
#include "quant/ggml_type.h"
#include "tokenizer/tokenizer.h"

namespace mt {

// The dense weights of one layer. Which fields are set follows the layer's parts
// (model/layer_parts.h); the others stay empty. Dims: L = kv_lora_rank, Q = q_lora_rank,
// R = n_rot, N = head_dim_nope, V = MLA head_dim_v, F = n_ff (dense) or shared width.
struct LayerWeights {
  std::vector<float> attn_norm;  // (n_embd)
  // GQA; wq also serves MLA without q LoRA: (n_head*(N+R) rows of n_embd).
  WeightMatrix wq;                 // (n_head*head_dim_k rows of n_embd; 2x with an output gate)
  WeightMatrix wk;                 // (n_head_kv*head_dim_k rows of n_embd)
  WeightMatrix wv;                 // (n_head_kv*head_dim_v rows of n_embd)
  WeightMatrix wo;                 // (n_embd rows of n_head*head_dim_v) (MLA: n_head*V)
  std::vector<float> bq, bk, bv;   // (rows of wq/wk/wv) or empty
  std::vector<float> bo;           // (n_embd) attn_output.bias, or empty
  std::vector<float> attn_sinks;   // (n_head) each head's sink logit, or empty
  std::vector<float> attn_q_norm;  // (head_dim_k) per-head or (n_embd_q) whole, or empty
  std::vector<float> attn_k_norm;  // (head_dim_k) or (n_embd_k_gqa), or empty
  // MLA
  WeightMatrix wq_a;             // (Q rows of n_embd)  attn_q_a
  std::vector<float> q_a_norm;   // (Q)
  WeightMatrix wq_b;             // (n_head*(N+R) rows of Q)
  WeightMatrix wkv_a;            // (L+R rows of n_embd)  attn_kv_a_mqa
  std::vector<float> kv_a_norm;  // (L)
  WeightMatrix wk_b;             // (n_head*L rows of N): head h is rows [h*L, (h+1)*L)
  WeightMatrix wv_b;             // (n_head*V rows of L): head h is rows [h*V, (h+1)*V)
  // Gated DeltaNet: K key dim, V value dim, C = 2K + V conv channels, H value heads, S a
  // head's size, d the convolution's window (model/layer_parts.h DeltaNetParts).
  WeightMatrix wqkv;              // (C rows of n_embd) attn_qkv: [q | k | v]
  WeightMatrix wqkv_gate;         // (V rows of n_embd) attn_gate: z
  std::vector<float> ssm_conv1d;  // (C, d) per channel its window's weights, oldest first
  std::vector<float> ssm_dt;      // (H)
  std::vector<float> ssm_a;       // (H) -exp(A_log)
  WeightMatrix ssm_ba;            // (2H rows of n_embd) b and a by key head, or empty
  WeightMatrix ssm_beta;          // (H rows of n_embd) or empty
  WeightMatrix ssm_alpha;         // (H rows of n_embd) or empty
  std::vector<float> ssm_norm;    // (S)
  WeightMatrix ssm_out;           // (n_embd rows of V)
  std::vector<float> ffn_norm;    // (n_embd)
  // Dense FFN
  WeightMatrix ffn_gate, ffn_up;  // (n_ff rows of n_embd)
  WeightMatrix ffn_down;          // (n_embd rows of n_ff)
  // Routed experts (the experts themselves are in the ExpertStore) and shared experts
  std::vector<float> router;          // (n_expert, n_embd) ffn_gate_inp, row-major
  std::vector<float> router_b;        // (n_expert) added to the router's logits, or empty
  std::vector<float> exp_probs_b;     // (n_expert) selection bias, or empty
  std::vector<float> gate_exps_b;     // (n_expert, n_ff_exp) per-expert biases, or empty
  std::vector<float> up_exps_b;       // (n_expert, n_ff_exp)
  std::vector<float> down_exps_b;     // (n_expert, n_embd)
  std::vector<float> shexp_gate_inp;  // (n_embd) or empty
  WeightMatrix shexp_gate, shexp_up;  // (F rows of n_embd)
  WeightMatrix shexp_down;            // (n_embd rows of F)

  // Every matrix field, set or not (for copying and counting).
  std::vector<WeightMatrix*> matrices();
  std::vector<const WeightMatrix*> matrices() const;
  // Every float vector field.
  std::vector<const std::vector<float>*> vectors() const;
};

class Model;

struct LoadOptions {
  bool require_tokenizer = true;  // refuse a file without tokenizer.ggml.* keys
  // The dense matrices a device will compute with (--device: DeviceOwnedMatrices in
  // engine/device_matrices.h). They stay in the file's mapping, for the device to upload
  // from, instead of being copied into RAM the host would never read again. Should the CPU
  // compute with one after all (a part the device refuses), it reads the mapping: the same
  // numbers, through the page cache. Unset: every dense matrix is copied.
  std::function<std::vector<const WeightMatrix*>(const Model&)> left_to_device;
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
  // What the forward pass runs, layer by layer.
  const ModelParts& parts() const { return parts_; }
  const GgufModel& gguf() const { return gguf_; }
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }  // null if absent

  const WeightMatrix& token_embd() const { return token_embd_; }  // (n_vocab rows of n_embd)
  const std::vector<float>& output_norm() const { return output_norm_; }  // (n_embd)
  const WeightMatrix& output() const { return output_; }  // (n_vocab rows of n_embd)
  const LayerWeights& layer(int il) const { return layers_[il]; }
  const ExpertLayout& expert_layout() const { return *expert_layout_; }
  // Bytes of the resident dense weights (everything but routed experts).
  uint64_t dense_bytes() const { return dense_bytes_; }
  // Bytes of the dense matrices left in the mapping for a device (LoadOptions::left_to_device).
  uint64_t left_to_device_bytes() const { return left_to_device_bytes_; }
  // Hands back the pages of the file's tensors the host reads from copies (every one but the
  // routed experts' and those left to a device; GgufModel::ReleasePages), so that the process
  // does not hold them twice. Done at load, and again by a Context once its store has read the
  // experts (reading a neighbour maps some back: the kernel maps the cached pages around a
  // fault).
  void ReleaseCopiedPages() const;

 private:
  Model(std::string path, GgufModel gguf);
  Status BindTensors();
  // Legacy MLA files: attn_kv_b split into k_b (transposed, f32) and v_b.
  Status SplitKvB(int il, const GgufTensor& kv_b);
  Status CopyDenseWeights(const std::vector<const WeightMatrix*>& left_to_device);

  std::string path_;
  GgufModel gguf_;
  HParams hp_;
  ModelParts parts_;
  std::unique_ptr<Tokenizer> tokenizer_;
  WeightMatrix token_embd_;
  std::vector<float> output_norm_;
  WeightMatrix output_;
  std::vector<LayerWeights> layers_;  // (n_layer)
  std::unique_ptr<ExpertLayout> expert_layout_;
  std::vector<AlignedBuffer> dense_copies_;  // owned bytes of the dense matrices
  std::vector<AlignedBuffer> split_;         // SplitKvB's matrices until they are copied
  uint64_t dense_bytes_ = 0;
  uint64_t left_to_device_bytes_ = 0;
  std::vector<std::span<const uint8_t>> copied_from_;  // the mapped tensors read from copies
};

}  // namespace mt
