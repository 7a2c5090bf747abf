#include "experts/eviction_policy.h"

#include <algorithm>

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
    if (tail_ != kNone) next_[tail_] = s; else head_ = s;
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
    if (prev_[s] != kNone) next_[prev_[s]] = next_[s]; else head_ = next_[s];
    if (next_[s] != kNone) prev_[next_[s]] = prev_[s]; else tail_ = prev_[s];
    prev_[s] = next_[s] = kNone;
    in_[s] = false;
  }
  std::vector<int32_t> prev_, next_;  // (n_slots)
  std::vector<bool> in_;              // (n_slots)
  int32_t head_ = kNone, tail_ = kNone;
};

// Scans the evictable slots for the lowest value of `rank`; among equals, the one that
// became evictable longest ago (kLeastRecent) or the one loaded last (kNewestLoad).
class RankedPolicy : public EvictionPolicy {
 public:
  enum class Ties { kLeastRecent, kNewestLoad };
  RankedPolicy(int32_t n_slots, Ties ties)
      : ties_(ties), key_(n_slots, 0), order_(n_slots), loaded_(n_slots) {}
  void Assign(int32_t slot, uint32_t key) override {
    key_[slot] = key;
    loaded_[slot] = ++clock_;
  }
  void Insert(int32_t s) override {
    order_[s] = ++clock_;
    if (std::find(evictable_.begin(), evictable_.end(), s) == evictable_.end()) {
      evictable_.push_back(s);
    }
  }
  void Remove(int32_t s) override {
    auto it = std::find(evictable_.begin(), evictable_.end(), s);
    if (it != evictable_.end()) {
      *it = evictable_.back();
      evictable_.pop_back();
    }
  }
  int32_t Victim() override {
    int32_t best = -1;
    for (int32_t s : evictable_) {
      if (best < 0 || Rank(key_[s]) < Rank(key_[best]) ||
          (Rank(key_[s]) == Rank(key_[best]) && Before(s, best))) {
        best = s;
      }
    }
    return best;
  }

 protected:
  virtual double Rank(uint32_t key) const = 0;

 private:
  // Whether s goes before t among equal ranks.
  bool Before(int32_t s, int32_t t) const {
    return ties_ == Ties::kNewestLoad ? loaded_[s] > loaded_[t] : order_[s] < order_[t];
  }

  Ties ties_;
  std::vector<uint32_t> key_;     // (n_slots) expert held by each slot
  std::vector<uint64_t> order_;   // (n_slots) when each slot became evictable
  std::vector<uint64_t> loaded_;  // (n_slots) when each slot's expert was assigned
  std::vector<int32_t> evictable_;
  uint64_t clock_ = 0;
};

class LfuPolicy final : public RankedPolicy {
 public:
  LfuPolicy(int32_t n_slots, uint32_t n_keys)
      : RankedPolicy(n_slots, Ties::kNewestLoad),
        count_(n_keys, 0),
        period_(uint64_t(n_slots) * 8) {}
  void StartPass() override {
    if (accesses_ < period_) return;
    accesses_ = 0;
    for (float& c : count_) c *= 0.5f;
  }
  void Access(uint32_t key) override {
    if (key < count_.size()) count_[key] += 1;
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
      : RankedPolicy(n_slots, Ties::kLeastRecent), score_(std::move(score)) {}
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
