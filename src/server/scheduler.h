// Continuous batching for `moetier serve`.
//
// One scheduler thread owns the Context (and through it the expert store, neither of which
// is thread-safe). HTTP handler threads Submit jobs and wait on them. Each step the
// scheduler:
//   1. admits queued jobs into free slots (a slot is one sequence of the Context: its own
//      KV cache of n_ctx positions); cancelled jobs leave the queue and their slots. A job
//      goes to the free slot whose cache holds the longest prefix of its prompt (what an
//      earlier job evaluated there: a conversation's previous turn, a shared system prompt),
//      and its prefill starts after that prefix: a position's K/V depend only on the tokens
//      before it, so the bits are those of evaluating it all;
//   2. builds one batch: the last sampled token of every generating slot, then prompt
//      tokens of slots still in prefill, up to step_tokens tokens in all;
//   3. evaluates it with one Context::Decode, so tokens routed to the same expert share one
//      load and one grouped product;
//   4. samples the next token of every slot whose logits came back, turns it into text
//      (UTF-8 completion, stop strings) and hands the text to the job, with the token's
//      log-probabilities when the job asked for them (and, for a prompt that is scored too,
//      each prompt token's from the logits of the position before it).
// Because Decode gives a token the same logits whatever else is in the batch, a request gets
// exactly the tokens it would get alone (greedy, or sampled with its seed).
//
// Expert read failures: when Decode fails for a batch that holds several sequences, the
// step is run again for each sequence alone; those that succeed go on (with the same
// logits), those that fail again finish with the error. A sequence never fails because of
// another sequence's experts; the server goes on serving.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/status.h"
#include "engine/context.h"
#include "grammar/token_filter.h"
#include "sampler/sampler.h"
#include "server/metrics.h"
#include "server/tiers.h"

namespace mt::server {

struct GenerationSpec {
  std::vector<int32_t> prompt;  // (n_prompt) ids in the vocabulary; 0 < n_prompt < n_ctx
  SamplerParams sampling;
  int64_t max_tokens = -1;  // tokens to generate at most (0: none); -1: until the context is full
  std::vector<std::string> stops;
  // llama-server's t_max_predict_ms: past this many milliseconds of generation (from the
  // first token), the next token whose text holds a newline ends it (kLength). 0: no limit.
  double max_predict_ms = 0;
  bool ignore_eos = false;
  int32_t logprobs = -1;         // alternatives per token (TokenLogprob::top); -1: no logprobs
  bool prompt_logprobs = false;  // with logprobs: an entry for every prompt token too
  // Reuse a slot's KV cache for the prompt's longest prefix already in it (from an earlier
  // request; the same bits as evaluating it again). Never for scored prompts.
  bool cache_prompt = true;
  // The grammar the generated text must follow (null: none). It decides where the output
  // ends: an end-of-generation token is allowed exactly when the text is a whole sentence,
  // and ends it even with ignore_eos.
  std::shared_ptr<const grammar::Grammar> grammar;
  // Where the grammar starts applying: from the first token, or (lazy) after a trigger
  // (tool calls with tool_choice auto: "<tool_call>"; after a thinking model's "</think>").
  grammar::LazyStart grammar_start;
};

// A token's log-probability under the model: log-softmax of its logits, before the logit
// bias, penalties and temperature. Generated tokens' entries are released with their text:
// an entry goes out once all of its token's bytes have (a stop string drops the entries of
// tokens that start inside or after it); prompt entries go out as the prompt is evaluated.
struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;  // NaN: none (the first prompt token: nothing comes before it)
  std::vector<std::pair<int32_t, float>> top;  // (top_n) the most likely ids, descending
  bool prompt = false;                         // a prompt token
  int64_t text_byte = 0;  // generated: where its bytes start in the generated text
};

enum class FinishReason { kNone, kStop, kLength, kCancelled, kError };

// "stop", "length", "cancelled", "error" ("" for kNone).
const char* FinishReasonName(FinishReason r);

// What a handler has received of its generation so far.
struct JobUpdate {
  std::string text;                    // text produced since the previous update
  std::vector<TokenLogprob> logprobs;  // entries released since the previous update
  bool finished = false;
  FinishReason reason = FinishReason::kNone;
  Status error;                   // kError: what failed (names file, layer, expert)
  int64_t prompt_tokens = 0;      // prompt tokens evaluated
  int64_t cached_tokens = 0;      // prompt tokens found in the slot's KV cache, not evaluated
  int64_t completion_tokens = 0;  // tokens sampled (including an end-of-generation token)
  // Once finished: whether a stop string ended it (kStop; else an end-of-generation token),
  // and its times from admission to a slot to the first token (the prompt's evaluation) and
  // from there to the end (generation).
  bool stop_string = false;
  double prompt_seconds = 0;
  double generation_seconds = 0;
};

// One generation. Shared by its handler (which waits and may cancel) and the scheduler
// (which fills it). Thread-safe.
class Job {
 public:
  explicit Job(GenerationSpec spec);

  const GenerationSpec& spec() const { return spec_; }

  // Waits until the job has new text or has finished, or `timeout` passes. Moves the new
  // text into out->text and copies the rest of the state. Returns whether anything new came.
  bool Wait(std::chrono::milliseconds timeout, JobUpdate* out);

  // Asks the scheduler to drop the job (e.g. the client went away): it finishes with
  // kCancelled at the next step boundary and its slot is freed. No effect once finished.
  void Cancel();
  bool cancel_requested() const { return cancel_.load(std::memory_order_relaxed); }

