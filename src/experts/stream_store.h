// The stream tier: a bounded cache of 4 KiB-aligned slots (a size per layer class: SlotPlan)
// filled from the model files by an IoEngine (O_DIRECT where possible, so nothing is cached
// twice).
//
// - Two requests for the same expert share one read; an expert in use is pinned by its
//   lease and never evicted.
// - Demand requests (BeginLayer) always win; prefetch requests (Hint) may hold at most
//   `prefetch_share` of the slots and never evict a pinned or demanded expert. A demand
//   for an expert being prefetched takes over that read. A prefetch that has landed is
//   not evictable (and still counts in the share) until its layer has run.
// - Misses are read in parallel; NextReady hands out cached experts first, then each miss
//   as soon as its own reads complete.
// - A failed or short read fails the demand with the file, layer, expert and offset; the
//   slot is dropped, never computed with.
// - An expert-major pack (ExpertLayout::has_records()) is read one record per expert (one
//   request instead of three) and the record's xxh3 checksum is checked before its first
//   use: at hand-out, or by the caller's threads (Verify) where it deferred the check. A
//   mismatch fails closed like a failed read (error naming file, layer, expert, offset) and
//   drops the slot, so the next request reads the record again.
//
// Memory: the slot pool is reserved (virtual) at creation and its pages are touched only
// when a slot is first filled. Not thread-safe: one owner thread.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "base/aligned_buffer.h"
#include "experts/eviction_policy.h"
#include "experts/expert_store.h"
#include "io/file_watch.h"
#include "io/io_engine.h"

namespace mt {

struct StreamOptions {
  uint64_t cache_bytes = 0;  // slot pool size; must hold at least `min_slots` experts
  // Instead of cache_bytes: this fraction of all the model's experts (1 = every one fits).
  std::optional<double> cache_fraction;
  uint32_t min_slots = 1;  // the experts one layer needs (top-k); fewer is refused
  DirectMode direct = DirectMode::kAuto;
  double prefetch_share = 0.25;  // most of the slots prefetch may hold
  std::string policy = "lfu";    // eviction: lfu, lru, placement
  std::vector<float> score;      // (n_layer * n_expert) profile score, for "placement"
};

// The slot pool's shape. Slots come in classes, one per distinct slot size among the layers
// (q4_k_m gives some layers a Q6_K `down` and the rest Q4_K), and an expert takes a slot of
// its own layer's size: slots sized for the largest expert left ~7 % of a qwen3-30b-a3b
// pool as padding.
struct SlotPlan {
  std::vector<uint64_t> slot_bytes;          // (n_class) each class's slot size, ascending
  std::vector<uint32_t> n_slots;             // (n_class) slots of each class
  std::vector<uint32_t> layer_class;         // (n_layer) the class of each layer's experts
  static constexpr uint32_t kNoClass = ~0u;  // a layer without experts
  uint64_t bytes() const;                    // the whole pool
  uint32_t total_slots() const;
};

class StreamStore final : public ExpertStore {
 public:
  // Opens every model file in `io`. Errors: a cache too small for `min_slots` experts
  // (naming the sizes), files that cannot be opened.
  static Result<std::unique_ptr<StreamStore>> Create(const ExpertLayout& layout,
                                                     std::unique_ptr<IoEngine> io,
                                                     const StreamOptions& options);
  ~StreamStore() override;

  // Divides the pool among the slot classes: `cache_fraction` of each class's experts, or
  // `cache_bytes` split so that each class holds the same share of its experts. Each class
  // holds at least one layer's top-k (`min_slots`). Errors: a cache too small for that,
  // naming the sizes.
  static Result<SlotPlan> PlanSlots(const ExpertLayout& layout, const StreamOptions& options);

