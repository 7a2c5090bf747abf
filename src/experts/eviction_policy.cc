#include "experts/eviction_policy.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace mt {
namespace {

// An intrusive doubly linked list over slot indices; the head is the least recent.
class LruPolicy final : public EvictionPolicy {
 public:
  explicit LruPolicy(int32_t n) : prev_(n, kNone), next_(n, kNone), in_(n, false) {}

  void Insert(int32_t s) override {
    if (in_[s]) Unlink(s);
    prev_[s] = tail_;
    next_[s] = kNone;
    if (tail_ != kNone)
      next_[tail_] = s;
    else
      head_ = s;
    tail_ = s;
    in_[s] = true;
  }
  void Remove(int32_t s) override {
    if (in_[s]) Unlink(s);
  }
  int32_t Victim() override { return head_; }
  std::string name() const override { return "lru"; }

 private:
  static constexpr int32_t kNone = -1;
  void Unlink(int32_t s) {
    if (prev_[s] != kNone)
      next_[prev_[s]] = next_[s];
    else
      head_ = next_[s];
    if (next_[s] != kNone)
      prev_[next_[s]] = prev_[s];
    else
      tail_ = prev_[s];
    prev_[s] = next_[s] = kNone;
    in_[s] = false;
  }
  std::vector<int32_t> prev_, next_;  // (n_slots)
  std::vector<bool> in_;              // (n_slots)
  int32_t head_ = kNone, tail_ = kNone;
};

// Keeps the evictable slots ordered by (rank, tie-break): the lowest rank first; among
// equals, the one that became evictable longest ago (kLeastRecent) or the one loaded last
// (kNewestLoad). O(log n) a call: scanning every evictable slot took ~35 us a request with
// a quarter of Kimi K2's experts cached (5760 slots; now ~0.4 us, bench/eviction_bench).
class RankedPolicy : public EvictionPolicy {
 public:
  enum class Ties { kLeastRecent, kNewestLoad };
  RankedPolicy(int32_t n_slots, uint32_t n_keys, Ties ties)
      : ties_(ties),
        key_(n_slots, kNoKey),
        order_(n_slots),
        loaded_(n_slots),
        where_(n_slots),
        node_(n_slots),
        in_(n_slots, false),
        slot_of_key_(n_keys, -1) {
    relink_.reserve(n_slots);
  }
  void Assign(int32_t slot, uint32_t key) override {
    const bool was_in = in_[slot];
    if (was_in) Unlink(slot);
    if (key_[slot] < slot_of_key_.size() && slot_of_key_[key_[slot]] == slot) {
      slot_of_key_[key_[slot]] = -1;
    }
    key_[slot] = key;
    if (key < slot_of_key_.size()) slot_of_key_[key] = slot;
    loaded_[slot] = ++clock_;
    if (was_in) Link(slot);
  }
  void Insert(int32_t s) override {
    if (in_[s]) Unlink(s);
    order_[s] = ++clock_;
    Link(s);
  }
  void Remove(int32_t s) override {
    if (in_[s]) Unlink(s);
  }
  int32_t Victim() override { return ordered_.empty() ? -1 : ordered_.begin()->slot; }

 protected:
  virtual double Rank(uint32_t key) const = 0;
  // `key`'s rank changed: re-place its slot if that is evictable.
  void Reranked(uint32_t key) {
    if (key >= slot_of_key_.size()) return;
    const int32_t s = slot_of_key_[key];
    if (s >= 0 && in_[s]) {
      Unlink(s);
      Link(s);
    }
  }
  // Every rank changed (in an order-keeping way or not): re-place them all.
  void RerankedAll() {
    relink_.clear();
    for (int32_t s = 0; s < static_cast<int32_t>(in_.size()); ++s) {
      if (in_[s]) relink_.push_back(s);
    }
    for (int32_t s : relink_) Unlink(s);
    for (int32_t s : relink_) Link(s);
  }

