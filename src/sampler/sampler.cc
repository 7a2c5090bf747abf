#include "sampler/sampler.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"

namespace mt {
namespace {

using Candidate = std::pair<float, int32_t>;  // (logit, token id)

// SplitMix64 (Steele, Lea, Flood 2014): one 64-bit add and a bijective mix per output.
// Fully specified here, so a seed gives the same stream on every machine and compiler.
uint64_t NextRandom(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, 1): the top 53 bits scaled by 2^-53, exact in a double.
double NextUniform(uint64_t& state) {
  return static_cast<double>(NextRandom(state) >> 11) * 0x1.0p-53;
}

// Descending logit; ties go to the lower id so the order is total and deterministic.
bool HigherLogit(const Candidate& a, const Candidate& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

// Repetition penalty (CTRL, as llama.cpp applies it): every distinct token of the last
// `last_n` history entries gets logit / penalty when its logit is positive and
// logit * penalty otherwise, once however often it occurs.
// The repetition penalty once per distinct token of the window, then the frequency and
// presence penalties by its count there (llama.cpp's order).
void ApplyPenalties(std::span<const int32_t> history, const SamplerParams& p,
                    std::vector<uint32_t>& in_window, std::span<Candidate> cands) {
  const bool off =
      p.repeat_penalty == 1.0f && p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f;
  if (off || p.repeat_last_n == 0 || history.empty()) return;
  const size_t n = p.repeat_last_n < 0
                       ? history.size()
                       : std::min(history.size(), static_cast<size_t>(p.repeat_last_n));
  std::span<const int32_t> window = history.last(n);
  in_window.assign(cands.size(), 0);
  for (int32_t id : window) {
    if (id >= 0 && static_cast<size_t>(id) < in_window.size()) ++in_window[id];
  }
  // Candidates are still indexed by id here (the penalties run first).
  for (Candidate& c : cands) {
    const uint32_t count = in_window[c.second];
    if (count == 0) continue;
    c.first = c.first <= 0.0f ? c.first * p.repeat_penalty : c.first / p.repeat_penalty;
    c.first -= static_cast<float>(count) * p.frequency_penalty + p.presence_penalty;
  }
}

int32_t Argmax(std::span<const Candidate> cands) {
  size_t best = 0;
  for (size_t i = 1; i < cands.size(); ++i) {
    if (HigherLogit(cands[i], cands[best])) best = i;
  }
  return cands[best].second;
}

// Top-p (nucleus): of the candidates sorted by descending probability, keeps the shortest
// prefix whose cumulative probability reaches p (at least one token). Probabilities are a
// softmax over the current candidates [0, n), accumulated in float as llama.cpp does.
// Leaves the kept prefix sorted; returns its size.
size_t TopP(std::vector<Candidate>& cands, size_t n, bool sorted, float p) {
  float max_l = cands[0].first;
  for (size_t i = 1; i < n; ++i) max_l = std::max(max_l, cands[i].first);
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) sum += std::exp(cands[i].first - max_l);
  // Most of the mass is usually in a few hundred tokens: sort those first, the rest on a miss.
  size_t n_sorted = sorted ? n : std::min<size_t>(n, 256);
  if (!sorted) {
    std::partial_sort(cands.begin(), cands.begin() + n_sorted, cands.begin() + n, HigherLogit);
  }
  float cum = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    if (i == n_sorted) {
      std::sort(cands.begin() + i, cands.begin() + n, HigherLogit);
      n_sorted = n;
    }
    cum += std::exp(cands[i].first - max_l) / sum;
    if (cum >= p) return i + 1;
  }
  return n;
}

// Keeps, in cands[0, return), the first `want` candidates `filter` allows in HigherLogit
// order, sorted. The best 64 are sorted and asked first: usually enough (a grammar mostly
// agrees with the model). Otherwise the filter marks every token at once (`allowed`:
// scratch), and the allowed candidates are sorted: cheaper than sorting the whole
// vocabulary when the filter refuses most of it.
size_t TakeAllowed(std::vector<Candidate>& cands, size_t want, const TokenFilter& filter,
                   std::vector<uint8_t>& allowed) {
  const size_t head = std::min<size_t>(cands.size(), 64);
  std::partial_sort(cands.begin(), cands.begin() + head, cands.end(), HigherLogit);
  size_t kept = 0;
  for (size_t i = 0; i < head && kept < want; ++i) {
    if (filter.Allows(cands[i].second)) cands[kept++] = cands[i];
  }
  if (kept == want || head == cands.size()) return kept;
  const size_t rest = kept;
  allowed.resize(cands.size());
  filter.MarkAllowed(allowed);
  for (size_t i = head; i < cands.size(); ++i) {
    if (allowed[cands[i].second]) cands[kept++] = cands[i];
  }
  const size_t take = std::min(kept, want);
  std::partial_sort(cands.begin() + rest, cands.begin() + take, cands.begin() + kept, HigherLogit);
  return take;
}

}  // namespace

