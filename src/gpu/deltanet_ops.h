// Gated DeltaNet's operations on the device (engine/gpu_attention_deltanet.cc): the short
// causal convolution with SiLU, and the delta rule per value head with its gates, l2 norms and
// gated output norm. Both run a batch's tokens grouped by sequence ("runs", in order: a
// sequence's tokens depend on each other through its state) and keep each sequence's state in
// a device buffer of state copies. Each is one dispatch, recorded into the caller's
// CommandRecorder with no barrier before or after. Activations are f32; offsets are in floats
// unless they say words.
//
// Each mirrors engine/attention_deltanet.cc: the convolution's sums and the state's updates
// are the CPU's float op sequences (kernels/delta_net.h's scalar kernel), exp, log, the
// divisions and the norms' sums (a tree instead of a double sum) are the device's. Every
// token's result depends only on its sequence's earlier tokens and the shapes, never on the
// batch around it.
#pragma once

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "gpu/device.h"

namespace mt::gpu {

// One sequence's tokens of a batch: the record both shaders read, 8 words in a buffer.
// Copy offsets are in floats from the state binding's start (DeltaConvArgs::state_offset);
// a copy holds the convolution's window (channels, d_conv - 1) first, then the value heads'
// matrices (H_v, S, S).
struct DeltaNetRun {
  static constexpr uint32_t kNone = UINT32_MAX;
  uint32_t begin = 0, end = 0;     // the run's tokens: order[begin..end), in order
  uint32_t source = kNone;         // the copy its first token reads (kNone: zeros)
  uint32_t next = 0;               // the copy it writes (and its later tokens read)
  uint32_t checkpoint = 0;         // the copy the state after token checkpoint_at goes to
  uint32_t checkpoint_at = kNone;  // an index into order, or kNone: no checkpoint
  uint32_t unused[2] = {0, 0};
};
static_assert(sizeof(DeltaNetRun) == 32);

// Where the runs are: n_runs records at `runs_offset` words of `buffer`, then the batch rows of
// their tokens (uint32 each) at `order_offset` words.
struct DeltaNetRuns {
  const Buffer* buffer = nullptr;
  uint64_t runs_offset = 0;  // words
  int64_t n_runs = 0;
  uint64_t order_offset = 0;  // words
  int64_t n_order = 0;        // entries: the runs' `end`s are at most this
};

// x (rows of `channels` floats, `stride` apart, tokens by batch row) in place: each channel's
// causal convolution over its run's tokens, then SiLU (deltanet_conv.comp), the window from
// and to the runs' copies.
struct DeltaConvArgs {
  Buffer* x = nullptr;
  uint64_t x_offset = 0;  // floats
  int64_t n = 0;          // rows of x (tokens of the batch)
  int64_t channels = 0;
  int64_t stride = 0;  // floats between rows; 0 means channels
  const Buffer* weight = nullptr;
  uint64_t weight_offset = 0;  // floats: (channels, d_conv)
  int64_t d_conv = 0;          // 1 to 9
  DeltaNetRuns runs;
  Buffer* state = nullptr;
  uint64_t state_offset = 0;  // floats
  uint64_t copy_floats = 0;   // a copy's floats: every copy offset is below state's size by this
};

// out (n, H_v, S) = the gated delta rule of each run's tokens on every value head
// (deltanet_rule.comp), from qkv (n rows of [q (H_k, S) | k (H_k, S) | v (H_v, S)], convolved),
// ba (n, 2 H_v) as the projections wrote it, z (n, H_v, S) the output gate, and the layer's
// dt (H_v), A (H_v) and output norm (S) in `params`; the states in the runs' copies.
struct GatedDeltaArgs {
  const Buffer* qkv = nullptr;
  uint64_t qkv_offset = 0;  // floats
  int64_t qkv_stride = 0;   // floats between tokens; 0 means (2 H_k + H_v) S
  const Buffer* ba = nullptr;
  uint64_t ba_offset = 0;  // floats
  const Buffer* z = nullptr;
  uint64_t z_offset = 0;  // floats
  Buffer* out = nullptr;
  uint64_t out_offset = 0;  // floats
  int64_t n = 0;            // tokens (rows of qkv, ba, z and out)
  int64_t n_k_heads = 0;
  int64_t n_v_heads = 0;  // a multiple of n_k_heads
  int64_t dim = 0;        // S, at most 256
  bool tiled = false;     // value head h reads key head h % H_k, else h / (H_v / H_k)
  // b at h and a at H_v + h of a token's ba row, or ssm_ba's order: per key head, the b of its
  // value heads, then their a.
  bool separate_beta_alpha = false;
  const Buffer* params = nullptr;
  uint64_t dt_offset = 0, a_offset = 0, norm_offset = 0;  // floats
  DeltaNetRuns runs;
  Buffer* state = nullptr;
  uint64_t state_offset = 0;  // floats
  uint64_t heads_offset = 0;  // floats: head 0's matrix from a copy's start
  uint64_t copy_floats = 0;   // a copy's floats (>= heads_offset + H_v S S)
  float eps = 1e-6f;          // the l2 norms' and the output norm's
  float scale = 1.0f;         // 1 / sqrt(S)
};

// The pipelines of these operations on one Device. Used by one thread at a time, as its
// Device; destroyed before it. Each Record checks its shapes and ranges (kInvalidArgument
// naming the operation) and records nothing when they do not fit; the runs' records are
// read on the device and must stay inside the state and the rows (the caller's invariant).
// With no runs it records nothing and returns Ok.
class DeltaNetOps {
 public:
  static Result<std::unique_ptr<DeltaNetOps>> Create(Device* device);
  ~DeltaNetOps();

  Status Record(CommandRecorder& rec, const DeltaConvArgs& args);
  Status Record(CommandRecorder& rec, const GatedDeltaArgs& args);

  struct Impl;

 private:
  explicit DeltaNetOps(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mt::gpu
