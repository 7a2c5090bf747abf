#include "server/scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "base/check.h"
#include "base/log.h"
#include "server/stop_matcher.h"
#include "tokenizer/tokenizer.h"

namespace mt::server {
namespace {

// Prompt tokens that may ask for logits in one step when prompts are scored: bounds the
// step's logits (rows x n_vocab floats) whatever --batch is.
constexpr uint32_t kScoredPromptRowsPerStep = 64;

// `id`'s entry from one position's logits (finite: Decode checks them), with the top_n most
// likely ids (ties: the lower id first).
TokenLogprob ScoreToken(std::span<const float> logits, int32_t id, int32_t top_n) {
  float max = logits[0];
  for (float l : logits) max = std::max(max, l);
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max);
  const double log_total = max + std::log(sum);
  TokenLogprob e;
  e.id = id;
  e.logprob = static_cast<float>(logits[id] - log_total);
  const size_t n = static_cast<size_t>(std::max(top_n, 0));
  std::vector<std::pair<int32_t, float>>& top = e.top;  // (id, logit), descending
  top.reserve(n + 1);
  for (size_t i = 0; i < logits.size() && n > 0; ++i) {
    const float l = logits[i];
    if (top.size() == n && l <= top.back().second) continue;
    auto at =
        std::upper_bound(top.begin(), top.end(), l,
                         [](float v, const std::pair<int32_t, float>& p) { return v > p.second; });
    top.insert(at, {static_cast<int32_t>(i), l});
    if (top.size() > n) top.pop_back();
  }
  for (auto& [alt, lp] : top) lp = static_cast<float>(lp - log_total);
  return e;
}

bool ScoresPrompt(const GenerationSpec& spec) { return spec.logprobs >= 0 && spec.prompt_logprobs; }

}  // namespace

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kNone:
      return "";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "";
}

Job::Job(GenerationSpec spec) : spec_(std::move(spec)) {}

bool Job::Wait(std::chrono::milliseconds timeout, JobUpdate* out) {
  std::unique_lock lock(mu_);
  const bool got = cv_.wait_for(lock, timeout, [&] { return changed_; });
  std::string text = std::move(text_);
  text_.clear();
  std::vector<TokenLogprob> logprobs = std::move(logprobs_);
  logprobs_.clear();
  *out = state_;
  out->text = std::move(text);
  out->logprobs = std::move(logprobs);
  changed_ = false;
  return got;
}

void Job::Cancel() { cancel_.store(true, std::memory_order_relaxed); }

void Job::Emit(std::string_view text, std::vector<TokenLogprob> logprobs, int64_t prompt_tokens,
               int64_t completion_tokens) {
  {
    std::lock_guard lock(mu_);
    text_.append(text);
    for (TokenLogprob& e : logprobs) logprobs_.push_back(std::move(e));
    state_.prompt_tokens = prompt_tokens;
    state_.completion_tokens = completion_tokens;
    changed_ = true;
  }
  cv_.notify_all();
}

void Job::SetCached(int64_t cached_tokens) {
  std::lock_guard lock(mu_);
  state_.cached_tokens = cached_tokens;
}

void Job::Finish(FinishReason reason, Status error, bool stop_string, double prompt_seconds,
                 double generation_seconds) {
  {
    std::lock_guard lock(mu_);
    state_.finished = true;
    state_.reason = reason;
    state_.error = std::move(error);
    state_.stop_string = stop_string;
    state_.prompt_seconds = prompt_seconds;
    state_.generation_seconds = generation_seconds;
    changed_ = true;
  }
  cv_.notify_all();
}

// One sequence of the Context and the job that runs in it.
struct Scheduler::Slot {
  std::shared_ptr<Job> job;      // null: free
  uint64_t order = 0;            // admission number
  uint32_t n_past = 0;           // positions filled in this slot's KV cache
  size_t n_fed = 0;              // prompt tokens evaluated (or found in the cache)
  size_t cached = 0;             // prompt tokens found in the slot's KV cache
  int32_t pending = -1;          // sampled token to evaluate next step; -1: none
  std::vector<int32_t> history;  // (n_prompt + generated) for the repetition penalty
  std::optional<Sampler> sampler;
  std::optional<grammar::GrammarFilter> grammar;  // when the job has a grammar
  std::optional<StreamDecoder> decoder;
  std::optional<StopMatcher> stops;
  int64_t n_generated = 0;
  bool stop_string = false;  // a stop string ended the generation
  // Logprobs: entries of generated tokens whose bytes have not all gone out as text, each
  // with the end of its bytes in the generated text.
  std::deque<std::pair<int64_t, TokenLogprob>> held;
  int64_t generated_bytes = 0;  // bytes of the generated tokens' pieces
  int64_t sent_bytes = 0;       // of those, bytes handed to the job as text
};

