#include "server/scheduler.h"

#include <algorithm>
#include <optional>

#include "base/check.h"
#include "server/stop_matcher.h"
#include "tokenizer/tokenizer.h"

namespace mt::server {

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "";
}

Job::Job(GenerationSpec spec) : spec_(std::move(spec)) {}

bool Job::Wait(std::chrono::milliseconds timeout, JobUpdate* out) {
  std::unique_lock lock(mu_);
  const bool got = cv_.wait_for(lock, timeout, [&] { return changed_; });
  std::string text = std::move(text_);
  text_.clear();
  *out = state_;
  out->text = std::move(text);
  changed_ = false;
  return got;
}

void Job::Cancel() { cancel_.store(true, std::memory_order_relaxed); }

void Job::Emit(std::string_view text, int64_t prompt_tokens, int64_t completion_tokens) {
  {
    std::lock_guard lock(mu_);
    text_.append(text);
    state_.prompt_tokens = prompt_tokens;
    state_.completion_tokens = completion_tokens;
    changed_ = true;
  }
  cv_.notify_all();
}

void Job::Finish(FinishReason reason, Status error) {
  {
    std::lock_guard lock(mu_);
    state_.finished = true;
    state_.reason = reason;
    state_.error = std::move(error);
    changed_ = true;
  }
  cv_.notify_all();
}

// One sequence of the Context and the job that runs in it.
struct Scheduler::Slot {
  std::shared_ptr<Job> job;  // null: free
  uint64_t order = 0;        // admission number
  uint32_t n_past = 0;       // positions filled in this slot's KV cache
  size_t n_fed = 0;          // prompt tokens evaluated
  int32_t pending = -1;      // sampled token to evaluate next step; -1: none
  std::vector<int32_t> history;  // (n_prompt + generated) for the repetition penalty
  std::optional<Sampler> sampler;
  std::optional<StreamDecoder> decoder;
  std::optional<StopMatcher> stops;
  int64_t n_generated = 0;
};

Scheduler::Scheduler(Context& ctx, const SchedulerOptions& options, Metrics* metrics)
    : ctx_(ctx), options_(options), metrics_(metrics), slots_(options.n_slots) {
  MT_CHECK(options.n_slots >= 1);
  MT_CHECK(options.step_tokens >= options.n_slots);
  MT_CHECK(ctx.model().tokenizer() != nullptr);
  gauges_.slots_total = options.n_slots;
  gauges_.tier = ctx.expert_store().stats();
}

Scheduler::~Scheduler() { Shutdown(std::chrono::milliseconds(0)); }

void Scheduler::Start() {
  MT_CHECK(!thread_.joinable());
  thread_ = std::thread([this] { Loop(); });
}

Status Scheduler::Submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard lock(mu_);
    if (draining_) return Status(StatusCode::kCancelled, "the server is shutting down");
    if (queue_.size() >= options_.max_queue) {
      return Status(StatusCode::kResourceExhausted,
                    fmt::format("the server is busy: {} requests are waiting (--max-queue)",
                                queue_.size()));
    }
    queue_.push_back(std::move(job));
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

