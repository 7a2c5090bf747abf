// The scheduler on a synthetic olmoe-tiny: every job of a continuous batch gets exactly the
// text that the same request gets alone, computed independently here with single-sequence
// Context::Eval (not Decode), the Sampler and a StreamDecoder; cancel frees the slot; a full
// queue is refused; an expert that cannot be read fails only the jobs that need it.
#include "server/scheduler.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <set>

#include "engine/context.h"
#include "engine/model.h"
#include "grammar/grammar.h"
#include "io/fault_injecting_engine.h"
#include "synth/synth_test_util.h"
#include "tokenizer/tokenizer.h"

namespace mt::server {
namespace {

using testing_synth::SynthModels;

using namespace std::chrono_literals;

struct Outcome {
  std::string text;
  FinishReason reason = FinishReason::kNone;
  int64_t completion_tokens = 0;
  Status error;
  bool stop_string = false;
  double prompt_seconds = 0, generation_seconds = 0;
};

class SchedulerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    models_ = std::make_unique<SynthModels>("scheduler-test", 5);
    auto m = Model::Load(models_->Get("olmoe-tiny", "q4_k_m"), LoadOptions{});
    ASSERT_TRUE(m.ok()) << m.status().message();
    model_ = std::move(m.value()).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
    models_.reset();
  }

  static const Tokenizer& Tok() { return *model_->tokenizer(); }

  static std::unique_ptr<Context> MakeContext(uint32_t n_seq, uint32_t n_ctx,
                                              StorageOptions storage = Resident()) {
    ContextOptions o;
    o.n_ctx = n_ctx;
    o.n_seq_max = n_seq;
    o.n_batch = 64;
    o.n_threads = 2;
    o.storage = std::move(storage);
    auto ctx = Context::Create(*model_, o);
    EXPECT_TRUE(ctx.ok()) << ctx.status().message();
    return std::move(ctx.value());
  }

  static StorageOptions Resident() {
    StorageOptions s;
    s.mode = MoeStorage::kResident;
    return s;
  }

  static std::vector<int32_t> Prompt(const std::string& text) {
    auto ids = Tok().Encode(text, Tok().add_bos(), false);
    EXPECT_TRUE(ids.ok());
    return ids.value();
  }

  static GenerationSpec Spec(const std::string& prompt, int64_t max_tokens, float temp = 0,
                             uint64_t seed = 0) {
    GenerationSpec s;
    s.prompt = Prompt(prompt);
    s.max_tokens = max_tokens;
    s.sampling.temperature = temp;
    s.sampling.seed = seed;
    s.ignore_eos = true;
    return s;
  }

  // What the request gives alone: one sequence through Eval, token by token.
  static Outcome Alone(const GenerationSpec& spec, uint32_t n_ctx, Context* ctx = nullptr) {
    std::unique_ptr<Context> own;
    if (ctx == nullptr) {
      own = MakeContext(1, n_ctx);
      ctx = own.get();
    }
    ctx->ClearKv();
    Sampler sampler(spec.sampling);
    std::optional<grammar::GrammarFilter> filter;
    if (spec.grammar) filter.emplace(spec.grammar, std::make_shared<grammar::GrammarVocab>(Tok()));
    StreamDecoder decoder(Tok(), /*special=*/false);
    std::vector<int32_t> history = spec.prompt;
    std::vector<float> logits;
    Outcome out;
    Status s = ctx->Eval(spec.prompt, LogitsFor::kLast, &logits);
    for (;;) {
      if (!s.ok()) {
        out.reason = FinishReason::kError;
        out.error = s;
        return out;
      }
      const int32_t id = sampler.Sample(logits, history, filter ? &*filter : nullptr);
      if (id < 0) {  // a grammar that nothing can follow, and no end token
        out.reason = filter->IsComplete() ? FinishReason::kStop : FinishReason::kError;
        break;
      }
      if (filter) EXPECT_TRUE(filter->Accept(id));
      history.push_back(id);
      ++out.completion_tokens;
      if ((!spec.ignore_eos || filter) && Tok().IsEndOfGeneration(id)) {
        out.reason = FinishReason::kStop;
        break;
      }
      out.text += decoder.Push(id);
      if ((spec.max_tokens >= 0 && out.completion_tokens >= spec.max_tokens) ||
          ctx->n_past() >= ctx->n_ctx()) {
        out.reason = FinishReason::kLength;
        break;
      }
      const int32_t next[1] = {id};
      s = ctx->Eval(next, LogitsFor::kLast, &logits);
    }
    out.text += decoder.Flush();
    return out;
  }

