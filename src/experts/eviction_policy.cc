#include "experts/eviction_policy.h"

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

}  // namespace

std::unique_ptr<EvictionPolicy> MakeLruPolicy(int32_t n_slots) {
  return std::make_unique<LruPolicy>(n_slots);
}

}  // namespace mt
