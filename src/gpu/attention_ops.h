// The small operations of attention on the device (GQA's and MLA's), around the matrix
// products (gpu/matmul.h): bias, RMS norm, RoPE, copying strided rows, a sigmoid gate,
// storing K/V rows into a device cache, and causal attention over it. Each is one dispatch,
// recorded into the caller's CommandRecorder with no barrier before or after (the caller orders
// them with the work around them). Activations are f32; offsets are in floats unless they say
// bytes.
//
// Each mirrors a CPU kernel (kernels/ops.h, kernels/attention.h) within float rounding, and
// every output element's float ops depend only on its own row and the shapes: a token's
// result never depends on the batch around it.
#pragma once

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "gpu/device.h"

namespace mt::gpu {

// A KV cache element type on the device: f32, f16 (two halves a uint32 word), or q8_0 (ggml's
// 34-byte blocks of 32: an f16 scale and 32 int8 codes, kernels/attention.h), whose rows need
// not start on a word.
enum class KvElem : uint32_t { kF16 = 0, kF32 = 1, kQ8_0 = 2 };

// rows += bias: x[r * stride + i] += bias[i] for i < width, r < rows.
struct AddBiasArgs {
  Buffer* x = nullptr;
  uint64_t x_offset = 0;  // floats
  int64_t rows = 0;
  int64_t width = 0;
  int64_t stride = 0;  // floats between rows; 0 means width
  const Buffer* bias = nullptr;
  uint64_t bias_offset = 0;  // floats
};

// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, row by row (kernels/ops.h RmsNorm); rows of
// `dim` floats, `stride` apart. y may be x (in place).
struct RmsNormArgs {
  const Buffer* x = nullptr;
  uint64_t x_offset = 0;  // floats
  Buffer* y = nullptr;
  uint64_t y_offset = 0;  // floats
  int64_t rows = 0;
  int64_t dim = 0;
  int64_t stride = 0;              // floats between rows (x's and y's); 0 means dim
  const Buffer* weight = nullptr;  // or null: 1, as RmsNorm's
  uint64_t weight_offset = 0;      // floats: (dim)
  float eps = 1e-6f;
};

// Rotates the first n_rot dims of each of `heads` heads (head_dim apart) of each token's row in
// place, as kernels/ops.h RopeRotate: token t's angles are cos_sin[t * n_rot ...] as
// RopeAngles writes them (n_rot / 2 cosines, then n_rot / 2 sines); neox pairs (i, i + n_rot/2),
// otherwise (2i, 2i + 1).
struct RopeArgs {
  Buffer* x = nullptr;
  uint64_t x_offset = 0;  // floats
  int64_t n = 0;          // tokens
  int64_t heads = 0;
  int64_t head_dim = 0;
  int64_t stride = 0;  // floats between tokens' rows; 0 means heads * head_dim
  int64_t n_rot = 0;   // even, <= head_dim
  bool neox = false;
  const Buffer* cos_sin = nullptr;  // (n, n_rot) f32
  uint64_t cos_sin_offset = 0;      // floats
};

// y[r * y_stride + i] = x[r * x_stride + i] for i < width, r < rows: the same bits (MLA puts
// each head's q_pe beside its absorbed query this way). x and y must not overlap.
struct CopyRowsArgs {
  const Buffer* x = nullptr;
  uint64_t x_offset = 0;  // floats
  Buffer* y = nullptr;
  uint64_t y_offset = 0;  // floats
  int64_t rows = 0;
  int64_t width = 0;
  int64_t x_stride = 0;  // floats between rows of x; 0 means width
  int64_t y_stride = 0;  // floats between rows of y; 0 means width
};

// x[r * x_stride + i] *= 1 / (1 + exp(-g[r * g_stride + i])) for i < width, r < rows: an
// attention output gate (qwen3next's GQA: each head's output times the sigmoid of its gate),
// the formula of engine/attention_gqa.cc within the device's exp (3 + 2|g| ulp) and division
// (2.5 ulp). x and g must not overlap.
struct SigmoidGateArgs {
  Buffer* x = nullptr;
  uint64_t x_offset = 0;  // floats
  const Buffer* g = nullptr;
  uint64_t g_offset = 0;  // floats
  int64_t rows = 0;
  int64_t width = 0;
  int64_t x_stride = 0;  // floats between rows of x; 0 means width
  int64_t g_stride = 0;  // floats between rows of g; 0 means width
};

// Each token's (seq, pos), two uint32 words a token, in a buffer the caller fills.
struct TokenSlots {
  const Buffer* buffer = nullptr;
  uint64_t offset = 0;  // words: token 0's seq
};

// Stores each token's `heads` rows of head_dim floats (x, a token's rows contiguous, `stride`
// apart) into a cache laid out (n_seq, heads, cells, head_dim) of `type`: token t's head h
// at cell pos(t) of (seq(t), h). f16 rounds to nearest even and q8_0 as the CPU's quantizer
// (kernels/attention.h StoreKv; head_dim a multiple of 32): the same bits on every device. The
// slots are read on the device: a token whose slot is outside the cache (pos >= cells, or seq past
// the buffer or the device's largest binding) stores nothing.
struct StoreKvArgs {
  const Buffer* x = nullptr;
  uint64_t x_offset = 0;  // floats
  int64_t n = 0;          // tokens
  int64_t heads = 0;
  int64_t head_dim = 0;  // even; q8_0: a multiple of 32
  int64_t stride = 0;    // floats between tokens' rows; 0 means heads * head_dim
  TokenSlots tokens;
  Buffer* cache = nullptr;
  uint64_t cache_offset = 0;  // bytes: the layer's (seq 0, head 0, cell 0); 4-byte aligned
  uint32_t cells = 0;         // cells per (seq, head)
  KvElem type = KvElem::kF16;
};

// out (n, n_head, d_v) = causal attention of each token's query heads q (n, n_head, d_k) over
// the positions [first, pos] of its sequence in the K and V caches (laid out as StoreKvArgs),
// first = pos + 1 - window past a sliding window (window 0: none), query head h reading kv
// head h / (n_head / n_head_kv). Scores are scale * q.k; a head's sink logit (gpt-oss) takes
// weight in the softmax without a value (kernels/attention.h). An online softmax over tiles of
// positions: each (token, head)'s float ops depend only on its n_pos, d_k and d_v. d_k is at
// most 576 and d_v at most 512 (MLA's). A token whose slot is outside the caches (as for
// StoreKv) gets zeros. V's cells may be longer than d_v (v_row): MLA reads V as the first d_v
// values of K's rows, with v_cache = k_cache, v_offset = k_offset and v_row = d_k. With a q8_0
// K the query is rounded to q8_0 blocks (the CPU's q', kernels/attention.h) and a block's code
// products are summed in integers; a q8_0 V is d c, exact. A q8_0 K or V has rows (and V's
// cells) of whole blocks of 32.
struct AttendArgs {
  const Buffer* q = nullptr;
  uint64_t q_offset = 0;  // floats
  int64_t q_stride = 0;   // floats between tokens; 0 means n_head * d_k
  Buffer* out = nullptr;
  uint64_t out_offset = 0;  // floats
  int64_t out_stride = 0;   // floats between tokens; 0 means n_head * d_v
  int64_t n = 0;            // tokens
  int64_t n_head = 0;
  int64_t n_head_kv = 0;  // divides n_head
  int64_t d_k = 0;        // even (q8_0: a multiple of 32)
  int64_t d_v = 0;        // even (q8_0: a multiple of 32)
  TokenSlots tokens;
  const Buffer* k_cache = nullptr;
  uint64_t k_offset = 0;  // bytes, 4-byte aligned
  const Buffer* v_cache = nullptr;
  uint64_t v_offset = 0;  // bytes, 4-byte aligned
  int64_t v_row = 0;      // elements between V's consecutive cells (>= d_v, even); 0 means d_v
  uint32_t cells = 0;
  KvElem k_type = KvElem::kF16;
  KvElem v_type = KvElem::kF16;
  float scale = 1.0f;
  uint32_t window = 0;
  const Buffer* sinks = nullptr;  // (n_head) f32 sink logits, or null: none
  uint64_t sinks_offset = 0;      // floats
};

// The pipelines of these operations on one Device. Used by one thread at a time, as its
// Device; destroyed before it. Each Record checks its ranges against the buffers
// (kInvalidArgument naming the operation) and records nothing when they do not fit; with no
// rows or tokens it records nothing and returns Ok.
class AttentionOps {
 public:
  static Result<std::unique_ptr<AttentionOps>> Create(Device* device);
  ~AttentionOps();

  Status Record(CommandRecorder& rec, const AddBiasArgs& args);
  Status Record(CommandRecorder& rec, const RmsNormArgs& args);
  Status Record(CommandRecorder& rec, const RopeArgs& args);
  Status Record(CommandRecorder& rec, const CopyRowsArgs& args);
  Status Record(CommandRecorder& rec, const SigmoidGateArgs& args);
  Status Record(CommandRecorder& rec, const StoreKvArgs& args);
  Status Record(CommandRecorder& rec, const AttendArgs& args);

  struct Impl;

 private:
  explicit AttentionOps(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mt::gpu