  static Outcome WaitFor(Job& job) {
    Outcome out;
    JobUpdate u;
    for (int i = 0; i < 600 && !u.finished; ++i) {
      job.Wait(100ms, &u);
      out.text += u.text;
    }
    EXPECT_TRUE(u.finished) << "job did not finish in 60 s";
    out.reason = u.reason;
    out.completion_tokens = u.completion_tokens;
    out.error = u.error;
    out.stop_string = u.stop_string;
    out.prompt_seconds = u.prompt_seconds;
    out.generation_seconds = u.generation_seconds;
    return out;
  }

  static inline std::unique_ptr<SynthModels> models_;
  static inline Model* model_ = nullptr;
};

const std::vector<std::string> kPrompts = {
    "The quick brown fox",
    "Hi",
    "A much longer prompt that needs several prefill chunks when the step is small",
    "Mixture of experts",
    "0 1 2 3 4 5 6 7 8 9",
    "Continuous batching joins new requests at step boundaries",
    "x",
};

TEST_F(SchedulerTest, BatchedJobsGetExactlyTheirTextAlone) {
  constexpr uint32_t kCtx = 96;
  auto ctx = MakeContext(4, kCtx);
  // Small steps: prompts are fed in chunks beside other slots' decode tokens, and with 4
  // slots for 7 jobs, later jobs join as earlier ones finish.
  Scheduler sched(*ctx, SchedulerOptions{4, 8, 16}, nullptr);
  sched.Start();
  std::vector<GenerationSpec> specs;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    // Mixed greedy and seeded sampling, different lengths.
    specs.push_back(
        Spec(kPrompts[i], 6 + 3 * static_cast<int64_t>(i), i % 2 ? 0.9f : 0.0f, 1000 + i));
  }
  std::vector<std::shared_ptr<Job>> jobs;
  for (const GenerationSpec& s : specs) {
    jobs.push_back(std::make_shared<Job>(s));
    ASSERT_TRUE(sched.Submit(jobs.back()).ok());
  }
  std::vector<Outcome> got;
  for (auto& job : jobs) got.push_back(WaitFor(*job));
  const SchedulerGauges g = sched.Gauges();
  sched.Shutdown(1s);
  auto solo = MakeContext(1, kCtx);
  for (size_t i = 0; i < specs.size(); ++i) {
    const Outcome want = Alone(specs[i], kCtx, solo.get());
    EXPECT_EQ(got[i].reason, FinishReason::kLength) << i;
    EXPECT_EQ(got[i].completion_tokens, specs[i].max_tokens) << i;
    EXPECT_EQ(want.completion_tokens, specs[i].max_tokens) << i;
    EXPECT_EQ(got[i].text, want.text) << "job " << i << " (" << kPrompts[i] << ")";
  }
  // Batching happened: fewer steps than tokens evaluated.
  EXPECT_GT(g.steps, 0u);
  EXPECT_GT(g.step_tokens, g.steps * 2);
  // Every generated token but each job's last went back in through a step, decode-only or
  // mixed with prompt tokens, and both kinds ran (read once the loop has stopped).
  const SchedulerGauges end = sched.Gauges();
  uint64_t fed_back = 0;
  for (const GenerationSpec& s : specs) fed_back += static_cast<uint64_t>(s.max_tokens) - 1;
  EXPECT_EQ(end.step_generated[0] + end.step_generated[1], fed_back);
  EXPECT_GT(end.step_generated[0], 0u);
  EXPECT_GT(end.step_generated[1], 0u);
  EXPECT_GT(end.step_seconds[0], 0.0);
  EXPECT_GT(end.step_seconds[1], 0.0);
}

