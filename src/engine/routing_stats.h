// How often the router picked each (layer, expert): the material for placement (which
// experts to pin) and for a restarted server to start warm. Saved as JSON.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace mt {

class RoutingStats {
 public:
  RoutingStats() = default;
  RoutingStats(std::string arch, uint32_t n_layer, uint32_t n_expert);

  void Add(uint32_t layer, uint32_t expert, uint64_t n = 1) {
    counts_[uint64_t{layer} * n_expert_ + expert] += n;
  }
  void AddTokens(uint64_t n) { tokens_ += n; }
  // Adds another profile's counts (same shape; checked by Load).
  void Merge(const RoutingStats& other);

  uint64_t count(uint32_t layer, uint32_t expert) const {
    return counts_[uint64_t{layer} * n_expert_ + expert];
  }
  uint64_t tokens() const { return tokens_; }
  uint32_t n_layer() const { return n_layer_; }
  uint32_t n_expert() const { return n_expert_; }

  // (layer, expert) pairs, hottest first by activations per byte of the expert (bytes of
  // layer l's experts: expert_bytes[l]); ties by layer, then expert.
  std::vector<std::pair<uint32_t, uint32_t>> RankByActivationsPerByte(
      const std::vector<uint64_t>& expert_bytes) const;
  // The same ranking as a score per (layer * n_expert + expert), for the placement policy.
  std::vector<float> Scores(const std::vector<uint64_t>& expert_bytes) const;

  // JSON: {"arch", "n_layer", "n_expert", "tokens", "counts": [[...per expert] per layer]}.
  // Written atomically (temp file + rename). Errors name the path.
  Status Save(const std::string& path) const;
  // Loads and checks the shape against the model's (arch, n_layer, n_expert).
  // A missing file is kNotFound (a warm start then starts cold); anything else wrong is an
  // error naming the path.
  static Result<RoutingStats> Load(const std::string& path, const std::string& arch,
                                   uint32_t n_layer, uint32_t n_expert);
  // The same from the file's text; `path` names it in errors.
  static Result<RoutingStats> Parse(std::string_view text, const std::string& path,
                                    const std::string& arch, uint32_t n_layer, uint32_t n_expert);

 private:
  std::string arch_;
  uint32_t n_layer_ = 0;
  uint32_t n_expert_ = 0;
  uint64_t tokens_ = 0;
  std::vector<uint64_t> counts_;  // (n_layer, n_expert)
};

}  // namespace mt
