// A test double: an IoEngine that wraps a real one and makes chosen reads fail, come back
// short, come back late or come back with flipped bits, so that callers can be tested
// against the failures a disk can produce. Compiled into mt_io so any layer's tests can
// use it; production code never constructs one.
//
// Determinism: which reads get a fault depends only on the plan (its seed and rules) and on
// the order of the ops across Submit calls; the garbage, the short lengths and the flipped
// bits of a read depend only on the seed and that read's position in that order. Only
// kDelay depends on the clock.
#pragma once

#include <cerrno>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/io_engine.h"

namespace mt {

enum class FaultKind {
  // The read is issued; its completion's result is replaced by -error. The buffer may or
  // may not have been written (as with a real failed read).
  kError,
  // The read is issued; a successful result r > 0 is replaced by a smaller one k (see
  // short_bytes) and bytes [k, r) of the buffer are overwritten with seeded garbage, so a
  // caller that uses bytes past the result sees wrong data. Results <= 0 pass unchanged.
  kShortRead,
  // The completion is held back delay_ms after the real read completes.
  kDelay,
  // After a successful read (r > 0), flip_bits distinct bits in bytes [0, r) are flipped;
  // the result is unchanged. Results <= 0 pass unchanged.
  kCorrupt,
};

// Which reads a rule hits and what it does to them. The conditions that are set must all
// hold: `match`, then every_nth, then probability, then max_faults.
struct FaultRule {
  FaultKind kind = FaultKind::kError;

  std::function<bool(const ReadOp&)> match;  // empty: every read
  uint64_t every_nth = 0;    // > 0: only the n-th, 2n-th, ... read that passes `match`
  double probability = 1.0;  // then fires with this probability (seeded draw)
  uint64_t max_faults = std::numeric_limits<uint64_t>::max();  // stops after this many

  int error = EIO;           // kError: the errno the completion carries (negated)
  int64_t short_bytes = -1;  // kShortRead: bytes to report, capped at r - 1; -1: seeded in [0, r)
  int delay_ms = 10;         // kDelay
  int flip_bits = 1;         // kCorrupt: distinct bits to flip (capped at 8 * r)
};

struct FaultPlan {
  uint64_t seed = 1;
  // Every rule sees every read (its every_nth count and random draws advance whether or not
  // an earlier rule fired); the first rule that fires decides the read's one fault.
  std::vector<FaultRule> rules;
};

// Faults injected so far (only faults that changed something: a short read or corruption
// of a result <= 0 does not count).
struct FaultCounters {
  uint64_t reads = 0;  // reads submitted through the wrapper
  uint64_t errors = 0;
  uint64_t short_reads = 0;
  uint64_t delays = 0;
  uint64_t corruptions = 0;
};

// Thread-safe like the real engines (a mutex; a blocked Wait does not hold it). A Wait
// that sleeps only on delayed completions notices reads another thread submits meanwhile
// when the next delayed one is due.
class FaultInjectingEngine final : public IoEngine {
 public:
  FaultInjectingEngine(std::unique_ptr<IoEngine> inner, FaultPlan plan);
  // Destroys the inner engine first (it waits for started reads), then drops held
  // completions.
  ~FaultInjectingEngine() override;

  Result<int> AddFile(const std::string& path, DirectMode direct) override;
  bool is_direct(int file) const override;
  Status Submit(std::span<const ReadOp> ops) override;
  size_t Wait(std::span<ReadCompletion> out, size_t min_completions, int timeout_ms) override;
  size_t in_flight() const override;
  std::string name() const override;  // "faulty(<inner name>)"

  FaultCounters counters() const;

 private:
  struct Entry {
    ReadOp op;        // the caller's op (with the caller's tag)
    int rule = -1;    // index of the rule that fired, -1: none
    uint64_t serial;  // position of the op in submission order: seeds its own randomness
  };
  struct Held {
    int64_t release_ns;  // steady clock
    ReadCompletion completion;
  };

  int DecideLocked(const ReadOp& op);
  void ProcessLocked(std::span<const ReadCompletion> inner_done);
  void ReleaseDueLocked();

  mutable std::mutex mu_;
  std::unique_ptr<IoEngine> inner_;
  FaultPlan plan_;
  std::vector<uint64_t> rule_matches_;  // (rules) reads that passed each rule's `match`
  std::vector<uint64_t> rule_fired_;    // (rules) faults each rule decided
  uint64_t draw_state_;                 // the plan's random stream (SplitMix64 state)
  uint64_t next_serial_ = 0;
  std::unordered_map<uint64_t, Entry> issued_;  // by serial (the inner op's tag)
  std::vector<Held> held_;                      // delayed completions, not yet due
  std::vector<ReadCompletion> ready_;           // due, not yet returned by Wait (FIFO)
  FaultCounters counters_;
};

}  // namespace mt