TEST_F(SchedulerTest, GrammarJobsFollowTheirGrammarInABatch) {
  constexpr uint32_t kCtx = 96;
  auto g =
      grammar::Grammar::Parse(R"(root ::= "{\"n\": " [0-9]{1,3} ", \"w\": \"" [a-z ]{1,8} "\"}")");
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto ctx = MakeContext(4, kCtx);
  Scheduler sched(*ctx, SchedulerOptions{4, 16, 16}, nullptr);
  sched.Start();
  std::vector<GenerationSpec> specs;
  for (size_t i = 0; i < 6; ++i) {
    // Greedy and sampled, with and without the grammar, side by side in the batch.
    specs.push_back(Spec(kPrompts[i], 40, i % 2 ? 0.9f : 0.0f, 2000 + i));
    if (i < 4) specs.back().grammar = *g;
  }
  std::vector<std::shared_ptr<Job>> jobs;
  for (const GenerationSpec& s : specs) jobs.push_back(std::make_shared<Job>(s));
  ASSERT_TRUE(sched.SubmitAll(jobs).ok());
  std::vector<Outcome> got;
  for (auto& job : jobs) got.push_back(WaitFor(*job));
  sched.Shutdown(1s);
  auto solo = MakeContext(1, kCtx);
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(got[i].text, Alone(specs[i], kCtx, solo.get()).text) << i;
    if (specs[i].grammar == nullptr) {
      EXPECT_EQ(got[i].reason, FinishReason::kLength) << i;  // ignore_eos: runs to the limit
      continue;
    }
    // The grammar ends the output (ignore_eos notwithstanding), as a whole sentence.
    EXPECT_EQ(got[i].reason, FinishReason::kStop) << i << ": " << got[i].error.message();
    grammar::Matcher m(*g);
    EXPECT_TRUE(m.Accept(got[i].text) && m.IsComplete()) << i << ": " << got[i].text;
  }
}

TEST_F(SchedulerTest, GenerationEndsWhenTheContextIsFull) {
  constexpr uint32_t kCtx = 24;
  auto ctx = MakeContext(2, kCtx);
  Scheduler sched(*ctx, SchedulerOptions{2, 16, 4}, nullptr);
  sched.Start();
  GenerationSpec spec = Spec("The quick brown fox", -1);
  const int64_t n_prompt = static_cast<int64_t>(spec.prompt.size());
  auto job = std::make_shared<Job>(spec);
  ASSERT_TRUE(sched.Submit(job).ok());
  const Outcome got = WaitFor(*job);
  EXPECT_EQ(got.reason, FinishReason::kLength);
  // The prompt fills n_prompt positions; every sampled token but the last is evaluated.
  EXPECT_EQ(got.completion_tokens, kCtx - n_prompt + 1);
  EXPECT_EQ(got.text, Alone(spec, kCtx).text);
}

TEST_F(SchedulerTest, StopStringsCutTheText) {
  constexpr uint32_t kCtx = 64;
  GenerationSpec spec = Spec("Mixture of experts", 24);
  const Outcome full = Alone(spec, kCtx);
  ASSERT_GE(full.text.size(), 12u);
  // A stop string from the middle of the text: generation ends there, the stop string and
  // what follows are not sent.
  const std::string stop = full.text.substr(6, 3);
  spec.stops = {"never appears \x01", stop};
  auto ctx = MakeContext(1, kCtx);
  Scheduler sched(*ctx, SchedulerOptions{1, 16, 4}, nullptr);
  sched.Start();
  auto plain_job = std::make_shared<Job>(Spec("Mixture of experts", 24));
  ASSERT_TRUE(sched.Submit(plain_job).ok());
  const Outcome plain = WaitFor(*plain_job);
  EXPECT_EQ(plain.reason, FinishReason::kLength);
  EXPECT_FALSE(plain.stop_string);
  EXPECT_GT(plain.prompt_seconds, 0);  // timed: admission to the first token, then the rest
  EXPECT_GT(plain.generation_seconds, 0);
  auto job = std::make_shared<Job>(spec);
  ASSERT_TRUE(sched.Submit(job).ok());
  const Outcome got = WaitFor(*job);
  EXPECT_EQ(got.reason, FinishReason::kStop);
  EXPECT_TRUE(got.stop_string);  // what /infill reports as stop_type "word"
  EXPECT_EQ(got.text, full.text.substr(0, full.text.find(stop)));
  EXPECT_LT(got.completion_tokens, 24);
}