Scheduler::Scheduler(Context& ctx, const SchedulerOptions& options, Metrics* metrics)
    : ctx_(ctx),
      options_(options),
      metrics_(metrics),
      slots_(options.n_slots),
      kv_tokens_(options.n_slots),
      released_at_(options.n_slots, 0) {
  MT_CHECK(options.n_slots >= 1);
  MT_CHECK(options.step_tokens >= options.n_slots);
  MT_CHECK(ctx.model().tokenizer() != nullptr);
  gauges_.slots_total = options.n_slots;
  gauges_.tier = ctx.expert_store().stats();
  if (const Context::DeviceParts d = ctx.device_parts(); !d.name.empty()) {
    gauges_.device = {d.name, d.attention_layers, d.output_head, d.swiglu_layers};
    if (const GpuExpertTier* gpu = ctx.gpu_experts()) {
      gauges_.device.experts = gpu->n_experts();
      gauges_.device.expert_bytes = gpu->weight_bytes();
    }
  }
  CopyActivity(&activity_);  // routing counts loaded at start (--routing-stats) show at once
}

Scheduler::~Scheduler() { Shutdown(std::chrono::milliseconds(0)); }

void Scheduler::Start() {
  MT_CHECK(!thread_.joinable());
  thread_ = std::thread([this] { Loop(); });
}

Status Scheduler::Submit(std::shared_ptr<Job> job) {
  return SubmitAll(std::span<const std::shared_ptr<Job>>(&job, 1));
}

Status Scheduler::SubmitAll(std::span<const std::shared_ptr<Job>> jobs) {
  {
    std::lock_guard lock(mu_);
    if (draining_) return Status(StatusCode::kCancelled, "the server is shutting down");
    if (queue_.size() >= options_.max_queue) {
      return Status(
          StatusCode::kResourceExhausted,
          fmt::format("the server is busy: {} requests are waiting (--max-queue)", queue_.size()));
    }
    for (const auto& job : jobs) queue_.push_back(job);
    gauges_.queue_depth = queue_.size();
  }
  cv_.notify_all();
  return Status::Ok();
}

void Scheduler::Shutdown(std::chrono::milliseconds drain) {
  {
    std::lock_guard lock(mu_);
    const Clock::time_point deadline = Clock::now() + drain;
    if (!draining_ || deadline < deadline_) deadline_ = deadline;
    draining_ = true;
  }
  cv_.notify_all();
  std::lock_guard join(join_mu_);
  if (thread_.joinable()) thread_.join();
  // Never started, or jobs submitted after the loop ended: nothing will run them.
  std::lock_guard lock(mu_);
  for (auto& job : queue_) job->Finish(FinishReason::kCancelled, Status::Ok());
  queue_.clear();
}

void Scheduler::CancelAll() {
  {
    std::lock_guard lock(mu_);
    if (!draining_) return;
    deadline_ = Clock::now();
  }
  cv_.notify_all();
}

bool Scheduler::accepting() const {
  std::lock_guard lock(mu_);
  return !draining_;
}

SchedulerGauges Scheduler::Gauges() const {
  std::lock_guard lock(mu_);
  return gauges_;
}

ExpertActivity Scheduler::Activity() const {
  std::lock_guard lock(mu_);
  return activity_;
}

void Scheduler::CopyActivity(ExpertActivity* out) const {
  const RoutingStats& routing = ctx_.routing_stats();
  out->n_layer = routing.n_layer();
  out->n_expert = routing.n_expert();
  out->routed_tokens = routing.tokens();
  out->routed.resize(size_t{out->n_layer} * out->n_expert);
  for (uint32_t l = 0; l < out->n_layer; ++l) {
    for (uint32_t e = 0; e < out->n_expert; ++e) {
      out->routed[size_t{l} * out->n_expert + e] = routing.count(l, e);
    }
  }
  if (!ctx_.expert_store().Residency(&out->resident) ||
      out->resident.size() != out->routed.size()) {
    out->resident.clear();
  }
}

