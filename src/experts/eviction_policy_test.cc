// Each policy's victim order, derived by hand from the sequence of calls the stream store
// makes: Assign (slot holds key) -> Insert (evictable) / Remove (pinned or emptied).
#include "experts/eviction_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

namespace mt {
namespace {

// Slots 0..n-1 hold keys 10..10+n-1 and become evictable in slot order.
void Fill(EvictionPolicy& p, int32_t n) {
  for (int32_t s = 0; s < n; ++s) {
    p.Assign(s, 10 + s);
    p.Insert(s);
  }
}

TEST(EvictionPolicyTest, LruEvictsWhatBecameEvictableLongestAgo) {
  auto p = MakeLruPolicy(4);
  EXPECT_EQ(p->Victim(), -1);
  Fill(*p, 4);
  EXPECT_EQ(p->Victim(), 0);
  p->Remove(0);  // slot 0 pinned by a demand...
  EXPECT_EQ(p->Victim(), 1);
  p->Insert(0);  // ... and released: now the most recent
  p->Remove(1);
  p->Remove(2);
  EXPECT_EQ(p->Victim(), 3);
  p->Remove(3);
  EXPECT_EQ(p->Victim(), 0);
  p->Remove(0);
  EXPECT_EQ(p->Victim(), -1);
}

TEST(EvictionPolicyTest, LfuEvictsTheLeastUsedAndForgetsOldUse) {
  // 2 slots: counts halve at the first pass start after 2 * 8 = 16 accesses.
  auto p = MakeLfuPolicy(2, 64);
  Fill(*p, 2);  // slot 0 = key 10, slot 1 = key 11
  for (int i = 0; i < 3; ++i) p->Access(10);
  p->Access(11);
  EXPECT_EQ(p->Victim(), 1);  // key 11: 1 use against 3
  p->Access(11);
  p->Access(11);
  p->Access(11);
  // 3 against 4 (7 accesses so far): key 10 is now the least used.
  EXPECT_EQ(p->Victim(), 0);
  // Equal counts: the one loaded last goes first (slot 1 was assigned after slot 0).
  p->Access(10);
  EXPECT_EQ(p->Victim(), 1);
  // 8 accesses to key 12 (no slot) bring the total to 16: nothing halves before a pass
  // starts, so a fresh key with 3 uses stays below the old favourites (4 each).
  for (int i = 0; i < 8; ++i) p->Access(12);
  p->Remove(0);
  p->Assign(0, 13);
  for (int i = 0; i < 3; ++i) p->Access(13);
  p->Insert(0);
  EXPECT_EQ(p->Victim(), 0);
  // The pass start halves 4 / 4 / 8 / 3 to 2 / 2 / 4 / 1.5; three more uses lift key 13 to
  // 4.5, above key 11's 2.
  p->StartPass();
  for (int i = 0; i < 3; ++i) p->Access(13);
  EXPECT_EQ(p->Victim(), 1);
}

TEST(EvictionPolicyTest, PlacementKeepsTheBestScoredThenFallsBackToLru) {
  std::vector<float> score(64, 0.0f);
  score[10] = 5;  // slot 0
  score[12] = 1;  // slot 2
  auto p = MakeScoredPolicy(4, score);
  Fill(*p, 4);
  // Slots 1 and 3 score 0: the older of them (1) goes first.
  EXPECT_EQ(p->Victim(), 1);
  p->Remove(1);
  EXPECT_EQ(p->Victim(), 3);
  p->Remove(3);
  EXPECT_EQ(p->Victim(), 2);
  p->Remove(2);
  EXPECT_EQ(p->Victim(), 0);
  // Access counts do not matter to placement.
  for (int i = 0; i < 100; ++i) p->Access(12);
  p->Insert(2);
  EXPECT_EQ(p->Victim(), 2);
}

// Hits of `p` over `keys` with `n_slots` slots, driven as the stream store does: a hit is
// pinned while used (Remove, then Insert); a miss takes a free slot or the victim's.
// A pass starts every `pass` keys.
int CountHits(EvictionPolicy& p, int32_t n_slots, const std::vector<uint32_t>& keys, size_t pass) {
  std::vector<int64_t> held(n_slots, -1);  // key in each slot
  int hits = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint32_t key = keys[i];
    if (i % pass == 0) p.StartPass();
    p.Access(key);
    int32_t slot = -1;
    for (int32_t s = 0; s < n_slots; ++s) slot = held[s] == key ? s : slot;
    if (slot >= 0) {
      ++hits;
      p.Remove(slot);
    } else {
      for (int32_t s = 0; s < n_slots && slot < 0; ++s) slot = held[s] < 0 ? s : -1;
      if (slot < 0) {
        slot = p.Victim();
        p.Remove(slot);
      }
      held[slot] = key;
      p.Assign(slot, key);
    }
    p.Insert(slot);
  }
  return hits;
}

TEST(EvictionPolicyTest, ACycleLongerThanTheCacheDefeatsLruNotLfu) {
  // A token visits 6 layers in order; layers 0-2 always route to the same expert, layers
  // 3-5 to one of 5 others. 4 slots hold less than a token's 6 experts: LRU evicts each
  // expert just before its layer comes round again (why LFU is the default,
  // docs/journal/tiering.md); LFU keeps the three that every token uses.
  std::vector<uint32_t> keys;
  for (uint32_t t = 0; t < 200; ++t) {
    for (uint32_t layer = 0; layer < 6; ++layer) {
      keys.push_back(layer < 3 ? layer : 10 * layer + (t * 7 + layer) % 5);
    }
  }
  auto lru = MakeLruPolicy(4);
  auto lfu = MakeLfuPolicy(4, 64);
  EXPECT_EQ(CountHits(*lru, 4, keys, 6), 0);
  EXPECT_GE(CountHits(*lfu, 4, keys, 6), 3 * 195);  // the always-used three, after a few tokens
}

TEST(EvictionPolicyTest, LfuKeepsPartOfAScanLongerThanTheCache) {
  // Many sequences decoded together: every pass asks for the same 6 experts once each, and
  // 4 slots hold fewer. With equal counts, LRU order would evict each expert just before
  // it comes round again; LFU evicts the expert loaded last, so the first three stay and
  // the other three stream through the fourth slot. Counts halve (every 32 accesses) only
  // at a pass start: halving mid-pass would rank the experts after that point above the
  // ones before it, and the cache would cycle through them.
  std::vector<uint32_t> keys;
  for (uint32_t t = 0; t < 100; ++t) {
    for (uint32_t k = 0; k < 6; ++k) keys.push_back(k);
  }
  auto lru = MakeLruPolicy(4);
  auto lfu = MakeLfuPolicy(4, 64);
  EXPECT_EQ(CountHits(*lru, 4, keys, 6), 0);
  EXPECT_EQ(CountHits(*lfu, 4, keys, 6), 3 * 99);
}

// The ranked policies' contract, by scanning every evictable slot (what they did before
// they kept an ordered set): the lowest rank; among equals, the slot loaded last (lfu) or
// evictable longest (placement). LFU counts as MakeLfuPolicy documents.
class ScanOracle {
 public:
  ScanOracle(bool lfu, int32_t n_slots, std::vector<float> score)
      : lfu_(lfu),
        score_(std::move(score)),
        key_(n_slots),
        order_(n_slots),
        loaded_(n_slots),
        count_(score_.size()),
        period_(uint64_t(n_slots) * 8) {}
  void StartPass() {
    if (!lfu_ || accesses_ < period_) return;
    accesses_ = 0;
    for (float& c : count_) c *= 0.5f;
  }
  void Access(uint32_t key) {
    if (key < count_.size()) count_[key] += 1;
    ++accesses_;
  }
  void Assign(int32_t s, uint32_t key) {
    key_[s] = key;
    loaded_[s] = ++clock_;
  }
  void Insert(int32_t s) {
    order_[s] = ++clock_;
    evictable_.insert(s);
  }
  void Remove(int32_t s) { evictable_.erase(s); }
  int32_t Victim() const {
    int32_t best = -1;
    for (int32_t s : evictable_) {
      if (best < 0 || Rank(s) < Rank(best) || (Rank(s) == Rank(best) && Before(s, best))) {
        best = s;
      }
    }
    return best;
  }

