// The attention blocks of the forward pass, one class per attention kind
// (model/layer_parts.h): each owns the KV cache of the layers of its kind and the scratch it
// needs, and turns a layer's normed input into the block's output. Context makes one block
// per kind its layers use (MakeAttentionBlock) and runs each layer's. Not thread-safe (one
// Context's), bit-identical for any thread count and batch composition.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "engine/context.h"
#include "engine/model.h"
#include "engine/projection.h"
#include "engine/recurrent_states.h"
#include "engine/scratch.h"
#include "kernels/attention.h"

namespace mt {

// What every attention block shares: the context's shape.
struct AttentionShape {
  uint32_t n_ctx = 0;    // positions per sequence
  uint32_t n_seq = 0;    // sequences with their own cache
  uint32_t n_batch = 0;  // most tokens per forward pass
  KvTypes kv_types;      // the cache's element types
};

// The KV cache bytes of one position of one sequence in layer il (either kind).
uint64_t KvBytesPerPosition(const Model& model, int il, KvTypes kv_types);
// ... summed over the layers.
uint64_t KvBytesPerPosition(const Model& model, KvTypes kv_types);

class AttentionBlock {
 public:
  virtual ~AttentionBlock() = default;
  // Counts (the memory plan) or allocates the scratch.
  virtual void SizeScratch(ScratchSizer& sizer) = 0;
  // The bytes AllocateKv takes: the caches of the layers of this block's kind.
  virtual uint64_t kv_bytes() const = 0;
  // Allocates those caches (pages touched as positions fill, or at once with `populate`).
  virtual Status AllocateKv(bool populate) = 0;
  // out (n, n_embd) = layer il's attention of xn (n, n_embd; normed), storing the batch's
  // positions in the cache. rope_cs: (n, n_rot) each token's angles (RopeAngles). out may
  // be xn. The layer must be of this block's kind. Errors: a device's (engine/gpu_attention.h).
  virtual Status Run(int il, std::span<const BatchToken> batch, const float* xn,
                     const float* rope_cs, float* out) = 0;
  // The longest prefix m <= n of sequence `seq`'s cached positions it can go on from (at
  // position m) after being truncated: n, or 0 where a sliding layer's ring (GqaAttention) no
  // longer holds the window before n, or where a recurrent state was saved (DeltaNetAttention).
  virtual uint32_t ReusablePrefix(uint32_t /*seq*/, uint32_t n) const { return n; }
  // Before a Decode's first Run: checks that the block can take `batch` (all of it, before
  // it is split into forward passes). After its last: `committed` says whether every pass
  // succeeded. Blocks whose state outlives a batch keep it as before when it did not.
  virtual Status BeginDecode(std::span<const BatchToken> /*batch*/) { return Status::Ok(); }
  virtual void EndDecode(bool /*committed*/) {}
};

// The block of `kind` for `model`'s layers of that kind.
std::unique_ptr<AttentionBlock> MakeAttentionBlock(AttentionKind kind, const Model& model,
                                                   ThreadPool& pool, const AttentionShape& shape);

// Grouped-query attention: q/k/v projections (+ biases, q/k norm, RoPE), a K and a V cache per
// kv head, (n_seq, n_head_kv, cells, head_dim) per layer so one head's positions are
// contiguous, causal attention of each query head over its group's kv head (+ its sink).
// A layer with a sliding window W whose context is long keeps a ring instead of n_ctx cells:
// R = W + n_batch cells, position p in cell p % R and again in p % R + R, so any window of
// W <= R positions is one contiguous run of 2R cells in position order (the attention
// kernels' tiles and the bits are those of a full cache). R covers a batch's positions
// beyond the window: a batch's stores never overwrite a cell one of its tokens still reads.
class GqaAttention final : public AttentionBlock {
 public:
  GqaAttention(const Model& model, ThreadPool& pool, const AttentionShape& shape);

  void SizeScratch(ScratchSizer& sizer) override;
  uint64_t kv_bytes() const override;
  Status AllocateKv(bool populate) override;
  Status Run(int il, std::span<const BatchToken> batch, const float* xn, const float* rope_cs,
             float* out) override;
  uint32_t ReusablePrefix(uint32_t seq, uint32_t n) const override;