void Scheduler::Loop() {
  while (Admit()) {
    Step();
    PromoteWhenIdle();
  }
}

void Scheduler::PromoteWhenIdle() {
  const GpuExpertTier* gpu = ctx_.gpu_experts();
  if (gpu == nullptr || !options_.promote_device_experts) return;
  {
    std::lock_guard lock(mu_);
    if (busy_ > 0 || !queue_.empty()) return;
  }
  // A request arriving meanwhile waits for the swaps: experts' uploads, milliseconds each.
  if (Result<uint32_t> swaps = ctx_.PromoteDeviceExperts(); !swaps.ok()) {
    Log(LogLevel::kError, "device expert promotion: {}", swaps.status().message());
  }
  std::lock_guard lock(mu_);
  gauges_.device.expert_promotions = gpu->promotions();
}

bool Scheduler::Admit() {
  std::vector<std::shared_ptr<Job>> dropped;  // finished outside the lock
  bool cancel_everything = false;
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return draining_ || busy_ > 0 || !queue_.empty(); });
    cancel_everything = draining_ && Clock::now() >= deadline_;
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (cancel_everything || (*it)->cancel_requested()) {
        dropped.push_back(std::move(*it));
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
    while (!queue_.empty() && busy_ < slots_.size()) {
      size_t reuse = 0;
      const uint32_t s = PickSlot(queue_.front()->spec(), &reuse);
      Slot& slot = slots_[s];
      const Tokenizer& tok = *ctx_.model().tokenizer();
      slot = Slot{};
      slot.job = std::move(queue_.front());
      queue_.pop_front();
      slot.order = admitted_++;
      // The cached prefix counts as evaluated: prefill starts after it.
      slot.n_past = static_cast<uint32_t>(reuse);
      slot.n_fed = reuse;
      slot.cached = reuse;
      slot.job->SetCached(static_cast<int64_t>(reuse));
      gauges_.cached_tokens += reuse;
      slot.history = slot.job->spec().prompt;
      slot.sampler.emplace(slot.job->spec().sampling);
      if (slot.job->spec().grammar != nullptr) {
        if (grammar_vocab_ == nullptr) {
          grammar_vocab_ = std::make_shared<const grammar::GrammarVocab>(tok);
        }
        slot.grammar.emplace(slot.job->spec().grammar, grammar_vocab_,
                             slot.job->spec().grammar_start);
      }
      slot.decoder.emplace(tok, /*special=*/false);
      slot.stops.emplace(slot.job->spec().stops);
      slot.job->started_ = Clock::now();
      if (ScoresPrompt(slot.job->spec())) {  // nothing comes before the first prompt token
        TokenLogprob first;
        first.id = slot.job->spec().prompt[0];
        first.logprob = std::numeric_limits<float>::quiet_NaN();
        first.prompt = true;
        std::vector<TokenLogprob> one;
        one.push_back(std::move(first));
        slot.job->Emit("", std::move(one), 0, 0);
      }
      ++busy_;
    }
    gauges_.queue_depth = queue_.size();
  }
  for (auto& job : dropped) {
    job->Finish(FinishReason::kCancelled, Status::Ok());
    if (metrics_ != nullptr) metrics_->CountCancelled();
  }
  for (Slot& slot : slots_) {
    if (slot.job != nullptr && (cancel_everything || slot.job->cancel_requested())) {
      Release(slot, FinishReason::kCancelled, Status::Ok());
    }
  }
  std::lock_guard lock(mu_);
  gauges_.slots_busy = busy_;
  return !(draining_ && busy_ == 0 && queue_.empty());
}