  void BeginLayer(uint32_t layer, std::span<const int32_t> experts) override;
  Result<std::optional<ReadyExpert>> NextReady(bool wait = true,
                                               bool defer_checks = false) override;
  // Thread-safe for distinct experts (expert_store.h): it writes only r's slot's flags.
  Status Verify(const ReadyExpert& r) override;
  bool Pending() const override {
    return !ready_.empty() || !waiting_.empty() || !backlog_.empty() || !failed_.empty();
  }
  void Hint(uint32_t layer, std::span<const int32_t> experts) override;
  // Pins `experts` ((layer, expert) pairs, hottest first) into the cache for good, up to
  // `max_slots` (shared among the slot classes by their sizes), always leaving one layer's
  // top-k (min_slots) of each class unplaced. They load in the
  // background, at most a few reads at a time, behind any demand; the first token does not
  // wait for them. Returns how many will be placed.
  uint32_t Place(std::span<const std::pair<uint32_t, uint32_t>> experts,
                 uint32_t max_slots) override;
  uint32_t cache_slots() const override { return n_slots(); }
  Status CheckFiles() override { return watch_.Check(); }
  void WaitForMemory() override {
    if (populate_.joinable()) populate_.join();
  }
  bool Residency(std::vector<uint8_t>* out) const override;
  const TierStats& stats() const override { return stats_; }
  void ResetStats() override;
  std::string name() const override { return "stream"; }

  uint32_t n_slots() const { return static_cast<uint32_t>(slots_.size()); }
  // The slots that can hold `layer`'s experts (its class), and the size of each.
  uint32_t n_slots_of_layer(uint32_t layer) const {
    return static_cast<uint32_t>(classes_[layer_class_[layer]].n_slots);
  }
  uint64_t slot_bytes_of_layer(uint32_t layer) const {
    return classes_[layer_class_[layer]].slot_bytes;
  }
  uint64_t pool_bytes() const { return pool_.size(); }
  const IoEngine& io() const { return *io_; }
  bool direct() const { return direct_; }

 protected:
  void Release(int32_t slot) override;

 private:
  enum class SlotState { kEmpty, kLoading, kReady };
  struct Slot {
    SlotState state = SlotState::kEmpty;
    int32_t layer = -1;
    int32_t expert = -1;
    int32_t pins = 0;                // leases out + demanded and not yet handed out
    bool demanded = false;           // wanted by the current layer
    bool prefetch = false;           // counted in prefetch_slots_ (a prefetch loading or held)
    bool prefetched_unused = false;  // loaded on a hint and not demanded yet
    bool placed = false;             // pinned for good by placement
    bool placing = false;            // a placement load in flight (counted in placing_)
    int32_t parts_pending = 0;       // reads in flight
    uint32_t uses = 0;               // hand-outs since it was loaded
    bool repacked = false;           // in the kernels' layout (kernel_layout.h), not the file's
    bool unchecked = false;          // a pack record read but not yet checked against its checksum
    bool corrupt = false;            // failed Verify: dropped when its lease returns
    Status error;                    // first failed read
    std::array<uint64_t, 3> payload_at{};  // where each part's bytes start in the slot
  };

  static constexpr uint32_t kRepackAfterUses = 4;  // see NextReady
  // kRepackAfterUses, or 1 when the cache holds every expert (nothing is ever evicted, so a
  // repack always pays back).
  uint32_t repack_after_uses_ = kRepackAfterUses;
  // (n_layer) 1 where the file's experts already are in the kernels' layout, so that
  // RepackExpert would leave their bytes (and checksum) as they are.
  std::vector<uint8_t> in_kernel_layout_;

  StreamStore(const ExpertLayout& layout, std::unique_ptr<IoEngine> io);
  // The slots of one size: [first_slot, first_slot + n_slots), side by side in the pool.
  struct SlotClass {
    uint64_t slot_bytes = 0;
    int32_t first_slot = 0;
    int32_t n_slots = 0;
    std::vector<int32_t> free;               // empty slots
    int32_t prefetch_slots = 0;              // slots held by prefetches not yet demanded
    int32_t placed_slots = 0;                // slots pinned for good by placement
    std::unique_ptr<EvictionPolicy> policy;  // over slot - first_slot
  };