void Scheduler::Loop() {
  while (Admit()) Step();
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
    for (uint32_t s = 0; s < slots_.size() && !queue_.empty(); ++s) {
      Slot& slot = slots_[s];
      if (slot.job != nullptr) continue;
      const Tokenizer& tok = *ctx_.model().tokenizer();
      slot = Slot{};
      slot.job = std::move(queue_.front());
      queue_.pop_front();
      slot.order = admitted_++;
      slot.history = slot.job->spec().prompt;
      slot.sampler.emplace(slot.job->spec().sampling);
      slot.decoder.emplace(tok, /*special=*/false);
      slot.stops.emplace(slot.job->spec().stops);
      slot.job->started_ = Clock::now();
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

void Scheduler::Release(Slot& slot, FinishReason reason, Status error) {
  Job& job = *slot.job;
  const Clock::time_point now = Clock::now();
  if (metrics_ != nullptr) {
    metrics_->CountTokens(slot.n_fed, slot.n_generated);
    if (reason == FinishReason::kCancelled) metrics_->CountCancelled();
    if (reason == FinishReason::kError) metrics_->CountFailed();
    if (reason == FinishReason::kStop || reason == FinishReason::kLength) {
      auto seconds = [&](Clock::time_point t) {
        return std::chrono::duration<double>(t - job.arrival_).count();
      };
      metrics_->ObserveLatency(seconds(job.started_),
                               slot.n_generated > 0 ? seconds(job.first_token_) : -1,
                               seconds(now));
    }
  }
  job.Finish(reason, std::move(error));
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
  std::vector<uint32_t> fed(slots_.size(), 0);  // (n_slots) prompt tokens in this batch
  for (uint32_t s : prefill) {
    Slot& slot = slots_[s];
    const std::vector<int32_t>& prompt = slot.job->spec().prompt;
    const uint32_t take = static_cast<uint32_t>(std::min<size_t>(budget, prompt.size() - slot.n_fed));
    for (uint32_t i = 0; i < take; ++i) {
      const size_t at = slot.n_fed + i;
      batch.push_back({prompt[at], s, slot.n_past + i, at + 1 == prompt.size()});
      owner.push_back(s);
    }
    fed[s] = take;
    budget -= take;
    if (budget == 0) break;
  }
  if (batch.empty()) return;

  const size_t n_vocab = ctx_.n_vocab();
  std::vector<float>& logits = step_logits_;
  std::vector<bool> failed(slots_.size(), false);
  Status status = ctx_.Decode(batch, &logits);
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
  // gets at most one row: its generated token's or its prompt's last).
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!failed[owner[i]]) ++slots_[owner[i]].n_past;
  }
  for (uint32_t s = 0; s < slots_.size(); ++s) {
    if (failed[s] || slots_[s].job == nullptr) continue;
    slots_[s].n_fed += fed[s];
    if (fed[s] == 0) slots_[s].pending = -1;  // it was in the batch, or it had no token
  }
  size_t row = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!batch[i].logits) continue;
    if (!failed[owner[i]]) {
      Sample(slots_[owner[i]], std::span<const float>(logits).subspan(row * n_vocab, n_vocab));
    }
    ++row;
  }

  std::lock_guard lock(mu_);
  ++gauges_.steps;
  gauges_.step_tokens += batch.size();
  gauges_.slots_busy = busy_;
  gauges_.tier = ctx_.expert_store().stats();
}

void Scheduler::Sample(Slot& slot, std::span<const float> logits) {
  const GenerationSpec& spec = slot.job->spec();
  const int64_t n_prompt = static_cast<int64_t>(spec.prompt.size());
  const Tokenizer& tok = *ctx_.model().tokenizer();
  const int32_t id = slot.sampler->Sample(logits, slot.history);
  if (slot.n_generated == 0) slot.job->first_token_ = Clock::now();
  ++slot.n_generated;
  slot.history.push_back(id);
  bool stopped = false;
  std::string text;
  FinishReason reason = FinishReason::kNone;
  if (!spec.ignore_eos && tok.IsEndOfGeneration(id)) {
    reason = FinishReason::kStop;
  } else {
    text = slot.stops->Push(slot.decoder->Push(id), &stopped);
    if (stopped) {
      reason = FinishReason::kStop;
    } else if (spec.max_tokens >= 0 && slot.n_generated >= spec.max_tokens) {
      reason = FinishReason::kLength;
    } else if (slot.n_past >= ctx_.n_ctx()) {
      reason = FinishReason::kLength;  // no position left for the next token
    }
  }
  if (reason != FinishReason::kNone && !stopped) {
    text += slot.stops->Push(slot.decoder->Flush(), &stopped);
    if (!stopped) text += slot.stops->Flush();
  }
  slot.job->Emit(text, n_prompt, slot.n_generated);
  if (reason != FinishReason::kNone) {
    Release(slot, reason, Status::Ok());
    return;
  }
  slot.pending = id;
}

}  // namespace mt::server