uint32_t Scheduler::PickSlot(const GenerationSpec& spec, size_t* reuse) const {
  const bool may_reuse = spec.cache_prompt && !ScoresPrompt(spec);
  uint32_t best = 0;
  bool found = false;
  *reuse = 0;
  for (uint32_t s = 0; s < slots_.size(); ++s) {
    if (slots_[s].job != nullptr) continue;
    size_t common = 0;
    if (may_reuse) {
      const std::vector<int32_t>& kv = kv_tokens_[s];
      const size_t limit = std::min(kv.size(), spec.prompt.size() - 1);
      while (common < limit && kv[common] == spec.prompt[common]) ++common;
      common = ctx_.ReusablePrefix(s, static_cast<uint32_t>(common));
    }
    if (!found || common > *reuse || (common == *reuse && released_at_[s] < released_at_[best])) {
      best = s;
      *reuse = common;
      found = true;
    }
  }
  MT_CHECK(found);
  return best;
}

void Scheduler::Release(Slot& slot, FinishReason reason, Status error) {
  Job& job = *slot.job;
  // What the slot's KV cache now holds: the tokens evaluated, in order (a failed step may
  // have left it half-written: nothing is kept then).
  const size_t s = static_cast<size_t>(&slot - slots_.data());
  std::vector<int32_t>& kv = kv_tokens_[s];
  kv.clear();
  if (reason != FinishReason::kError) {
    kv.assign(slot.history.begin(),
              slot.history.begin() + std::min<size_t>(slot.n_past, slot.history.size()));
  }
  released_at_[s] = ++releases_;
  const Clock::time_point now = Clock::now();
  if (metrics_ != nullptr) {
    metrics_->CountTokens(slot.n_fed - slot.cached, slot.n_generated);
    if (reason == FinishReason::kCancelled) metrics_->CountCancelled();
    if (reason == FinishReason::kError) metrics_->CountFailed();
    if (reason == FinishReason::kStop || reason == FinishReason::kLength) {
      auto seconds = [&](Clock::time_point t) {
        return std::chrono::duration<double>(t - job.arrival_).count();
      };
      metrics_->ObserveLatency(seconds(job.started_),
                               slot.n_generated > 0 ? seconds(job.first_token_) : -1, seconds(now));
    }
  }
  using Seconds = std::chrono::duration<double>;
  const bool generated = slot.n_generated > 0;
  job.Finish(reason, std::move(error), slot.stop_string,
             generated ? Seconds(job.first_token_ - job.started_).count() : 0,
             generated ? Seconds(now - job.first_token_).count() : 0);
  slot = Slot{};
  std::lock_guard lock(mu_);
  --busy_;
}

