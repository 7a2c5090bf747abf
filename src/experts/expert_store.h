// Expert stores: where a layer's routed experts come from (RAM, a file mapping, or a
// bounded cache filled from disk). The MoE executor is the same for all of them:
//
//   store.BeginLayer(layer, experts);          // unique experts the batch routed to
//   while (auto r = store.NextReady()) {        // cached experts first, misses as they land
//     compute expert r->expert with r->lease.matrices();
//   }                                           // the lease unpins when destroyed
//
// NextReady(/*wait=*/false) takes only what is ready now, so a caller can gather every
// ready expert and run them in parallel.
//
// A lease pins its expert's bytes: an expert in use is never evicted. Stores are not
// thread-safe: one owner thread drives them (the compute threads only read leased bytes).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "base/status.h"
#include "experts/expert_layout.h"
#include "experts/tier_stats.h"

namespace mt {

class ExpertStore;

// RAII pin of one expert's bytes. Movable, not copyable.
class ExpertLease {
 public:
  ExpertLease() = default;
  ExpertLease(ExpertStore* store, int32_t slot, ExpertMatrices m)
      : store_(store), slot_(slot), matrices_(m) {}
  ExpertLease(ExpertLease&& o) noexcept { *this = std::move(o); }
  ExpertLease& operator=(ExpertLease&& o) noexcept;
  ExpertLease(const ExpertLease&) = delete;
  ExpertLease& operator=(const ExpertLease&) = delete;
  ~ExpertLease() { Reset(); }

  const ExpertMatrices& matrices() const { return matrices_; }
  void Reset();

 private:
  ExpertStore* store_ = nullptr;
  int32_t slot_ = -1;  // store-defined; -1: nothing to release
  ExpertMatrices matrices_;
};

struct ReadyExpert {
  int32_t expert = -1;
  ExpertLease lease;
};

class ExpertStore {
 public:
  virtual ~ExpertStore() = default;

  // Starts fetching `experts` (distinct ids) of `layer` for compute. Any experts of the
  // previous layer not yet taken with NextReady are dropped.
  virtual void BeginLayer(uint32_t layer, std::span<const int32_t> experts) = 0;

  // The next expert of the current layer whose bytes are ready, or nullopt when all have
  // been handed out. With `wait`, blocks while none is ready; without, returns nullopt when
  // none is ready right now (Pending() tells whether more will come). Errors name the
  // file, layer, expert and offset of a failed read; the store stays usable for the next
  // layer or prompt.
  virtual Result<std::optional<ReadyExpert>> NextReady(bool wait = true) = 0;

  // Whether experts of the current layer remain to be handed out.
  virtual bool Pending() const = 0;

  // Advisory: experts that will probably be needed soon (prefetch class). May be ignored.
  virtual void Hint(uint32_t layer, std::span<const int32_t> experts) {}

  // Checks that the model files still are what was opened (size, identity), so a file
  // truncated or replaced under a running process is reported, not computed with.
  virtual Status CheckFiles() { return Status::Ok(); }

  virtual const TierStats& stats() const = 0;
  virtual void ResetStats() = 0;
  virtual std::string name() const = 0;

 protected:
  friend class ExpertLease;
  virtual void Release(int32_t slot) {}
};

inline ExpertLease& ExpertLease::operator=(ExpertLease&& o) noexcept {
  if (this != &o) {
    Reset();
    store_ = std::exchange(o.store_, nullptr);
    slot_ = std::exchange(o.slot_, -1);
    matrices_ = o.matrices_;
  }
  return *this;
}

inline void ExpertLease::Reset() {
  if (store_ != nullptr && slot_ >= 0) store_->Release(slot_);
  store_ = nullptr;
  slot_ = -1;
}

}  // namespace mt