// llama-server's t_max_predict_ms: once generation has run that long, a token holding a newline
// ends it (as "limit"); without a newline it goes on.
TEST_F(SchedulerTest, APredictTimeLimitStopsAtANewline) {
  const int32_t newline = Tok().Encode("\n", false, false).value().at(0);
  const int32_t word = Tok().Encode("x", false, false).value().at(0);
  auto ctx = MakeContext(1, 64);
  Scheduler sched(*ctx, SchedulerOptions{1, 16, 4}, nullptr);
  sched.Start();
  auto run = [&](int32_t forced, double limit_ms) {
    GenerationSpec spec = Spec("Mixture of experts", 8);
    spec.sampling.logit_bias = {{forced, 100.0f}};  // every token is `forced`
    spec.ignore_eos = true;
    spec.max_predict_ms = limit_ms;
    auto job = std::make_shared<Job>(spec);
    EXPECT_TRUE(sched.Submit(job).ok());
    return WaitFor(*job);
  };
  const Outcome limited = run(newline, 1e-6);  // past the limit by the first token
  EXPECT_EQ(limited.reason, FinishReason::kLength);
  EXPECT_EQ(limited.completion_tokens, 1);
  EXPECT_EQ(limited.text, "\n");
  EXPECT_EQ(run(newline, 0).completion_tokens, 8);  // no limit
  EXPECT_EQ(run(word, 1e-6).completion_tokens, 8);  // no newline to stop at
}

TEST_F(SchedulerTest, CancelFreesTheSlotForTheNextJob) {
  constexpr uint32_t kCtx = 256;
  auto ctx = MakeContext(1, kCtx);
  Scheduler sched(*ctx, SchedulerOptions{1, 16, 4}, nullptr);
  sched.Start();
  auto long_job = std::make_shared<Job>(Spec("A long generation", 200));
  ASSERT_TRUE(sched.Submit(long_job).ok());
  JobUpdate u;
  while (!u.finished && u.completion_tokens < 3) long_job->Wait(100ms, &u);
  long_job->Cancel();
  const Outcome cancelled = WaitFor(*long_job);
  EXPECT_EQ(cancelled.reason, FinishReason::kCancelled);
  EXPECT_LT(cancelled.completion_tokens, 200);
  // The one slot (and its KV cache) serves the next job, which gets its own text.
  GenerationSpec next = Spec("Hi", 10);
  auto job = std::make_shared<Job>(next);
  ASSERT_TRUE(sched.Submit(job).ok());
  const Outcome got = WaitFor(*job);
  EXPECT_EQ(got.reason, FinishReason::kLength);
  EXPECT_EQ(got.text, Alone(next, kCtx).text);
  EXPECT_EQ(sched.Gauges().slots_busy, 0u);
}

TEST_F(SchedulerTest, AFullQueueIsRefusedAndShutdownDrains) {
  constexpr uint32_t kCtx = 256;
  auto ctx = MakeContext(1, kCtx);
  Scheduler sched(*ctx, SchedulerOptions{1, 16, /*max_queue=*/1}, nullptr);
  sched.Start();
  auto running = std::make_shared<Job>(Spec("Running", 40));
  ASSERT_TRUE(sched.Submit(running).ok());
  JobUpdate u;
  while (!u.finished && u.completion_tokens < 1) running->Wait(100ms, &u);  // in its slot
  auto queued = std::make_shared<Job>(Spec("Queued", 5));
  ASSERT_TRUE(sched.Submit(queued).ok());
  Status refused = sched.Submit(std::make_shared<Job>(Spec("Refused", 5)));
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused.message();
  // Draining lets both finish; nothing new is taken.
  sched.Shutdown(60s);
  EXPECT_EQ(WaitFor(*running).reason, FinishReason::kLength);
  EXPECT_EQ(WaitFor(*queued).reason, FinishReason::kLength);
  EXPECT_EQ(sched.Submit(std::make_shared<Job>(Spec("Late", 5))).code(), StatusCode::kCancelled);
  EXPECT_FALSE(sched.accepting());
}