 private:
  double Rank(int32_t s) const {
    const std::vector<float>& r = lfu_ ? count_ : score_;
    return key_[s] < r.size() ? r[key_[s]] : 0;
  }
  bool Before(int32_t s, int32_t t) const {
    return lfu_ ? loaded_[s] > loaded_[t] : order_[s] < order_[t];
  }
  bool lfu_;
  std::vector<float> score_;
  std::vector<uint32_t> key_;
  std::vector<uint64_t> order_, loaded_;
  std::vector<float> count_;
  std::set<int32_t> evictable_;
  uint64_t period_, accesses_ = 0, clock_ = 0;
};

// Random traffic as the stream store makes it (hits pinned while used, several pinned at
// once, misses taking free slots or the victim's, passes, accesses to uncached keys), with
// few keys so that ranks tie often: the policy's victim is the oracle's after every call.
TEST(EvictionPolicyTest, RankedPoliciesPickWhatAScanWould) {
  for (const bool lfu : {true, false}) {
    for (uint32_t seed = 1; seed <= 4; ++seed) {
      const int32_t n = 12;
      const uint32_t n_keys = 40;
      std::mt19937 rng(seed);
      std::vector<float> score(n_keys);
      for (float& x : score) x = float(rng() % 4);  // ties on purpose
      auto policy = lfu ? MakeLfuPolicy(n, n_keys) : MakeScoredPolicy(n, score);
      ScanOracle oracle(lfu, n, score);
      std::vector<int64_t> held(n, -1);  // (n) key in each slot
      std::vector<int> pins(n, 0);       // (n)
      for (int step = 0; step < 3000; ++step) {
        const uint32_t op = rng() % 10;
        if (op == 0) {
          policy->StartPass();
          oracle.StartPass();
        } else if (op == 1 && rng() % 4 == 0) {  // an evictable slot refilled in place
          const int32_t s = int32_t(rng() % n);
          const uint32_t key = rng() % n_keys;
          if (held[s] < 0 || pins[s] > 0 ||
              std::find(held.begin(), held.end(), int64_t{key}) != held.end()) {
            continue;
          }
          held[s] = key;
          policy->Assign(s, key);
          oracle.Assign(s, key);
        } else if (op <= 2) {  // a pinned slot is released
          const int32_t s = int32_t(rng() % n);
          if (pins[s] > 0 && --pins[s] == 0) {
            policy->Insert(s);
            oracle.Insert(s);
          }
        } else {  // a request, skewed to low keys
          const uint32_t key = std::min<uint32_t>(rng() % n_keys, rng() % n_keys);
          policy->Access(key);
          oracle.Access(key);
          ASSERT_EQ(policy->Victim(), oracle.Victim()) << "after an access, step " << step;
          int32_t s = -1;
          for (int32_t i = 0; i < n; ++i) s = held[i] == key ? i : s;
          if (s < 0) {
            for (int32_t i = 0; i < n && s < 0; ++i) s = held[i] < 0 ? i : -1;
            if (s < 0) s = oracle.Victim();
            if (s < 0) continue;  // everything pinned: the request waits
            held[s] = key;
            policy->Remove(s);
            oracle.Remove(s);
            policy->Assign(s, key);
            oracle.Assign(s, key);
          } else if (pins[s] == 0) {
            policy->Remove(s);
            oracle.Remove(s);
          }
          if (rng() % 3 == 0) {
            ++pins[s];  // held across the next calls
          } else if (pins[s] == 0) {
            policy->Insert(s);
            oracle.Insert(s);
          }
        }
        ASSERT_EQ(policy->Victim(), oracle.Victim())
            << (lfu ? "lfu" : "placement") << " seed " << seed << " step " << step;
      }
    }
  }
}

TEST(EvictionPolicyTest, ByName) {
  EXPECT_EQ(MakeEvictionPolicy("lru", 4, 8, {})->name(), "lru");
  EXPECT_EQ(MakeEvictionPolicy("lfu", 4, 8, {})->name(), "lfu");
  EXPECT_EQ(MakeEvictionPolicy("placement", 4, 8, std::vector<float>(8))->name(), "placement");
  EXPECT_EQ(MakeEvictionPolicy("fifo", 4, 8, {}), nullptr);
}

}  // namespace
}  // namespace mt
