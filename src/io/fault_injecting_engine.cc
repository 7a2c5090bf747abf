#include "io/fault_injecting_engine.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "base/check.h"

namespace mt {
namespace {

using Clock = std::chrono::steady_clock;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// SplitMix64: a small, well-mixed generator; the same seed gives the same stream everywhere.
uint64_t NextRandom(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double NextUnit(uint64_t& state) {  // uniform in [0, 1)
  return static_cast<double>(NextRandom(state) >> 11) * 0x1.0p-53;
}

// The random stream of one read: depends on the plan's seed and the read's serial only.
uint64_t ReadStream(uint64_t seed, uint64_t serial) {
  uint64_t s = seed ^ (serial * 0xd1b54a32d192ed03ull);
  return NextRandom(s);
}

}  // namespace

FaultInjectingEngine::FaultInjectingEngine(std::unique_ptr<IoEngine> inner, FaultPlan plan)
    : inner_(std::move(inner)),
      plan_(std::move(plan)),
      rule_matches_(plan_.rules.size(), 0),
      rule_fired_(plan_.rules.size(), 0),
      draw_state_(plan_.seed) {
  MT_CHECK(inner_ != nullptr);
}

FaultInjectingEngine::~FaultInjectingEngine() {
  std::lock_guard<std::mutex> lock(mu_);
  inner_.reset();
}

Result<int> FaultInjectingEngine::AddFile(const std::string& path, DirectMode direct) {
  return inner_->AddFile(path, direct);
}

bool FaultInjectingEngine::is_direct(int file) const { return inner_->is_direct(file); }

std::string FaultInjectingEngine::name() const { return "faulty(" + inner_->name() + ")"; }

FaultCounters FaultInjectingEngine::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

size_t FaultInjectingEngine::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return issued_.size() + held_.size() + ready_.size();
}

// Returns the index of the rule that fires for `op`, or -1. Advances every rule's count.
int FaultInjectingEngine::DecideLocked(const ReadOp& op) {
  int chosen = -1;
  for (size_t i = 0; i < plan_.rules.size(); ++i) {
    const FaultRule& rule = plan_.rules[i];
    if (rule.match && !rule.match(op)) continue;
    uint64_t n = ++rule_matches_[i];
    if (rule.every_nth > 0 && n % rule.every_nth != 0) continue;
    if (rule.probability < 1.0 && NextUnit(draw_state_) >= rule.probability) continue;
    if (rule_fired_[i] >= rule.max_faults) continue;
    if (chosen < 0) {
      chosen = static_cast<int>(i);
      ++rule_fired_[i];
    }
  }
  return chosen;
}

Status FaultInjectingEngine::Submit(std::span<const ReadOp> ops) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ReadOp> inner_ops;
  inner_ops.reserve(ops.size());
  uint64_t first_serial = next_serial_;
  for (const ReadOp& op : ops) {
    uint64_t serial = next_serial_++;
    issued_[serial] = Entry{op, DecideLocked(op), serial};
    ReadOp inner_op = op;
    inner_op.tag = serial;
    inner_ops.push_back(inner_op);
  }
  Status status = inner_->Submit(inner_ops);
  if (!status.ok()) {
    for (uint64_t s = first_serial; s < next_serial_; ++s) issued_.erase(s);
    return status;
  }
  counters_.reads += ops.size();
  return Status::Ok();
}

// Applies each entry's fault to the inner completions. mu_ held.
void FaultInjectingEngine::ProcessLocked(std::span<const ReadCompletion> inner_done) {
  for (const ReadCompletion& c : inner_done) {
    auto it = issued_.find(c.tag);
    MT_CHECK(it != issued_.end());
    Entry e = it->second;
    issued_.erase(it);
    ReadCompletion out{e.op.tag, c.result};
    if (e.rule < 0) {
      ready_.push_back(out);
      continue;
    }
    const FaultRule& rule = plan_.rules[static_cast<size_t>(e.rule)];
    uint64_t stream = ReadStream(plan_.seed, e.serial);
    auto* bytes = static_cast<uint8_t*>(e.op.dst);
    switch (rule.kind) {
      case FaultKind::kError:
        out.result = -rule.error;
        ++counters_.errors;
        break;
      case FaultKind::kShortRead:
        if (c.result > 0) {
          int64_t keep = rule.short_bytes >= 0
                             ? std::min(rule.short_bytes, c.result - 1)
                             : static_cast<int64_t>(NextRandom(stream) % uint64_t(c.result));
          for (int64_t i = keep; i < c.result; ++i) bytes[i] = uint8_t(NextRandom(stream));
          out.result = keep;
          ++counters_.short_reads;
        }
        break;
      case FaultKind::kDelay:
        held_.push_back({NowNs() + int64_t{rule.delay_ms} * 1000000, out});
        ++counters_.delays;
        continue;
      case FaultKind::kCorrupt:
        if (c.result > 0) {
          uint64_t n_bits = uint64_t(c.result) * 8;
          uint64_t flips = std::min<uint64_t>(uint64_t(std::max(rule.flip_bits, 0)), n_bits);
          std::vector<uint64_t> done;  // distinct bits, so no flip undoes another
          while (done.size() < flips) {
            uint64_t bit = NextRandom(stream) % n_bits;
            if (std::find(done.begin(), done.end(), bit) != done.end()) continue;
            done.push_back(bit);
            bytes[bit / 8] ^= uint8_t(1u << (bit % 8));
          }
          if (flips > 0) ++counters_.corruptions;
        }
        break;
    }
    ready_.push_back(out);
  }
}

void FaultInjectingEngine::ReleaseDueLocked() {
  int64_t now = NowNs();
  // Stable: delayed completions that fall due together keep their order.
  auto due = std::stable_partition(held_.begin(), held_.end(),
                                   [now](const Held& h) { return h.release_ns <= now; });
  for (auto it = held_.begin(); it != due; ++it) ready_.push_back(it->completion);
  held_.erase(held_.begin(), due);
}

size_t FaultInjectingEngine::Wait(std::span<ReadCompletion> out, size_t min_completions,
                                  int timeout_ms) {
  const int64_t deadline = timeout_ms < 0 ? INT64_MAX : NowNs() + int64_t{timeout_ms} * 1000000;
  std::vector<ReadCompletion> buf(64);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    size_t got;
    while ((got = inner_->Wait(buf, 0, 0)) > 0) ProcessLocked({buf.data(), got});
    ReleaseDueLocked();
    size_t in_flight = issued_.size() + held_.size() + ready_.size();
    if (ready_.size() >= std::min({min_completions, out.size(), in_flight})) break;
    int64_t now = NowNs();
    if (now >= deadline) break;
    int64_t until = deadline;
    for (const Held& h : held_) until = std::min(until, h.release_ns);
    bool inner_busy = !issued_.empty();
    lock.unlock();
    if (inner_busy) {
      // Whole milliseconds, rounded up, so a short wait does not turn into a busy loop.
      int64_t left_ns = until - now;
      int wait_ms = until == INT64_MAX ? -1 : int((left_ns + 999999) / 1000000);
      got = inner_->Wait(buf, 1, wait_ms);
      lock.lock();
      ProcessLocked({buf.data(), got});
    } else {
      std::this_thread::sleep_for(std::chrono::nanoseconds(until - now));
      lock.lock();
    }
  }
  size_t n = std::min(out.size(), ready_.size());
  std::copy_n(ready_.begin(), n, out.begin());
  ready_.erase(ready_.begin(), ready_.begin() + static_cast<ptrdiff_t>(n));
  return n;
}

}  // namespace mt
