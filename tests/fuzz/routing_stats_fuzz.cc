// Fuzzes the routing-statistics reader (src/engine/routing_stats.cc): any text must give
// statistics of the asked-for shape or a Status, never a crash or an exception, and the
// placement ranking of what parses names only used experts in range.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/routing_stats.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr uint32_t kLayers = 2, kExperts = 4;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  mt::Result<mt::RoutingStats> r =
      mt::RoutingStats::Parse(text, "fuzz.json", "olmoe", kLayers, kExperts);
  if (!r.ok()) return 0;
  if (r->n_layer() != kLayers || r->n_expert() != kExperts) __builtin_trap();
  std::vector<uint64_t> bytes(kLayers, 4096);
  for (auto [layer, expert] : r->RankByActivationsPerByte(bytes)) {
    if (layer >= kLayers || expert >= kExperts || r->count(layer, expert) == 0) __builtin_trap();
  }
  return 0;
}
