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

}  // namespace mt
