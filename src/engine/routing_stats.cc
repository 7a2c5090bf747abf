#include "engine/routing_stats.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>

#include "base/file_io.h"

namespace mt {

RoutingStats::RoutingStats(std::string arch, uint32_t n_layer, uint32_t n_expert)
    : arch_(std::move(arch)),
      n_layer_(n_layer),
      n_expert_(n_expert),
      counts_(uint64_t{n_layer} * n_expert, 0) {}

void RoutingStats::Merge(const RoutingStats& other) {
  tokens_ += other.tokens_;
  for (size_t i = 0; i < counts_.size() && i < other.counts_.size(); ++i) {
    counts_[i] += other.counts_[i];
  }
}

std::vector<float> RoutingStats::Scores(const std::vector<uint64_t>& expert_bytes) const {
  std::vector<float> s(counts_.size(), 0.0f);
  for (uint32_t l = 0; l < n_layer_; ++l) {
    const double bytes = l < expert_bytes.size() && expert_bytes[l] ? double(expert_bytes[l]) : 1.0;
    for (uint32_t e = 0; e < n_expert_; ++e) {
      s[uint64_t{l} * n_expert_ + e] = static_cast<float>(count(l, e) / bytes * 1e6);
    }
  }
  return s;
}

std::vector<std::pair<uint32_t, uint32_t>> RoutingStats::RankByActivationsPerByte(
    const std::vector<uint64_t>& expert_bytes) const {
  const std::vector<float> score = Scores(expert_bytes);
  std::vector<uint64_t> order(counts_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint64_t a, uint64_t b) { return score[a] > score[b]; });
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (uint64_t i : order) {
    if (counts_[i] == 0) break;  // never used: not worth a slot
    out.push_back({static_cast<uint32_t>(i / n_expert_), static_cast<uint32_t>(i % n_expert_)});
  }
  return out;
}

Status RoutingStats::Save(const std::string& path) const {
  nlohmann::json j;
  j["arch"] = arch_;
  j["n_layer"] = n_layer_;
  j["n_expert"] = n_expert_;
  j["tokens"] = tokens_;
  j["counts"] = nlohmann::json::array();
  for (uint32_t l = 0; l < n_layer_; ++l) {
    j["counts"].push_back(std::vector<uint64_t>(counts_.begin() + uint64_t{l} * n_expert_,
                                                counts_.begin() + uint64_t{l + 1} * n_expert_));
  }
  return WriteFileAtomically(path, j.dump() + "\n");
}

Result<RoutingStats> RoutingStats::Load(const std::string& path, const std::string& arch,
                                        uint32_t n_layer, uint32_t n_expert) {
  std::string text = MT_TRY(ReadWholeFile(path));
  return Parse(text, path, arch, n_layer, n_expert);
}

Result<RoutingStats> RoutingStats::Parse(std::string_view text, const std::string& path,
                                         const std::string& arch, uint32_t n_layer,
                                         uint32_t n_expert) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Corrupt("{}: not a JSON object", path);
  auto get_u = [&](const char* key) -> std::optional<uint64_t> {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_unsigned()) return std::nullopt;
    return it->get<uint64_t>();
  };
  std::optional<uint64_t> nl = get_u("n_layer"), ne = get_u("n_expert"), tok = get_u("tokens");
  if (!nl || !ne || !tok || !j.contains("counts") || !j["counts"].is_array()) {
    return Corrupt("{}: needs n_layer, n_expert, tokens and counts", path);
  }
  auto arch_it = j.find("arch");
  if (arch_it == j.end() || !arch_it->is_string()) return Corrupt("{}: needs arch", path);
  const std::string file_arch = arch_it->get<std::string>();
  if (file_arch != arch || *nl != n_layer || *ne != n_expert) {
    return InvalidArgument(
        "{}: routing statistics of a {} with {} layers x {} experts do not fit "
        "this {} with {} x {}",
        path, file_arch, *nl, *ne, arch, n_layer, n_expert);
  }
  RoutingStats s(arch, n_layer, n_expert);
  s.tokens_ = *tok;
  const nlohmann::json& counts = j["counts"];
  if (counts.size() != n_layer) return Corrupt("{}: counts has {} layers", path, counts.size());
  for (uint32_t l = 0; l < n_layer; ++l) {
    if (!counts[l].is_array() || counts[l].size() != n_expert) {
      return Corrupt("{}: counts of layer {} are not {} numbers", path, l, n_expert);
    }
    for (uint32_t e = 0; e < n_expert; ++e) {
      if (!counts[l][e].is_number_unsigned()) {
        return Corrupt("{}: count of layer {} expert {} is not a number", path, l, e);
      }
      s.counts_[uint64_t{l} * n_expert + e] = counts[l][e].get<uint64_t>();
    }
  }
  return s;
}

}  // namespace mt
