// Attention on the device (--device vulkan, issue 42): GQA (GpuGqaAttention), DeepSeek's
// MLA (GpuMlaAttention, engine/gpu_attention_mla.cc) and gated DeltaNet
// (GpuDeltaNetAttention, engine/gpu_attention_deltanet.cc).
//
// Grouped-query attention: the block of
// engine/attention_block.h with its weights and KV cache in device memory. Per layer the
// normed input goes to the device once and the block's output comes back once; in between,
// one submission runs the q/k/v products, biases, q/k norms, RoPE, the cache stores, causal
// attention (sinks, sliding windows), an output gate (qwen3next: attn_q's rows per head
// [q | gate], the heads' outputs times sigmoid(gate)) and the output product
// (gpu/attention_ops.h, gpu/matmul.h). The cache is (n_seq, n_head_kv, n_ctx, head_dim) per layer,
// f16, f32 or q8_0: a sliding layer keeps every position (no ring), so any prefix can be reused.
//
// The device sums in an order of its own and multiplies f32 activations (the CPU: q8_K ones
// for K-quant weights), so the output agrees with GqaAttention's within rounding; for a given
// device, a token's result does not depend on the batch around it.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/attention_block.h"
#include "engine/gpu_backend.h"
#include "engine/recurrent_states.h"

namespace mt {

// What the device's attention blocks share: no host scratch or cache, the device memory they
// report, and the staging of a layer's run: the normed input, the tokens' (seq, pos) and their
// rotations go up through host-visible buffers, and the output comes back through one.
class GpuAttentionBlock : public AttentionBlock {
 public:
  void SizeScratch(ScratchSizer& /*sizer*/) override {}  // all of it on the device
  uint64_t kv_bytes() const override { return 0; }       // the host's: none

  // Device memory: the weights, the caches (once allocated, or as they will be), the rows.
  uint64_t weight_bytes() const { return weight_bytes_; }
  uint64_t cache_bytes() const { return cache_bytes_; }
  uint64_t scratch_bytes() const { return scratch_bytes_; }
  int n_layers() const { return n_layers_; }

 protected:
  GpuAttentionBlock(const Model& model, GpuBackend& gpu, const AttentionShape& shape)
      : model_(model), hp_(model.hparams()), gpu_(gpu), shape_(shape) {}
  // kUnimplemented when a layer's cache of `bytes` (`what`: "KV cache", "latent cache") is
  // more than the device binds at once: the shaders would not reach the last sequences.
  static Status CheckCacheBinding(const gpu::Device& device, uint64_t bytes, std::string_view what);
  // The staging buffers, for batches of shape_.n_batch (counted in scratch_bytes_).
  Status CreateStaging();
  // A run's inputs into the staging buffers: xn (n, n_embd), rope_cs (n, n_rot).
  void Stage(std::span<const BatchToken> batch, const float* xn, const float* rope_cs);
  // out (n, n_embd) = what the run copied into out_.
  void Unstage(int64_t n, float* out) const;

  const Model& model_;
  const HParams& hp_;
  GpuBackend& gpu_;
  const AttentionShape shape_;
  gpu::Buffer in_;       // host-visible (n_batch, n_embd) the normed input
  gpu::Buffer out_;      // host-visible (n_batch, n_embd) the block's output
  gpu::Buffer tokens_;   // host-visible (n_batch, 2) uint32 each token's seq and pos
  gpu::Buffer cos_sin_;  // host-visible (n_batch, n_rot) each token's rotation (RopeAngles)
  int n_layers_ = 0;
  uint64_t weight_bytes_ = 0;
  uint64_t cache_bytes_ = 0;
  uint64_t scratch_bytes_ = 0;
};

class GpuGqaAttention final : public GpuAttentionBlock {
 public:
  // Why the model's GQA layers cannot run on the device (a weight type without a shader, a
  // q8_0 cache of heads not whole blocks, head dims the shaders do not take, an output gate
  // over K and V of two widths), or "" when they can (engine/device_matrices.cc asks before
  // the model loads; Create refuses with it).
  static std::string Unsupported(const Model& model, KvTypes kv_types);

  // Uploads the GQA layers' weights; kUnimplemented, in one line, where Unsupported says so or
  // a layer's cache is larger than the device binds at once.
  static Result<std::unique_ptr<GpuGqaAttention>> Create(const Model& model, GpuBackend& gpu,
                                                         const AttentionShape& shape);
  ~GpuGqaAttention() override;