void Scheduler::Step() {
  // The batch: generating slots first (one token each), then prefill in admission order.
  std::vector<BatchToken> batch;
  std::vector<uint32_t> owner;  // (batch) slot of each token
  uint32_t budget = options_.step_tokens;
  for (uint32_t s = 0; s < slots_.size(); ++s) {
    Slot& slot = slots_[s];
    if (slot.job == nullptr || slot.pending < 0) continue;
    batch.push_back({slot.pending, s, slot.n_past, true});
    owner.push_back(s);
    --budget;
  }
  std::vector<uint32_t> prefill;
  for (uint32_t s = 0; s < slots_.size(); ++s) {
    const Slot& slot = slots_[s];
    if (slot.job != nullptr && slot.n_fed < slot.job->spec().prompt.size()) prefill.push_back(s);
  }
  std::sort(prefill.begin(), prefill.end(),
            [&](uint32_t a, uint32_t b) { return slots_[a].order < slots_[b].order; });
  std::vector<uint32_t> fed(slots_.size(), 0);       // (n_slots) prompt tokens in this batch
  std::vector<int64_t> prompt_at(batch.size(), -1);  // (batch) prompt position; -1: generated
  uint32_t scored_rows = kScoredPromptRowsPerStep;
  for (uint32_t s : prefill) {
    Slot& slot = slots_[s];
    const std::vector<int32_t>& prompt = slot.job->spec().prompt;
    const bool scored = ScoresPrompt(slot.job->spec());
    uint32_t take = static_cast<uint32_t>(std::min<size_t>(budget, prompt.size() - slot.n_fed));
    if (scored) {
      take = std::min(take, scored_rows);
      scored_rows -= take;
    }
    for (uint32_t i = 0; i < take; ++i) {
      const size_t at = slot.n_fed + i;
      batch.push_back({prompt[at], s, slot.n_past + i, scored || at + 1 == prompt.size()});
      owner.push_back(s);
      prompt_at.push_back(static_cast<int64_t>(at));
    }
    fed[s] = take;
    budget -= take;
    if (budget == 0) break;
  }
  if (batch.empty()) return;

  const size_t n_vocab = ctx_.n_vocab();
  std::vector<float>& logits = step_logits_;
  std::vector<bool> failed(slots_.size(), false);
  const Clock::time_point step_start = Clock::now();
  Status status = ctx_.Decode(batch, &logits);
  const double step_seconds = std::chrono::duration<double>(Clock::now() - step_start).count();
  if (!status.ok()) {
    // Run each sequence of the step alone, so only those whose experts fail are failed.
    std::vector<uint32_t> seqs(owner);
    std::sort(seqs.begin(), seqs.end());
    seqs.erase(std::unique(seqs.begin(), seqs.end()), seqs.end());
    size_t n_out = 0;
    for (const BatchToken& b : batch) n_out += b.logits;
    logits.assign(n_out * n_vocab, 0.0f);
    for (uint32_t s : seqs) {
      std::vector<BatchToken> alone;
      std::vector<size_t> rows;  // output rows of its tokens in the full batch
      size_t row = 0;
      for (size_t i = 0; i < batch.size(); ++i) {
        if (owner[i] == s) {
          alone.push_back(batch[i]);
          if (batch[i].logits) rows.push_back(row);
        }
        row += batch[i].logits;
      }
      Status alone_status = seqs.size() == 1 ? status : Status::Ok();
      std::vector<float> alone_logits;
      if (alone_status.ok()) alone_status = ctx_.Decode(alone, &alone_logits);
      if (!alone_status.ok()) {
        failed[s] = true;
        Release(slots_[s], FinishReason::kError, alone_status);
        continue;
      }
      for (size_t k = 0; k < rows.size(); ++k) {
        std::copy_n(alone_logits.begin() + k * n_vocab, n_vocab,
                    logits.begin() + rows[k] * n_vocab);
      }
    }
  }

  // Advance the slots by what they evaluated, then sample where logits came back (a slot
  // samples from at most one row: its generated token's or its prompt's last; a scored
  // prompt's other rows give its entries, in position order).
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!failed[owner[i]]) ++slots_[owner[i]].n_past;
  }
  for (uint32_t s = 0; s < slots_.size(); ++s) {
    if (failed[s] || slots_[s].job == nullptr) continue;
    slots_[s].n_fed += fed[s];
    if (fed[s] == 0) slots_[s].pending = -1;  // it was in the batch, or it had no token
  }
  size_t row = 0;
  uint64_t sampled = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!batch[i].logits) continue;
    if (!failed[owner[i]]) {
      Slot& slot = slots_[owner[i]];
      const auto row_logits = std::span<const float>(logits).subspan(row * n_vocab, n_vocab);
      const size_t n_prompt = slot.job->spec().prompt.size();
      if (prompt_at[i] >= 0 && static_cast<size_t>(prompt_at[i]) + 1 < n_prompt) {
        ScorePrompt(slot, static_cast<size_t>(prompt_at[i]), row_logits);
      } else {
        Sample(slot, row_logits);
        ++sampled;
      }
    }
    ++row;
  }

  CopyActivity(&activity_next_);
  std::lock_guard lock(mu_);
  std::swap(activity_, activity_next_);  // the old snapshot's buffers serve the next copy
  ++gauges_.steps;
  gauges_.step_tokens += batch.size();
  const uint64_t generated =
      static_cast<uint64_t>(std::count(prompt_at.begin(), prompt_at.end(), int64_t{-1}));
  const int kind = generated == batch.size() ? 0 : 1;  // decode only, or mixed
  gauges_.step_seconds[kind] += step_seconds;
  gauges_.step_generated[kind] += generated;
  gauges_.sampled_tokens += sampled;
  gauges_.slots_busy = busy_;
  gauges_.tier = ctx_.expert_store().stats();
  if (const GpuExpertTier* gpu = ctx_.gpu_experts()) gauges_.device.expert_runs = gpu->runs();
}

void Scheduler::ScorePrompt(Slot& slot, size_t at, std::span<const float> logits) {
  const GenerationSpec& spec = slot.job->spec();
  TokenLogprob e = ScoreToken(logits, spec.prompt[at + 1], spec.logprobs);
  e.prompt = true;
  std::vector<TokenLogprob> one;
  one.push_back(std::move(e));
  slot.job->Emit("", std::move(one), static_cast<int64_t>(at + 1), 0);
}

