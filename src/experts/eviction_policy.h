// Which cached expert to drop when a slot is needed. The stream store tells the policy
// when slots become evictable (ready and unpinned), are used again, or leave; the policy
// picks a victim among the evictable ones. Not thread-safe (the store's owner drives it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mt {

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  // A forward pass begins (its first layer's experts come next).
  virtual void StartPass() {}
  // The router asked for expert `key` (layer * n_expert + expert), hit or miss.
  virtual void Access(uint32_t key) {}
  // `slot` now holds expert `key` (called before Insert).
  virtual void Assign(int32_t slot, uint32_t key) {}
  // `slot` became evictable (its expert is cached and nobody holds it).
  virtual void Insert(int32_t slot) = 0;
  // `slot` is no longer evictable (pinned again, or emptied).
  virtual void Remove(int32_t slot) = 0;
  // The slot to evict next, among those inserted and not removed; -1 if none. Does not
  // remove it.
  virtual int32_t Victim() = 0;
  virtual std::string name() const = 0;
};

// Least recently used: the slot that became evictable longest ago goes first.
std::unique_ptr<EvictionPolicy> MakeLruPolicy(int32_t n_slots);

// Least frequently used with aging: every access counts one for its expert; all counts
// halve at the first pass start after every `n_slots * 8` accesses, so yesterday's hot
// experts cool down (at a pass start, so that the experts of one pass count in one epoch).
// The evictable expert with the lowest count goes first; among equals, the one loaded last.
// That tie-break resists scans: when a pass uses more experts than the cache holds, all
// equally often (32 sequences decoded together), the experts loaded first stay and the
// rest stream through the remaining slots, instead of every expert being evicted just
// before its layer comes round again.
std::unique_ptr<EvictionPolicy> MakeLfuPolicy(int32_t n_slots, uint32_t n_keys);

// Placement-aware: a profile's score per expert (activations per byte, higher = keep),
// then LRU among equal scores. Experts without a score count as 0.
std::unique_ptr<EvictionPolicy> MakeScoredPolicy(int32_t n_slots, std::vector<float> score);

// By name: "lru", "lfu", "placement" (the last needs `score`). nullptr for other names.
std::unique_ptr<EvictionPolicy> MakeEvictionPolicy(const std::string& name, int32_t n_slots,
                                                   uint32_t n_keys, std::vector<float> score);

}  // namespace mt