Sampler::Sampler(const SamplerParams& params) : params_(params), rng_state_(params.seed) {}

int32_t Sampler::Sample(std::span<const float> logits, std::span<const int32_t> history,
                        const TokenFilter* filter) {
  MT_CHECK_MSG(!logits.empty(), "Sample needs at least one logit");
  const SamplerParams& p = params_;
  candidates_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) candidates_[i] = {logits[i], static_cast<int32_t>(i)};

  for (const auto& [id, bias] : p.logit_bias) {
    if (id >= 0 && static_cast<size_t>(id) < candidates_.size()) candidates_[id].first += bias;
  }
  ApplyPenalties(history, p, in_window_, candidates_);
  const bool greedy = p.temperature <= 0.0f;
  if (greedy && filter == nullptr) return Argmax(candidates_);

  size_t n = candidates_.size();
  bool sorted = false;  // whether candidates_[0, n) is in HigherLogit order
  if (filter != nullptr && (greedy || p.top_k > 0)) {
    n = TakeAllowed(candidates_, greedy ? 1 : static_cast<size_t>(p.top_k), *filter, allowed_);
    if (n == 0) return -1;
    if (greedy) return candidates_[0].second;
    sorted = true;
  } else if (filter != nullptr) {  // no top-k: every allowed token, still in id order
    allowed_.resize(candidates_.size());
    filter->MarkAllowed(allowed_);
    n = 0;
    for (const Candidate& c : candidates_) {
      if (allowed_[c.second]) candidates_[n++] = c;
    }
    if (n == 0) return -1;
  } else if (p.top_k > 0) {
    n = std::min(n, static_cast<size_t>(p.top_k));
    std::partial_sort(candidates_.begin(), candidates_.begin() + n, candidates_.end(), HigherLogit);
    sorted = true;
  }
  if (p.top_p < 1.0f) n = TopP(candidates_, n, sorted, p.top_p);  // the draw ignores order
  if (p.min_p > 0.0f) {
    // p_i >= min_p * p_max  <=>  logit_i >= max_logit + log(min_p); the max always stays.
    float max_l = candidates_[0].first;
    for (size_t i = 1; i < n; ++i) max_l = std::max(max_l, candidates_[i].first);
    const float min_logit = max_l + std::log(p.min_p);
    size_t kept = 0;
    for (size_t i = 0; i < n; ++i) {
      if (candidates_[i].first >= min_logit) candidates_[kept++] = candidates_[i];
    }
    n = kept;
  }

  // Temperature, then the draw: softmax of logit / T (exp in float, summed in double) and
  // the first candidate whose running sum reaches u * total, u uniform in [0, 1).
  float max_l = candidates_[0].first / p.temperature;
  for (size_t i = 0; i < n; ++i) {
    candidates_[i].first /= p.temperature;
    max_l = std::max(max_l, candidates_[i].first);
  }
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) total += std::exp(candidates_[i].first - max_l);
  const double target = total * NextUniform(rng_state_);
  double running = 0.0;
  for (size_t i = 0; i < n; ++i) {
    running += std::exp(candidates_[i].first - max_l);
    if (running >= target) return candidates_[i].second;
  }
  return candidates_[n - 1].second;  // rounding left target just above the last sum
}

}  // namespace mt