void Scheduler::Sample(Slot& slot, std::span<const float> logits) {
  const GenerationSpec& spec = slot.job->spec();
  const int64_t n_prompt = static_cast<int64_t>(spec.prompt.size());
  const Tokenizer& tok = *ctx_.model().tokenizer();
  if (spec.max_tokens == 0) {  // the prompt only (scored, or just evaluated)
    slot.job->Emit("", {}, n_prompt, 0);
    Release(slot, FinishReason::kLength, Status::Ok());
    return;
  }
  grammar::GrammarFilter* grammar = slot.grammar ? &*slot.grammar : nullptr;
  const int32_t id = slot.sampler->Sample(logits, slot.history, grammar);
  if (id < 0 && !grammar->IsComplete()) {  // -1 only under a grammar
    Release(slot, FinishReason::kError,
            InvalidArgument("grammar: no token of the vocabulary can continue the output "
                            "after {} generated tokens",
                            slot.n_generated));
    return;
  }
  // Under a grammar an end-of-generation token ends the output even with ignore_eos: it is
  // allowed only once the text is a whole sentence. A whole sentence that nothing can
  // follow, in a vocabulary without an end token, ends it too (id -1).
  const bool eog =
      id < 0 || (tok.IsEndOfGeneration(id) && (!spec.ignore_eos || grammar != nullptr));
  if (id >= 0) {
    if (grammar != nullptr) {
      const bool accepted = grammar->Accept(id);
      MT_CHECK_MSG(accepted, "the sampler took a token the grammar refuses");
    }
    if (spec.logprobs >= 0) {
      TokenLogprob e = ScoreToken(logits, id, spec.logprobs);
      e.text_byte = slot.generated_bytes;
      // An end-of-generation token adds no text.
      if (!eog) slot.generated_bytes += static_cast<int64_t>(tok.TokenPiece(id, false).size());
      slot.held.emplace_back(slot.generated_bytes, std::move(e));
    }
    if (slot.n_generated == 0) slot.job->first_token_ = Clock::now();
    ++slot.n_generated;
    slot.history.push_back(id);
  }
  bool stopped = false;
  std::string text;
  FinishReason reason = FinishReason::kNone;
  if (eog) {
    reason = FinishReason::kStop;
  } else {
    text = slot.stops->Push(slot.decoder->Push(id), &stopped);
    if (stopped) {
      reason = FinishReason::kStop;
    } else if (spec.max_tokens >= 0 && slot.n_generated >= spec.max_tokens) {
      reason = FinishReason::kLength;
    } else if (spec.max_predict_ms > 0 && text.find('\n') != std::string::npos &&
               std::chrono::duration<double, std::milli>(Clock::now() - slot.job->first_token_)
                       .count() > spec.max_predict_ms) {
      reason = FinishReason::kLength;  // a time limit, stopping at a line's end
    } else if (slot.n_past >= ctx_.n_ctx()) {
      reason = FinishReason::kLength;  // no position left for the next token
    }
  }
  if (reason != FinishReason::kNone && !stopped) {
    text += slot.stops->Push(slot.decoder->Flush(), &stopped);
    if (!stopped) text += slot.stops->Flush();
  }
  slot.stop_string = stopped;
  std::vector<TokenLogprob> released;
  if (spec.logprobs >= 0) {
    // Out go the entries whose bytes have all gone out; at the end, all of them, except
    // after a stop string: those of tokens that start inside or after it are dropped.
    slot.sent_bytes += static_cast<int64_t>(text.size());
    const bool all = reason != FinishReason::kNone && !stopped;
    while (!slot.held.empty()) {
      auto& [end, e] = slot.held.front();
      if (!all && end > slot.sent_bytes && !(stopped && e.text_byte < slot.sent_bytes)) break;
      released.push_back(std::move(e));
      slot.held.pop_front();
    }
  }
  slot.job->Emit(text, std::move(released), n_prompt, slot.n_generated);
  if (reason != FinishReason::kNone) {
    Release(slot, reason, Status::Ok());
    return;
  }
  slot.pending = id;
}

}  // namespace mt::server
