// A Context evaluates tokens of one sequence against a Model: it owns the KV cache and
// all scratch memory (sized once, at Create), and the thread pool. Not thread-safe; use
// one Context per sequence. Results are bit-identical for any thread count.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/gpu_experts.h"
#include "engine/model.h"
#include "engine/routing_stats.h"
#include "engine/storage.h"
#include "kernels/attention.h"

namespace mt {

// The KV cache type from its name as the CLI takes it ("f16", "f32", "q8_0"); an error names
// the flag and the choices.
Result<KvElemType> ParseKvType(std::string_view name);
const char* KvTypeName(KvElemType type);
// "f16" for K and V alike, else "K q8_0, V f16".
std::string KvTypesName(KvTypes types);

struct ContextOptions {
  uint32_t n_ctx = 4096;     // positions in the KV cache; 0 = the model's training context
  uint32_t n_batch = 512;    // most tokens per forward pass (prefill is split into batches)
  int n_threads = 0;         // 0 = all cores
  bool pin_threads = false;  // thread i on the i-th allowed CPU (ThreadPool)
  // K's and V's element types (llama.cpp's -ctk and -ctv). q8_0 takes 17/32 of f16's memory
  // and needs a head dimension that is a multiple of 32, K's at most 512 (Create says so
  // otherwise).
  KvTypes kv_types = KvElemType::kF16;
  uint32_t n_seq_max = 1;  // sequences with their own KV cache (n_ctx positions each)
  // Make the whole KV cache resident at Create instead of page by page as positions fill
  // (AlignedBuffer::Populate). For a server, whose slots fill all of it over time: the page
  // faults move out of the requests, and a KV cache the memory cannot hold shows at
  // start-up rather than in the middle of serving.
  bool populate_kv = false;
  StorageOptions storage;  // where the routed experts come from
  GpuExpertOptions gpu;    // experts on a device (--device, --gpu-expert-cache)
  // Routing statistics to start from (e.g. a restarted server's, --routing-stats); empty:
  // start from zero.
  std::string routing_stats_file;
};

// One token of a batch: which sequence it belongs to, its position there, and whether its
// logits are wanted.
struct BatchToken {
  int32_t token = 0;
  uint32_t seq = 0;
  uint32_t pos = 0;
  bool logits = false;
};

enum class LogitsFor { kLast, kAll };

class Context {
 public:
  // Plans memory (see storage.h) and creates the expert store. Errors: n_ctx larger than
  // the model's training context (naming both), a memory plan that does not fit.
  static Result<std::unique_ptr<Context>> Create(const Model& model, const ContextOptions& options);
  ~Context();

  // Appends `tokens` at positions [n_past(), n_past() + tokens.size()) and evaluates them,
  // in batches of n_batch. Writes logits (n_vocab floats per token) for the last token or
  // for every token into `logits` (resized). Errors: a token id outside the vocab, the
  // context filling up (naming n_ctx), an empty span, and expert read failures (naming the
  // file, layer, expert and offset) or a model file changed under the process. After an
  // error the context is as before the call and can evaluate again.
  Status Eval(std::span<const int32_t> tokens, LogitsFor which, std::vector<float>* logits);

  // Makes the context hold `tokens`, evaluating only what follows the longest prefix of them
  // it already holds: `held` is the caller's record of the tokens at positions 0, 1, ...
  // (only its first n_past() count). The last token is always evaluated: its logits are
  // written (LogitsFor::kLast). Returns how many tokens were kept. The same bits as
  // evaluating `tokens` in a fresh context. Errors as for Eval; the context then holds the
  // kept prefix.
  Result<size_t> EvalAfterPrefix(std::span<const int32_t> held, std::span<const int32_t> tokens,
                                 std::vector<float>* logits);

  // Evaluates tokens of any sequences together: tokens routed to the same expert share one
  // expert load and one grouped product. A token at position p of sequence s attends to
  // positions 0..p of s, which must be in the cache or earlier in this batch. Writes the
  // logits of the tokens that want them, in batch order. A token's logits do not depend on
  // the other tokens of the batch (bit for bit). Single-sequence callers use Eval, which
  // tracks n_past(); Decode leaves n_past() alone. Errors as for Eval, plus a sequence id
  // out of range.
  Status Decode(std::span<const BatchToken> batch, std::vector<float>* logits);

  uint32_t n_past() const { return n_past_; }
  uint32_t n_ctx() const { return n_ctx_; }
  uint32_t n_vocab() const;
  // How much of sequence seq's first n cached positions can be kept to go on at position n
  // (Decode, EvalAfterPrefix): n, or 0 where a sliding-window layer's ring no longer holds
  // the positions before n (the sequence went on past them for longer than the ring).
  uint32_t ReusablePrefix(uint32_t seq, uint32_t n) const;
  // Forgets every position >= n_past (n_past <= n_past()).
  void TruncateKv(uint32_t n_past) {
    if (n_past < n_past_) n_past_ = n_past;
  }
  void ClearKv() { n_past_ = 0; }

  const Model& model() const { return model_; }
  const StoragePlan& storage_plan() const;
  ExpertStore& expert_store();
  // The experts on a device (--gpu-expert-cache), or null.
  GpuExpertTier* gpu_experts() const;
  // Moves the device's experts toward the most routed so far (GpuExpertTier::Promote with the
  // live routing counts); the swaps made, 0 without a device cache. A fixed point: between
  // forward passes (the server calls it when it falls idle), never during one.
  Result<uint32_t> PromoteDeviceExperts();
  // What else runs on a device (--device), for reports; an empty name when nothing does.
  struct DeviceParts {
    std::string name;
    int attention_layers = 0;  // GQA, MLA and DeltaNet layers whose attention runs there
    bool output_head = false;
    int swiglu_layers = 0;  // layers whose shared experts or dense FFN run there
  };
  DeviceParts device_parts() const;
  // How often each expert was routed to, since Create (plus what ContextOptions loaded).
  RoutingStats& routing_stats();
  // Next-layer prefetch: per layer, experts predicted, and how many of those the router
  // then chose (recall@k = correct / actual).
  struct PrefetchCounters {
    uint64_t predicted = 0;  // (token, expert) predictions
    uint64_t correct = 0;    // ... that the router chose
    uint64_t actual = 0;     // (token, expert) choices of the router
  };
  const std::vector<PrefetchCounters>& prefetch_counters() const;
  // Layers ahead that prefetch hints (StorageOptions::prefetch_depth resolved); 0: off.
  int prefetch_depth() const;

 private:
  struct Impl;
  Context(const Model& model, uint32_t n_ctx);
  // Decode's forward passes of n_batch tokens each, writing the wanted logits to `out`.
  Status DecodeParts(std::span<const BatchToken> batch, float* out);

  const Model& model_;
  uint32_t n_ctx_ = 0;
  uint32_t n_past_ = 0;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mt