 private:
  static constexpr uint32_t kNoPosition = UINT32_MAX;
  // The cell of position pos in layer il's cache (the first of two for a ring).
  uint32_t Cell(int il, uint32_t pos) const { return Ringed(il) ? pos % ring_ : pos; }
  // Whether layer il's cache is a ring (only a ring holds fewer cells than n_ctx).
  bool Ringed(int il) const { return cells_[il] != shape_.n_ctx; }
  // Query heads per AttendTokens call, and tokens per run: up to 16 queries take each K/V
  // tile through L1/L2 together (AVX2: pp512 at 2048 positions 1.4-1.9x faster than one
  // query's pass over its head's cache at a time); longer runs would unbalance the threads.
  int attend_heads() const;
  // The q, k, v rows of the batch made ready for attention (bias, q/k norm, rotation), and k
  // and v stored into the cache; tokens' q and k/v in parallel (each item is independent).
  void Prepare(int il, std::span<const BatchToken> batch, const float* rope_cs);
  // Stores one token's projection (n_head_kv heads of head_dim) into a layer's K or V cache.
  void StoreHeads(int il, const float* row, uint32_t head_dim, KvElemType type, uint8_t* cache,
                  const BatchToken& token) const;
  // Splits the batch into Attend's runs (run_start_, n_runs_).
  void FindRuns(std::span<const BatchToken> batch);
  void Attend(int il, std::span<const BatchToken> batch);

  const Model& model_;
  const HParams& hp_;
  ThreadPool& pool_;
  const AttentionShape shape_;
  const int attend_tokens_;

  std::vector<float> q_;  // (n_batch, n_head * head_dim_k)
  // With an output gate (GqaParts::output_gate): attn_q's rows per head [q | gate], and the
  // gates apart; both empty otherwise.
  std::vector<float> qg_;    // (n_batch, 2 * n_head * head_dim_k)
  std::vector<float> gate_;  // (n_batch, n_head * head_dim_k)
  bool gated_ = false;       // some GQA layer has an output gate
  std::vector<float> k_;     // (n_batch, n_head_kv * head_dim_k)
  std::vector<float> v_;     // (n_batch, n_head_kv * head_dim_v)
  std::vector<float> attn_;  // (n_batch, n_head * head_dim_v) attention output per head
  // (n_threads, attend_heads(), attend_tokens_, kAttendTile) a tile's scores per query
  std::vector<float> scores_;
  std::vector<int> run_start_;  // (n_batch + 1) first token of each run of Attend, then n
  int n_runs_ = 0;
  std::vector<int> token_runs_;     // (n_batch + 1) 0, 1, ..., n_batch: a run per token
  QuantizedInput in_;               // the block's input (xn, then attn_)
  std::vector<uint32_t> cells_;     // (n_layer) KV cells per sequence and kv head: n_ctx or 2 ring_
  uint32_t window_ = 0;             // the widest sliding window of the model's GQA layers
  uint32_t ring_ = 0;               // R = window_ + n_batch where rings save memory, else 0
  int first_ring_layer_ = -1;       // -1: no ring
  std::vector<uint32_t> ring_pos_;  // (n_seq, R) the position ring cell c holds, or kNoPosition
  // KV cache per layer (empty for other kinds' layers): (n_seq, n_head_kv, cells, head_dim),
  // f16, f32 or q8_0 (KvTypes). One head's positions are contiguous, so attention's prefetch
  // streams them (with position-major rows a head's next position was a page away: 1.6x
  // slower at 128 positions, 2.8x at 512).
  std::vector<AlignedBuffer> k_cache_, v_cache_;  // (n_layer)
};

// DeepSeek's multi-head latent attention in the absorbed form. Per position and layer the
// cache holds one row [c | k_pe] (kv_lora_rank + n_rot values, K's type): c the normed latent,
// k_pe the rotated shared key part. A head's query becomes [k_b_h^T q_nope_h | q_pe_h], the
// head attends over the rows (V = their first kv_lora_rank values, c), and its output is
// v_b_h times that latent sum: the same numbers as decompressing per-head K and V, without
// ever storing them.
class MlaAttention final : public AttentionBlock {
 public:
  MlaAttention(const Model& model, ThreadPool& pool, const AttentionShape& shape);

  void SizeScratch(ScratchSizer& sizer) override;
  uint64_t kv_bytes() const override;
  Status AllocateKv(bool populate) override;
  Status Run(int il, std::span<const BatchToken> batch, const float* xn, const float* rope_cs,
             float* out) override;

 private:
  // The projections of one head for every token: out rows [h*rows, (h+1)*rows) of w applied
  // to each token's `cols` inputs at in + t * in_stride, written at y + t * y_stride (the
  // head's first output at y). On the calling thread, with its own QuantizedInput.
  void HeadProduct(const WeightMatrix& w, int h, int64_t rows, const float* in, int64_t in_stride,
                   int64_t cols, int n, float* y, int64_t y_stride, QuantizedInput& acts);
  void FindRuns(std::span<const BatchToken> batch);

