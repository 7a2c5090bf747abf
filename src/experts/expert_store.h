// Expert stores: where a layer's routed experts come from (RAM, a file mapping, or a
// bounded cache filled from disk). The MoE executor is the same for all of them:
//
//   store.BeginLayer(layer, experts);          // unique experts the batch routed to
//   while (auto r = store.NextReady()) {        // cached experts first, misses as they land
//     compute expert r->expert with r->lease.matrices();
//   }                                           // the lease unpins when destroyed
//
// NextReady(/*wait=*/false) takes only what is ready now, so a caller can gather every
// ready expert and run them in parallel. With defer_checks, a caller that runs experts on
// several threads also checks their bytes there (Verify) instead of serially in NextReady.
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
#include <vector>

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
  friend class ExpertStore;
};

struct ReadyExpert {
  int32_t expert = -1;
  ExpertLease lease;
  // Handed out by NextReady(wait, /*defer_checks=*/true) with its bytes not checked yet:
  // they must pass ExpertStore::Verify before anything is computed from them.
  bool unchecked = false;
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
  //
  // An expert whose bytes are still to be checked (a pack record's checksum) is checked
  // here, unless `defer_checks`: then it may come out `unchecked`, for the caller to Verify.
  virtual Result<std::optional<ReadyExpert>> NextReady(bool wait = true,
                                                       bool defer_checks = false) = 0;

  // Checks the bytes of an expert handed out `unchecked`; Ok for any other. Safe to call
  // from any thread, for distinct experts at once, while the owner thread waits (it touches
  // only that expert's slot). A failure names the file, layer, expert and offset; the
  // expert's bytes are dropped when its lease returns, never handed out again. An expert
  // never verified is checked again at its next hand-out.
  virtual Status Verify(const ReadyExpert& r) { return Status::Ok(); }

  // Whether experts of the current layer remain to be handed out.
  virtual bool Pending() const = 0;

  // Advisory: experts that will probably be needed soon (prefetch class). May be ignored.
  virtual void Hint(uint32_t layer, std::span<const int32_t> experts) {}

  // The experts a bounded cache holds at once (the stream tier's slots); 0 for a store that
  // holds every expert, where prefetch and placement have nothing to do.
  virtual uint32_t cache_slots() const { return 0; }
  // Keeps (layer, expert) pairs, best first, in the cache for good, up to `max_slots`; returns
  // how many it will keep. A store without a bounded cache keeps none.
  virtual uint32_t Place(std::span<const std::pair<uint32_t, uint32_t>> experts,
                         uint32_t max_slots) {
    return 0;
  }

  // The device took expert `to_device` of `layer` from this tier and gave `from_device` back
  // (GpuExpertTier::Promote, between forward passes). A store that copies only the host's
  // experts (resident) gives the first's copy to the second, read from the mapping (a pack's
  // record checked first: on an error nothing changed). The others read any expert on demand
  // and have nothing to do.
  virtual Status HandOver(uint32_t layer, uint32_t to_device, uint32_t from_device) {
    return Status::Ok();
  }

  // Checks that the model files still are what was opened (size, identity), so a file
  // truncated or replaced under a running process is reported, not computed with.
  virtual Status CheckFiles() { return Status::Ok(); }

  // Blocks until the store's own memory is resident (the stream tier populates its slot
  // pool in the background at start). For benchmarks: they time steady-state decode, as
  // with resident experts, not the first touch of fresh memory.
  virtual void WaitForMemory() {}

  // Which experts' bytes the store's cache holds now: `out` becomes (n_layer * n_expert) bytes
  // (layer-major), 1 for an expert ready in the cache. Returns false, leaving `out` alone,
  // when the store keeps no cache of its own (resident: every expert is in RAM; mmap: the
  // page cache decides). Owner thread only.
  virtual bool Residency(std::vector<uint8_t>* out) const { return false; }

  virtual const TierStats& stats() const = 0;
  virtual void ResetStats() = 0;
  virtual std::string name() const = 0;

 protected:
  friend class ExpertLease;
  virtual void Release(int32_t slot) {}
  // The store-defined slot a lease pins.
  static int32_t LeaseSlot(const ExpertLease& lease) { return lease.slot_; }
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