 private:
  friend class Scheduler;
  using Clock = std::chrono::steady_clock;

  void Emit(std::string_view text, std::vector<TokenLogprob> logprobs, int64_t prompt_tokens,
            int64_t completion_tokens);
  void SetCached(int64_t cached_tokens);
  void Finish(FinishReason reason, Status error, bool stop_string = false,
              double prompt_seconds = 0, double generation_seconds = 0);

  const GenerationSpec spec_;
  const Clock::time_point arrival_ = Clock::now();
  Clock::time_point started_;      // scheduler only: admitted to a slot
  Clock::time_point first_token_;  // scheduler only
  std::atomic<bool> cancel_{false};

  std::mutex mu_;
  std::condition_variable cv_;
  std::string text_;                    // produced, not yet taken by Wait
  std::vector<TokenLogprob> logprobs_;  // released, not yet taken by Wait
  bool changed_ = false;
  JobUpdate state_;  // all but text
};

struct SchedulerOptions {
  uint32_t n_slots = 1;        // sequences of the Context (its n_seq_max)
  uint32_t step_tokens = 512;  // tokens per forward step (at least n_slots)
  size_t max_queue = 64;       // jobs waiting for a slot; Submit refuses more
  // When the last sequence finishes and nothing waits, the device's experts move toward the
  // most routed (Context::PromoteDeviceExperts); false keeps them where they started.
  bool promote_device_experts = true;
};

class Scheduler {
 public:
  // `ctx` must have at least options.n_slots sequences and a tokenizer; it is used only by
  // the scheduler thread from Start() until Shutdown() returns. `metrics` may be null.
  Scheduler(Context& ctx, const SchedulerOptions& options, Metrics* metrics);
  ~Scheduler();  // Shutdown(0) if still running
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  void Start();

  // Queues a job. Thread-safe. Errors: ResourceExhausted when max_queue jobs are waiting,
  // Cancelled once shutdown has begun.
  Status Submit(std::shared_ptr<Job> job);
  // Queues the jobs of one request (a batch of prompts, n choices) all or none: refused only
  // as Submit refuses one, so a batch larger than max_queue still enters a server that has
  // room (the queue may then hold up to max_queue - 1 + jobs.size()).
  Status SubmitAll(std::span<const std::shared_ptr<Job>> jobs);

  // Stops taking jobs, lets queued and running ones finish for up to `drain`, cancels what
  // is left, and joins the scheduler thread. Thread-safe; later calls only shorten the drain.
  void Shutdown(std::chrono::milliseconds drain);
  // Cuts a drain in progress short: everything left is cancelled at the next step.
  void CancelAll();

  bool accepting() const;
  // Queue depth, busy slots, step counts and a copy of the expert tier counters as of the
  // end of the last step. Thread-safe.
  SchedulerGauges Gauges() const;
  // Routing counts and cache residency per (layer, expert) as of the end of the last step
  // (for GET /v1/tiers). Thread-safe.
  ExpertActivity Activity() const;

 private:
  struct Slot;
  using Clock = std::chrono::steady_clock;

  void Loop();
  // Admits queued jobs into free slots, drops cancelled ones. Returns false when the loop
  // should end (draining and nothing left).
  bool Admit();
  void Step();
  // After a step that left every slot free and the queue empty: the device's LFU promotions
  // (SchedulerOptions::promote_device_experts). A fixed point: no forward pass is running.
  void PromoteWhenIdle();
  // The free slot for `spec`: the longest prefix of its prompt in a slot's KV cache (at most
  // all but its last token, whose logits are needed), then the slot used longest ago.
  // Sets *reuse to that prefix's length.
  uint32_t PickSlot(const GenerationSpec& spec, size_t* reuse) const;
  void Sample(Slot& slot, std::span<const float> logits);
  // The prompt entry of the token after prompt position `at`, from that position's logits.
  void ScorePrompt(Slot& slot, size_t at, std::span<const float> logits);
  void Release(Slot& slot, FinishReason reason, Status error);
  // The Context's routing counts and the store's residency into `out` (its buffers reused).
  // Scheduler thread only (or before Start).
  void CopyActivity(ExpertActivity* out) const;

  Context& ctx_;
  const SchedulerOptions options_;
  Metrics* metrics_;
  std::vector<Slot> slots_;  // (n_slots) scheduler thread only
  // Per slot, the tokens whose K/V its cache holds at positions 0.. (what its last job
  // evaluated), and when it was last released. Scheduler thread only.
  std::vector<std::vector<int32_t>> kv_tokens_;  // (n_slots)
  std::vector<uint64_t> released_at_;            // (n_slots)
  uint64_t releases_ = 0;
  // A step's logits (tokens wanting logits, n_vocab), kept between steps: at 32 sequences
  // a fresh vector was ~6 MiB of new pages every step. Scheduler thread only.
  std::vector<float> step_logits_;
  // The vocabulary as grammars see it, built at the first request with a grammar.
  std::shared_ptr<const grammar::GrammarVocab> grammar_vocab_;
  uint64_t admitted_ = 0;  // admission counter: prefill goes in admission order

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  uint32_t busy_ = 0;  // slots with a job
  bool draining_ = false;
  Clock::time_point deadline_;    // draining: when what is left gets cancelled
  SchedulerGauges gauges_;        // as of the last step
  ExpertActivity activity_;       // as of the last step
  ExpertActivity activity_next_;  // scheduler thread only: the next snapshot, filled unlocked
  std::thread thread_;
  std::mutex join_mu_;  // serializes Shutdown's join
};

}  // namespace mt::server