  Status AllocateKv(bool populate) override;
  Status Run(int il, std::span<const BatchToken> batch, const float* xn, const float* rope_cs,
             float* out) override;

 private:
  struct Impl;
  GpuGqaAttention(const Model& model, GpuBackend& gpu, const AttentionShape& shape);

  std::unique_ptr<Impl> impl_;
};

// DeepSeek's multi-head latent attention on the device, in MlaAttention's absorbed form
// (engine/attention_block.h): the weights of every MLA layer and a latent cache
// (n_seq, n_ctx, L + R) per layer (f16, f32 or q8_0, K's type) in device memory. Per layer the
// normed input goes up once and the output comes back once; one submission runs the q projection
// (directly, or through the q LoRA and its norm), the compressed KV and its norm, RoPE of q_pe
// and k_pe, the cache store, the absorbed queries [k_b_h^T q_nope_h | q_pe_h] (the heads'
// slices of attn_k_b in one head-batched product), attention over the latent rows (K the
// whole row, V its first L values: one copy of the cache), each head's v_b_h times its latent
// sum (head-batched again) and the output product. Agrees with MlaAttention within rounding;
// for a given device, a token's result does not depend on the batch around it.
class GpuMlaAttention final : public GpuAttentionBlock {
 public:
  // Why the model's MLA layers cannot run on the device (a weight type without a shader, a
  // q8_0 cache of rows not whole blocks, dims the attention shader does not take), or "" when
  // they can (as GQA's).
  static std::string Unsupported(const Model& model, KvTypes kv_types);

  // Uploads the MLA layers' weights; kUnimplemented, in one line, where Unsupported says so or
  // a layer's cache is larger than the device binds at once.
  static Result<std::unique_ptr<GpuMlaAttention>> Create(const Model& model, GpuBackend& gpu,
                                                         const AttentionShape& shape);
  ~GpuMlaAttention() override;

  Status AllocateKv(bool populate) override;
  Status Run(int il, std::span<const BatchToken> batch, const float* xn, const float* rope_cs,
             float* out) override;

 private:
  struct Impl;
  GpuMlaAttention(const Model& model, GpuBackend& gpu, const AttentionShape& shape);

  std::unique_ptr<Impl> impl_;
};

// Gated DeltaNet on the device (DeltaNetAttention's math, engine/attention_deltanet.cc): the
// weights of every DeltaNet layer and the recurrent states in device memory, per layer
// (n_seq, 3 copies, [conv window (C, d_conv - 1) | heads (H_v, S, S)]) in f32, the copies
// chosen as the CPU's (engine/recurrent_states.h: the live one, the next, a checkpoint before
// a prompt's last token). Per layer the normed input goes up once and the output comes back
// once; one submission runs the qkv, gate and b/a products, the causal convolution with SiLU,
// the delta rule of each sequence's tokens in order per value head (gates, l2 norms, the
// gated output norm; gpu/deltanet_ops.h) and the output product. Agrees with
// DeltaNetAttention within rounding; for a given device, a token's result does not depend on
// the batch around it.
class GpuDeltaNetAttention final : public GpuAttentionBlock {
 public:
  // Why the model's DeltaNet layers cannot run on the device (a weight type without a shader,
  // heads or a convolution wider than the shaders take), or "" when they can.
  static std::string Unsupported(const Model& model);

  // Uploads the DeltaNet layers' weights (kUnimplemented where Unsupported says so, or for a
  // layer's states larger than the device binds at once).
  static Result<std::unique_ptr<GpuDeltaNetAttention>> Create(const Model& model, GpuBackend& gpu,
                                                              const AttentionShape& shape);
  ~GpuDeltaNetAttention() override;

  Status AllocateKv(bool populate) override;
  Status Run(int il, std::span<const BatchToken> batch, const float* xn, const float* rope_cs,
             float* out) override;
  uint32_t ReusablePrefix(uint32_t seq, uint32_t n) const override {
    return states_.ReusablePrefix(seq, n);
  }
  Status BeginDecode(std::span<const BatchToken> batch) override {
    return states_.BeginDecode(batch);
  }
  void EndDecode(bool committed) override { states_.EndDecode(committed); }

 private:
  struct Impl;
  GpuDeltaNetAttention(const Model& model, GpuBackend& gpu, const AttentionShape& shape);

  std::unique_ptr<Impl> impl_;
  RecurrentStates states_;  // which copy each sequence reads and writes
};

}  // namespace mt