// The jobs of one request (a batch of prompts, n choices) enter all or none: a batch larger
// than the queue enters an idle scheduler; while the queue is full, none of a batch does.
TEST_F(SchedulerTest, ABatchEntersWholeOrNotAtAll) {
  constexpr uint32_t kCtx = 64;
  auto ctx = MakeContext(1, kCtx);
  Scheduler sched(*ctx, SchedulerOptions{1, 16, /*max_queue=*/2}, nullptr);
  std::vector<std::shared_ptr<Job>> batch;
  for (int i = 0; i < 5; ++i) batch.push_back(std::make_shared<Job>(Spec(kPrompts[i], 2)));
  ASSERT_TRUE(sched.SubmitAll(batch).ok());  // not started: all five wait
  std::vector<std::shared_ptr<Job>> more = {std::make_shared<Job>(Spec("x", 2)),
                                            std::make_shared<Job>(Spec("y", 2))};
  EXPECT_EQ(sched.SubmitAll(more).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(sched.Gauges().queue_depth, 5u);
  sched.Start();
  for (int i = 0; i < 5; ++i) {
    const Outcome got = WaitFor(*batch[i]);
    EXPECT_EQ(got.reason, FinishReason::kLength) << i;
    EXPECT_EQ(got.text, Alone(Spec(kPrompts[i], 2), kCtx).text) << i;
  }
  sched.Shutdown(1s);
}

TEST_F(SchedulerTest, ShutdownWithoutDrainCancels) {
  auto ctx = MakeContext(2, 512);
  Scheduler sched(*ctx, SchedulerOptions{2, 16, 8}, nullptr);
  sched.Start();
  std::vector<std::shared_ptr<Job>> jobs;
  for (int i = 0; i < 4; ++i) {
    jobs.push_back(std::make_shared<Job>(Spec("Endless " + std::to_string(i), 400)));
    ASSERT_TRUE(sched.Submit(jobs.back()).ok());
  }
  JobUpdate u;
  while (!u.finished && u.completion_tokens < 1) jobs[0]->Wait(100ms, &u);
  sched.Shutdown(0ms);
  for (auto& job : jobs) EXPECT_EQ(WaitFor(*job).reason, FinishReason::kCancelled);
}

// An expert whose reads always fail: a job fails in the batch exactly when it fails alone
// (it needs that expert), and every other job gets its own text.
TEST_F(SchedulerTest, AnUnreadableExpertFailsOnlyTheJobsThatNeedIt) {
  constexpr uint32_t kCtx = 64;
  // Find the byte range of one expert read: record the reads of a fault-free run.
  auto seen = std::make_shared<std::vector<std::pair<uint64_t, uint64_t>>>();
  auto faulty_storage = [](std::function<bool(const ReadOp&)> match) {
    StorageOptions s;
    s.mode = MoeStorage::kStream;
    s.prefetch = false;  // only demanded reads, so a job fails only on what it needs
    s.expert_cache_pct = 100;
    FaultPlan plan;
    FaultRule rule;
    rule.match = std::move(match);
    plan.rules.push_back(rule);
    s.make_io = [plan]() -> Result<std::unique_ptr<IoEngine>> {
      std::unique_ptr<IoEngine> inner = MT_TRY(CreatePreadEngine(2));
      return std::unique_ptr<IoEngine>(
          std::make_unique<FaultInjectingEngine>(std::move(inner), plan));
    };
    return s;
  };
  {
    auto probe = MakeContext(1, kCtx, faulty_storage([seen](const ReadOp& op) {
                               seen->push_back({op.offset, op.length});
                               return false;
                             }));
    std::vector<float> logits;
    ASSERT_TRUE(probe->Eval(Prompt("x"), LogitsFor::kLast, &logits).ok());
  }
  ASSERT_FALSE(seen->empty());
  auto overlaps = [](uint64_t offset, uint64_t length) {
    return [offset, length](const ReadOp& op) {
      return op.offset < offset + length && offset < op.offset + op.length;
    };
  };
  std::vector<GenerationSpec> specs;
  for (const std::string& p : kPrompts) specs.push_back(Spec(p, 2));
  // Pick an expert tensor that some jobs need and some do not, judged alone, each job on a
  // fresh faulty context.
  std::function<bool(const ReadOp&)> bad;
  std::vector<Outcome> want;
  for (size_t c = 0; c < seen->size() && !bad; c += 3) {  // gate, up, down of an expert
    auto match = overlaps((*seen)[c].first, (*seen)[c].second);
    want.clear();
    int n_failed = 0;
    for (const GenerationSpec& s : specs) {
      auto solo = MakeContext(1, kCtx, faulty_storage(match));
      want.push_back(Alone(s, kCtx, solo.get()));
      n_failed += want.back().reason == FinishReason::kError;
    }
    if (n_failed > 0 && n_failed < static_cast<int>(specs.size())) bad = match;
  }
  ASSERT_TRUE(bad) << "no expert is needed by some jobs and not by others";

  auto ctx = MakeContext(4, kCtx, faulty_storage(bad));
  Scheduler sched(*ctx, SchedulerOptions{4, 64, 16}, nullptr);
  sched.Start();
  std::vector<std::shared_ptr<Job>> jobs;
  for (const GenerationSpec& s : specs) {
    jobs.push_back(std::make_shared<Job>(s));
    ASSERT_TRUE(sched.Submit(jobs.back()).ok());
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Outcome got = WaitFor(*jobs[i]);
    ASSERT_EQ(got.reason, want[i].reason) << "job " << i << ": " << got.error.message();
    if (got.reason == FinishReason::kError) {
      EXPECT_EQ(got.error.code(), StatusCode::kIoError);
      EXPECT_NE(got.error.message().find(" expert "), std::string::npos) << got.error.message();
    } else {
      EXPECT_EQ(got.text, want[i].text) << i;
    }
  }
  // The server goes on serving: a job that needs no broken expert still runs.
  for (size_t i = 0; i < specs.size(); ++i) {
    if (want[i].reason != FinishReason::kLength) continue;
    auto again = std::make_shared<Job>(specs[i]);
    ASSERT_TRUE(sched.Submit(again).ok());
    EXPECT_EQ(WaitFor(*again).text, want[i].text);
    break;
  }
}

// A prompt that starts with what a slot's KV cache holds (a conversation's next turn) reuses
// it: fewer tokens evaluated, the same text as evaluating everything (greedy or seeded);
// cache_prompt false and scored prompts evaluate everything.
TEST_F(SchedulerTest, APromptSharingAPrefixReusesTheSlotsCache) {
  constexpr uint32_t kCtx = 128;
  auto ctx = MakeContext(1, kCtx);
  Scheduler sched(*ctx, SchedulerOptions{1, 16, 8}, nullptr);
  sched.Start();
  auto run = [&](const GenerationSpec& spec, JobUpdate* last) {
    auto job = std::make_shared<Job>(spec);
    EXPECT_TRUE(sched.Submit(job).ok());
    Outcome out;
    for (int i = 0; i < 600 && !last->finished; ++i) {
      job->Wait(100ms, last);
      out.text += last->text;
    }
    out.reason = last->reason;
    return out;
  };
  GenerationSpec first = Spec("The quick brown fox", 8);
  JobUpdate u1;
  const Outcome a = run(first, &u1);
  EXPECT_EQ(u1.cached_tokens, 0);
  // The next turn: the first prompt, its answer, and more. The slot holds the prompt and all
  // but the last generated token.
  GenerationSpec next = Spec("The quick brown fox" + a.text + " jumps over", 6, 0.9f, 77);
  const size_t n_first = first.prompt.size();
  JobUpdate u2;
  const Outcome b = run(next, &u2);
  EXPECT_GE(u2.cached_tokens, static_cast<int64_t>(n_first));
  EXPECT_LT(u2.cached_tokens, static_cast<int64_t>(next.prompt.size()));
  // The same request again: all but its last prompt token come from the cache.
  JobUpdate u3;
  const Outcome again = run(next, &u3);
  EXPECT_EQ(u3.cached_tokens, static_cast<int64_t>(next.prompt.size()) - 1);
  GenerationSpec uncached = next;
  uncached.cache_prompt = false;
  JobUpdate u4;
  const Outcome full = run(uncached, &u4);
  EXPECT_EQ(u4.cached_tokens, 0);
  GenerationSpec scored = next;
  scored.logprobs = 0;
  scored.prompt_logprobs = true;
  JobUpdate u5;
  run(scored, &u5);
  EXPECT_EQ(u5.cached_tokens, 0);
  const SchedulerGauges g = sched.Gauges();
  sched.Shutdown(1s);
  EXPECT_EQ(g.cached_tokens, static_cast<uint64_t>(u2.cached_tokens + u3.cached_tokens));
  const Outcome want = Alone(next, kCtx);
  EXPECT_EQ(b.text, want.text);
  EXPECT_EQ(again.text, want.text);
  EXPECT_EQ(full.text, want.text);
  EXPECT_EQ(a.text, Alone(first, kCtx).text);
}

// The log-softmax of `logits` at `id`, and the top_n ids by logit (ties: the lower id), in
// double precision: the reference for TokenLogprob.
struct Scored {
  float logprob;
  std::vector<int32_t> top;
};
Scored Reference(std::span<const float> logits, int32_t id, int top_n) {
  double max = -1e300, sum = 0;
  for (float l : logits) max = std::max<double>(max, l);
  for (float l : logits) sum += std::exp(l - max);
  std::vector<int32_t> order(logits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  order.resize(top_n);
  return {static_cast<float>(logits[id] - max - std::log(sum)), order};
}

void ExpectEntry(const TokenLogprob& got, int32_t id, std::span<const float> logits, int top_n,
                 const std::string& what) {
  const Scored want = Reference(logits, id, top_n);
  EXPECT_EQ(got.id, id) << what;
  EXPECT_NEAR(got.logprob, want.logprob, 1e-4) << what;
  ASSERT_EQ(got.top.size(), want.top.size()) << what;
  for (size_t k = 0; k < want.top.size(); ++k) {
    EXPECT_EQ(got.top[k].first, want.top[k]) << what << " alternative " << k;
    EXPECT_NEAR(got.top[k].second, Reference(logits, want.top[k], 0).logprob, 1e-4) << what;
  }
  if (!want.top.empty()) EXPECT_GE(got.top[0].second, got.logprob) << what;
}

// Logprobs: each generated token's entry holds the model's log-softmax at that token and its
// most likely alternatives (checked against single-sequence Eval logits, while other jobs
// share the steps); entries go out with their text, a stop string drops those after it; a
// scored prompt gets one entry per token, the first without a value.
TEST_F(SchedulerTest, LogprobsFollowTheTextAndTheModel) {
  constexpr uint32_t kCtx = 96;
  constexpr int kTop = 3;
  GenerationSpec plain = Spec("The quick brown fox", 10);
  plain.logprobs = kTop;
  GenerationSpec scored = Spec(kPrompts[2], 2);  // several prefill chunks at 8 tokens a step
  scored.logprobs = 1;
  scored.prompt_logprobs = true;
  GenerationSpec only_prompt = Spec("Mixture of experts", 0);
  only_prompt.logprobs = 0;
  only_prompt.prompt_logprobs = true;
  GenerationSpec stopped = Spec("Continuous batching", 24);
  stopped.logprobs = 0;
  const Outcome full = Alone(stopped, kCtx);
  ASSERT_GE(full.text.size(), 12u);
  const std::string stop = full.text.substr(7, 3);
  stopped.stops = {stop};

  auto ctx = MakeContext(4, kCtx);
  Scheduler sched(*ctx, SchedulerOptions{4, 8, 16}, nullptr);
  sched.Start();
  std::vector<GenerationSpec> specs = {plain, scored, only_prompt, stopped};
  std::vector<std::shared_ptr<Job>> jobs;
  for (const GenerationSpec& spec : specs) {
    jobs.push_back(std::make_shared<Job>(spec));
    ASSERT_TRUE(sched.Submit(jobs.back()).ok());
  }
  std::vector<std::string> texts(jobs.size());
  std::vector<std::vector<TokenLogprob>> entries(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    JobUpdate u;
    for (int i = 0; i < 600 && !u.finished; ++i) {
      jobs[j]->Wait(100ms, &u);
      texts[j] += u.text;
      // Released with their text: an update never holds an entry whose bytes are not out.
      std::string pieces;
      for (const TokenLogprob& e : entries[j]) {
        if (!e.prompt) pieces += Tok().TokenPiece(e.id, false);
      }
      for (TokenLogprob& e : u.logprobs) {
        if (!e.prompt && specs[j].stops.empty()) {
          pieces += Tok().TokenPiece(e.id, false);
          EXPECT_LE(pieces.size(), texts[j].size()) << "job " << j;
        }
        entries[j].push_back(std::move(e));
      }
    }
    ASSERT_TRUE(u.finished) << "job " << j;
  }
  sched.Shutdown(1s);

  auto solo = MakeContext(1, kCtx);
  std::vector<float> logits;
  const size_t n_vocab = solo->n_vocab();
  // Generated tokens, replayed alone (greedy: the entry ids are the generated tokens).
  for (size_t j : {size_t{0}, size_t{1}, size_t{3}}) {
    const GenerationSpec& spec = specs[j];
    std::vector<TokenLogprob> gen;
    for (const TokenLogprob& e : entries[j]) {
      if (!e.prompt) gen.push_back(e);
    }
    solo->ClearKv();
    ASSERT_TRUE(solo->Eval(spec.prompt, LogitsFor::kLast, &logits).ok());
    std::string pieces;
    for (size_t t = 0; t < gen.size(); ++t) {
      const int32_t id = gen[t].id;
      EXPECT_EQ(gen[t].text_byte, static_cast<int64_t>(pieces.size()));
      ExpectEntry(gen[t], id, logits, spec.logprobs, fmt::format("job {} token {}", j, t));
      pieces += Tok().TokenPiece(id, false);
      const int32_t next[1] = {id};
      ASSERT_TRUE(solo->Eval(next, LogitsFor::kLast, &logits).ok());
    }
    if (spec.stops.empty()) {
      EXPECT_EQ(static_cast<int64_t>(gen.size()), spec.max_tokens) << j;
      EXPECT_EQ(pieces, texts[j]) << j;
    } else {
      // Every token that starts before the stop string, and none after.
      EXPECT_EQ(texts[j], full.text.substr(0, full.text.find(stop)));
      ASSERT_FALSE(gen.empty());
      EXPECT_LT(gen.back().text_byte, static_cast<int64_t>(texts[j].size()));
      EXPECT_GE(pieces.size(), texts[j].size());
    }
  }
  // Scored prompts: entry i from the logits of position i - 1.
  for (size_t j : {size_t{1}, size_t{2}}) {
    const std::vector<int32_t>& prompt = specs[j].prompt;
    std::vector<TokenLogprob> head;
    for (const TokenLogprob& e : entries[j]) {
      if (e.prompt) head.push_back(e);
    }
    ASSERT_EQ(head.size(), prompt.size()) << j;
    EXPECT_TRUE(std::isnan(head[0].logprob));
    EXPECT_EQ(head[0].id, prompt[0]);
    solo->ClearKv();
    ASSERT_TRUE(solo->Eval(prompt, LogitsFor::kAll, &logits).ok());
    for (size_t i = 1; i < prompt.size(); ++i) {
      ExpectEntry(head[i], prompt[i],
                  std::span<const float>(logits).subspan((i - 1) * n_vocab, n_vocab),
                  specs[j].logprobs, fmt::format("job {} prompt token {}", j, i));
    }
  }
  EXPECT_TRUE(texts[2].empty());  // max_tokens 0: the prompt only
  EXPECT_EQ(entries[2].size(), specs[2].prompt.size());
}

}  // namespace
}  // namespace mt::server