  uint8_t* SlotData(int32_t s) { return pool_.data() + slot_at_[s]; }
  SlotClass& ClassOfSlot(int32_t s) { return classes_[slot_class_[s]]; }
  // The slot became evictable (ready, nobody holds it) / is no longer.
  void Evictable(int32_t s) {
    SlotClass& c = ClassOfSlot(s);
    c.policy->Insert(s - c.first_slot);
  }
  void Unevictable(int32_t s) {
    SlotClass& c = ClassOfSlot(s);
    c.policy->Remove(s - c.first_slot);
  }
  int32_t& SlotOf(uint32_t layer, uint32_t expert) {
    return slot_of_[uint64_t{layer} * layout_.n_expert() + expert];
  }
  // A free slot of `layer`'s class, or an evicted one; -1 if every such slot is pinned or
  // loading (or, for a prefetch, its share of them is taken).
  int32_t TakeSlot(uint32_t layer, bool for_prefetch);
  void DropSlot(int32_t s);
  // Queues the reads of (layer, expert) into slot s.
  void StartLoad(int32_t s, uint32_t layer, uint32_t expert);
  void SubmitQueued();
  // Waits for at least one completion (if `block`) and processes what arrived.
  void Reap(bool block);
  // The disk got work / ran out of it: busy time, and each idle gap counted against the
  // layer running when it began (TierCounters::disk_idle_ns).
  void DiskBusy();
  void DiskIdle();
  void Pin(int32_t s);
  void EndPrefetch(int32_t s);
  // Counts the end of a slot's tenure (eviction or drop): wasted prefetch bytes.
  void Retire(int32_t s);
  // Starts placement loads while few are in flight.
  void StartPlacements();
  void EndPlacing(int32_t s);  // its placement read is done (or refused)
  // A load whose read failed or was refused (slot.error set): counted, unpinned, its
  // prefetch share given back; a demanded one goes to failed_, the rest are dropped.
  void FailLoad(int32_t s);
  // The bytes a read of slot s fetches: part `what` (0..2) or the whole record (3).
  ByteExtent ExtentOf(int32_t s, uint64_t what) const;
  Status ReadError(int32_t s, uint64_t what, int64_t result, uint64_t wanted) const;
  // Ok when the record just read into slot s matches its checksum; else a one-line error
  // naming the file, layer, expert and offset.
  Status CheckRecord(int32_t s);

  const ExpertLayout& layout_;
  std::unique_ptr<IoEngine> io_;
  FileWatch watch_;
  std::vector<int> files_;  // (files) engine indices
  bool direct_ = true;      // all files opened with O_DIRECT
  double prefetch_share_ = 0.25;
  uint32_t min_slots_ = 1;  // the experts one layer needs; never placed
  AlignedBuffer pool_;      // (SlotPlan::bytes) made resident by populate_
  // Faults the pool's pages in from the first slot on, in the background: an O_DIRECT read
  // into a never-touched slot faults its pages inside the kernel's read path, which made
  // reads ~10x slower while a large cache was filling (docs/journal/tiering.md, 2026-12-01).
  std::thread populate_;
  std::atomic<bool> stop_populate_{false};
  std::vector<SlotClass> classes_;
  std::vector<uint32_t> layer_class_;  // (n_layer) index into classes_
  std::vector<uint32_t> slot_class_;   // (n_slots) index into classes_
  std::vector<uint64_t> slot_at_;      // (n_slots) where each slot starts in pool_
  std::vector<Slot> slots_;            // (n_slots)
  std::vector<uint8_t> filled_;        // (n_slots) 1 once a read was submitted into the slot
  std::vector<int32_t> slot_of_;       // (n_layer * n_expert) slot index or -1
  std::vector<int32_t> held_;          // prefetches landed, not evictable until their layer runs
  std::vector<ReadOp> queued_;         // reads to submit
  uint64_t in_flight_ = 0;
  std::deque<std::pair<uint32_t, uint32_t>> to_place_;  // placement loads not started yet
  int32_t placing_ = 0;                                 // placement loads in flight

  // The current layer's demand.
  uint32_t layer_ = 0;
  std::deque<int32_t> ready_;  // demanded slots ready to hand out (hits first)
  std::deque<std::pair<int32_t, int32_t>> backlog_;  // (layer, expert) waiting for a slot
  std::vector<int32_t> waiting_;                     // demanded slots still loading
  std::vector<int32_t> failed_;                      // demanded slots whose reads failed

  TierStats stats_;
  BusyClock busy_;
  uint64_t idle_since_ns_ = 0;  // steady clock, when the open gap began
  int32_t idle_layer_ = -1;     // the layer running when the open gap began; -1: none open
};

}  // namespace mt
