// Token sampling, in llama.cpp's order: logit bias -> penalties (repetition, frequency,
// presence) -> [a token filter, e.g. a grammar] -> top-k -> top-p -> min-p -> temperature ->
// draw. Seeded: the same seed and
// inputs give the same tokens on any machine (the generator and the draw are implemented
// here, not taken from <random>'s unspecified distributions). Not thread-safe; one Sampler
// per sequence.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace mt {

struct SamplerParams {
  float temperature = 0.8f;     // <= 0: greedy (argmax; ties go to the lowest id)
  int32_t top_k = 40;           // <= 0: off
  float top_p = 0.95f;          // >= 1: off
  float min_p = 0.05f;          // <= 0: off
  float repeat_penalty = 1.0f;  // 1: off; > 1 discourages tokens seen in the last n
  // OpenAI's penalties, over the same last n: a token seen c times there loses
  // c * frequency_penalty + (c > 0) * presence_penalty from its logit. 0: off.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t repeat_last_n = 64;  // tokens of history the penalties look at; -1: all
  // (token id, value added to its logit) before everything else, greedy included; -inf
  // bans the token. Ids outside the vocab are ignored.
  std::vector<std::pair<int32_t, float>> logit_bias;
  uint64_t seed = 0;
};

// Which tokens may come next (a grammar, for one). Sample drops the others before top-k.
// With top-k (or greedy) it asks about the best 64 candidates first and about the rest only
// when fewer than k of those are allowed: then, as without top-k, about every token at once.
class TokenFilter {
 public:
  virtual ~TokenFilter() = default;
  virtual bool Allows(int32_t id) const = 0;
  // allowed[id] = Allows(id) for every id of the span. A filter that can skip what it
  // refuses in bulk (a grammar: every token starting with a refused byte) overrides it.
  virtual void MarkAllowed(std::span<uint8_t> allowed) const {
    for (size_t id = 0; id < allowed.size(); ++id) {
      allowed[id] = Allows(static_cast<int32_t>(id));
    }
  }
};

class Sampler {
 public:
  explicit Sampler(const SamplerParams& params);

  // Picks the next token from `logits` (n_vocab). `history` is the sequence so far (prompt
  // and generated tokens), used by the repetition penalty; ids outside the vocab are
  // ignored. The generator is SplitMix64 started from `seed`; each non-greedy call takes one
  // output x, u = (x >> 11) * 2^-53 in [0, 1), and returns the first remaining candidate (in
  // descending-logit order when top-k or top-p ran, else in id order) whose running softmax
  // sum reaches u * total. Greedy calls use no randomness. `logits` must not be empty.
  // With a `filter`, only tokens it allows are candidates (greedy: the best allowed one);
  // returns -1 when it allows none.
  int32_t Sample(std::span<const float> logits, std::span<const int32_t> history,
                 const TokenFilter* filter = nullptr);

  const SamplerParams& params() const { return params_; }

 private:
  SamplerParams params_;
  uint64_t rng_state_;
  std::vector<std::pair<float, int32_t>> candidates_;  // (n_vocab) scratch: (logit, id)
  std::vector<uint32_t> in_window_;  // (n_vocab) scratch: times seen in the penalty window
  std::vector<uint8_t> allowed_;     // (n_vocab) scratch: the filter's MarkAllowed
};

}  // namespace mt
