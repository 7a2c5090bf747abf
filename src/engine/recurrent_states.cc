#include "engine/recurrent_states.h"

#include <algorithm>
#include <string>

namespace mt {

RecurrentStates::RecurrentStates(uint32_t n_seq)
    : n_seq_(n_seq),
      live_(n_seq, kLive0),
      live_pos_(n_seq, kNone),
      checkpoint_pos_(n_seq, kNone),
      first_pos_(n_seq, kNone),
      last_pos_(n_seq, kNone),
      take_checkpoint_(n_seq, kNone),
      source_(n_seq, Source::kZero) {}

int RecurrentStates::SourceCopy(uint32_t seq) const {
  switch (source_[seq]) {
    case Source::kZero:
      return -1;
    case Source::kLive:
      return live_[seq];
    case Source::kCheckpoint:
      return kCheckpoint;
  }
  return -1;
}

uint32_t RecurrentStates::ReusablePrefix(uint32_t seq, uint32_t n) const {
  uint32_t best = 0;
  for (uint32_t saved : {live_pos_[seq], checkpoint_pos_[seq]}) {
    if (saved != kNone && saved <= n) best = std::max(best, saved);
  }
  return best;
}

Status RecurrentStates::BeginDecode(std::span<const BatchToken> batch) {
  std::fill(first_pos_.begin(), first_pos_.end(), kNone);
  for (const BatchToken& b : batch) {
    if (first_pos_[b.seq] == kNone) {
      first_pos_[b.seq] = b.pos;
    } else if (b.pos != last_pos_[b.seq] + 1) {
      const uint32_t last = last_pos_[b.seq];
      std::fill(first_pos_.begin(), first_pos_.end(), kNone);
      return InvalidArgument(
          "sequence {}: position {} follows {} in the batch; a model with recurrent layers takes "
          "a sequence's tokens in order",
          b.seq, b.pos, last);
    }
    last_pos_[b.seq] = b.pos;
  }
  for (uint32_t s = 0; s < n_seq_; ++s) {
    const uint32_t p = first_pos_[s];
    if (p == kNone || p == 0 || live_pos_[s] == p || checkpoint_pos_[s] == p) continue;
    std::fill(first_pos_.begin(), first_pos_.end(), kNone);
    return InvalidArgument(
        "sequence {} cannot go on at position {}: its recurrent state is saved only at {}{} "
        "(evaluate from there, or from 0)",
        s, p, live_pos_[s] == kNone ? std::string("none") : std::to_string(live_pos_[s]),
        checkpoint_pos_[s] == kNone ? "" : fmt::format(" and {}", checkpoint_pos_[s]));
  }
  for (uint32_t s = 0; s < n_seq_; ++s) {
    const uint32_t p = first_pos_[s];
    if (p == kNone) continue;
    source_[s] = p == 0 ? Source::kZero : live_pos_[s] == p ? Source::kLive : Source::kCheckpoint;
    // States past p hold tokens the sequence no longer has (it was truncated at p).
    if (live_pos_[s] != kNone && live_pos_[s] > p) live_pos_[s] = kNone;
    if (checkpoint_pos_[s] != kNone && checkpoint_pos_[s] > p) checkpoint_pos_[s] = kNone;
    take_checkpoint_[s] = last_pos_[s] > p ? last_pos_[s] : kNone;
  }
  return Status::Ok();
}

void RecurrentStates::EndDecode(bool committed) {
  for (uint32_t s = 0; s < n_seq_; ++s) {
    if (first_pos_[s] == kNone) continue;
    if (committed) {
      live_[s] = NextCopy(s);
      live_pos_[s] = last_pos_[s] + 1;
      if (take_checkpoint_[s] != kNone) checkpoint_pos_[s] = take_checkpoint_[s];
    } else if (take_checkpoint_[s] != kNone) {
      checkpoint_pos_[s] = kNone;  // some layers may have written it
    }
    first_pos_[s] = kNone;
  }
}

}  // namespace mt