 private:
  static constexpr uint32_t kNoKey = UINT32_MAX;
  struct Entry {
    double rank;
    uint64_t tie;  // lower goes first among equal ranks
    int32_t slot;
    bool operator<(const Entry& o) const {
      if (rank != o.rank) return rank < o.rank;
      if (tie != o.tie) return tie < o.tie;
      return slot < o.slot;
    }
  };
  Entry EntryOf(int32_t s) const {
    const uint64_t tie = ties_ == Ties::kNewestLoad ? UINT64_MAX - loaded_[s] : order_[s];
    const double rank = Rank(key_[s]);
    return {std::isnan(rank) ? 0.0 : rank, tie, s};  // a NaN would break the set's order
  }
  // A slot keeps its set node while not evictable, so that only its first Link allocates.
  void Link(int32_t s) {
    if (node_[s].empty()) {
      where_[s] = ordered_.insert(EntryOf(s)).first;
    } else {
      node_[s].value() = EntryOf(s);
      where_[s] = ordered_.insert(std::move(node_[s])).position;
    }
    in_[s] = true;
  }
  void Unlink(int32_t s) {
    node_[s] = ordered_.extract(where_[s]);
    in_[s] = false;
  }

  Ties ties_;
  std::vector<uint32_t> key_;                     // (n_slots) expert held by each slot
  std::vector<uint64_t> order_;                   // (n_slots) when each slot became evictable
  std::vector<uint64_t> loaded_;                  // (n_slots) when each slot's expert was assigned
  std::set<Entry> ordered_;                       // the evictable slots, victim first
  std::vector<std::set<Entry>::iterator> where_;  // (n_slots) each evictable slot's entry
  std::vector<std::set<Entry>::node_type> node_;  // (n_slots) each other slot's spare node
  std::vector<bool> in_;                          // (n_slots) evictable now
  std::vector<int32_t> slot_of_key_;              // (n_keys) the slot assigned each key, or -1
  std::vector<int32_t> relink_;                   // (n_slots reserved) RerankedAll's list
  uint64_t clock_ = 0;
};

class LfuPolicy final : public RankedPolicy {
 public:
  LfuPolicy(int32_t n_slots, uint32_t n_keys)
      : RankedPolicy(n_slots, n_keys, Ties::kNewestLoad),
        count_(n_keys, 0),
        period_(uint64_t(n_slots) * 8) {}
  void StartPass() override {
    if (accesses_ < period_) return;
    accesses_ = 0;
    for (float& c : count_) c *= 0.5f;
    RerankedAll();
  }
  void Access(uint32_t key) override {
    if (key < count_.size()) {
      count_[key] += 1;
      Reranked(key);
    }
    ++accesses_;
  }
  std::string name() const override { return "lfu"; }

 protected:
  double Rank(uint32_t key) const override { return key < count_.size() ? count_[key] : 0; }

 private:
  std::vector<float> count_;  // (n_keys) aged access counts
  uint64_t period_;
  uint64_t accesses_ = 0;  // since the last halving
};

class ScoredPolicy final : public RankedPolicy {
 public:
  ScoredPolicy(int32_t n_slots, std::vector<float> score)
      : RankedPolicy(n_slots, static_cast<uint32_t>(score.size()), Ties::kLeastRecent),
        score_(std::move(score)) {}
  std::string name() const override { return "placement"; }

 protected:
  double Rank(uint32_t key) const override { return key < score_.size() ? score_[key] : 0; }

 private:
  std::vector<float> score_;  // (n_keys) profile activations per byte
};

}  // namespace

std::unique_ptr<EvictionPolicy> MakeLruPolicy(int32_t n_slots) {
  return std::make_unique<LruPolicy>(n_slots);
}

std::unique_ptr<EvictionPolicy> MakeLfuPolicy(int32_t n_slots, uint32_t n_keys) {
  return std::make_unique<LfuPolicy>(n_slots, n_keys);
}

std::unique_ptr<EvictionPolicy> MakeScoredPolicy(int32_t n_slots, std::vector<float> score) {
  return std::make_unique<ScoredPolicy>(n_slots, std::move(score));
}

std::unique_ptr<EvictionPolicy> MakeEvictionPolicy(const std::string& name, int32_t n_slots,
                                                   uint32_t n_keys, std::vector<float> score) {
  if (name == "lru") return MakeLruPolicy(n_slots);
  if (name == "lfu") return MakeLfuPolicy(n_slots, n_keys);
  if (name == "placement") return MakeScoredPolicy(n_slots, std::move(score));
  return nullptr;
}

}  // namespace mt