  const Model& model_;
  const HParams& hp_;
  ThreadPool& pool_;
  const AttentionShape shape_;
  const MlaParts mla_;  // every MLA layer's (one model has one shape)
  // Sizes: L latent, R rope dims, N nope dims, V value dims, H heads, Q q LoRA rank.
  const int64_t L_, R_, N_, V_, H_, Q_;

  std::vector<float> qa_;       // (n_batch, Q) q LoRA down-projection, then normed
  std::vector<float> q_;        // (n_batch, H, N + R) the heads' [q_nope | q_pe]
  std::vector<float> kva_;      // (n_batch, L + R) [c | k_pe], normed and rotated in place
  std::vector<float> q_abs_;    // (n_batch, H, L + R) absorbed queries [k_b^T q_nope | q_pe]
  std::vector<float> latent_;   // (n_batch, H, L) each head's attention over the rows' c
  std::vector<float> attn_;     // (n_batch, H, V) each head's output after v_b
  std::vector<float> scores_;   // (n_threads, heads per call, tokens per run, kAttendTile)
  std::vector<int> run_start_;  // (n_batch + 1)
  int n_runs_ = 0;
  QuantizedInput in_;                    // the block's input (xn, then attn_)
  QuantizedInput in_qa_;                 // the normed q LoRA
  std::vector<QuantizedInput> head_in_;  // (n_threads) per-head inputs of k_b and v_b
  // (n_layer) per MLA layer (n_seq, n_ctx, L + R), K's type; empty for other layers
  std::vector<AlignedBuffer> cache_;
};

// Gated DeltaNet (model/layer_parts.h DeltaNetParts): per layer and sequence a recurrent state,
// the convolution's last d_conv - 1 inputs and each value head's matrix, instead of a cache
// that grows with the positions. Tokens of a sequence run one after the other, as decode runs
// them (so a prompt gives the bits its tokens give one at a time: batch invariance).
//
// Each sequence has three copies of its state per layer (engine/recurrent_states.h: two live
// ones that alternate and a checkpoint before a prompt's last token); a sequence may resume
// only where a state was saved (the live one, the checkpoint, or position 0); BeginDecode
// refuses any other position.
class DeltaNetAttention final : public AttentionBlock {
 public:
  DeltaNetAttention(const Model& model, ThreadPool& pool, const AttentionShape& shape);

  void SizeScratch(ScratchSizer& sizer) override;
  uint64_t kv_bytes() const override;
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

  // The state bytes of one sequence in one layer (one copy).
  static uint64_t StateBytes(const DeltaNetParts& d);

 private:
  // A sequence's state copy in layer il: the convolution's window (C, d_conv - 1), then the
  // heads' matrices (H_v, S_v, S_k).
  float* State(int il, uint32_t seq, int copy);
  // The copy a Decode writes, and the one its first token reads (null: zeros).
  int NextCopy(uint32_t seq) const { return states_.NextCopy(seq); }
  const float* SourceState(int il, uint32_t seq);
  // The batch's tokens grouped by sequence, in batch order (order_, seq_runs_).
  void GroupBySequence(std::span<const BatchToken> batch);
  void Convolve(int il, std::span<const BatchToken> batch);
  void DeltaRule(int il, std::span<const BatchToken> batch);

  const Model& model_;
  const HParams& hp_;
  ThreadPool& pool_;
  const AttentionShape shape_;
  const DeltaNetParts d_;        // every DeltaNet layer's (one model has one shape)
  const int64_t C_, V_, H_, S_;  // conv channels, value dim, value heads, head size
  const int64_t conv_floats_;    // (C, d_conv - 1) a copy's window
  const int64_t copy_floats_;    // a copy: window + H_v S_v S_k

  std::vector<float> qkv_;  // (n_batch, C) the projection, then its convolution (in place)
  std::vector<float> z_;    // (n_batch, V) the output norm's gate
  std::vector<float> ba_;   // (n_batch, 2 H) b and a as the file orders them
  std::vector<float> bg_;   // (n_batch, 2 H) each value head's beta, then its g
  std::vector<float> o_;    // (n_batch, V) the heads' outputs, then normed and gated
  std::vector<int> order_;  // (n_batch) token indices grouped by sequence
  struct SeqRun {
    uint32_t seq;
    int begin, end;  // in order_
  };
  std::vector<SeqRun> seq_runs_;  // (n_batch)
  QuantizedInput in_;

  RecurrentStates states_;  // which copy each sequence reads and writes
  // (n_layer) per DeltaNet layer (n_seq, 3 copies, copy_floats_), empty for other layers
  std::vector<AlignedBuffer> state_;
};

}  // namespace mt
