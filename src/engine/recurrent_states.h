// Which recurrent state each sequence's tokens read and write (gated DeltaNet's, on the CPU
// and on a device: engine/attention_block.h DeltaNetAttention, engine/gpu_attention.h
// GpuDeltaNetAttention). Per sequence and layer a block keeps three copies of its state: two
// live ones that alternate (the live one holds the state after live_pos tokens; a Decode reads
// it for the sequence's first token and writes the other, which EndDecode(true) makes live, so
// a failed Decode leaves the live state as it was) and a checkpoint, the state before the last
// token of a Decode that evaluated two or more of the sequence's tokens (a prompt), so a
// request that repeats or extends the prompt goes on from there. A sequence resumes only where
// a state was saved (the live one, the checkpoint, or position 0). Not thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "engine/context.h"

namespace mt {

class RecurrentStates {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;
  enum Copy { kLive0, kLive1, kCheckpoint };  // a copy's index among a sequence's three

  explicit RecurrentStates(uint32_t n_seq);

  // AttentionBlock's contract (engine/attention_block.h).
  uint32_t ReusablePrefix(uint32_t seq, uint32_t n) const;
  Status BeginDecode(std::span<const BatchToken> batch);
  void EndDecode(bool committed);

  // During a Decode, for a sequence in it: the copy it writes (and its tokens after the first
  // read), the copy its first token reads (-1: zeros), whether `pos` is its first token and
  // whether the checkpoint is taken after the token at `pos`.
  int NextCopy(uint32_t seq) const { return live_[seq] == kLive0 ? kLive1 : kLive0; }
  int SourceCopy(uint32_t seq) const;
  bool IsFirst(uint32_t seq, uint32_t pos) const { return pos == first_pos_[seq]; }
  bool CheckpointAfter(uint32_t seq, uint32_t pos) const {
    return pos + 1 == take_checkpoint_[seq];
  }

 private:
  enum class Source { kZero, kLive, kCheckpoint };
  const uint32_t n_seq_;
  // Per sequence (n_seq).
  std::vector<int> live_;                 // kLive0 or kLive1
  std::vector<uint32_t> live_pos_;        // tokens the live state holds, kNone: none valid
  std::vector<uint32_t> checkpoint_pos_;  // tokens the checkpoint holds, kNone: none
  // The Decode in progress: its first and last position per sequence (kNone: not in it),
  // where its first token reads from, and the checkpoint it takes (kNone: none).
  std::vector<uint32_t> first_pos_, last_pos_, take_checkpoint_;
  std::vector<Source> source_;
};

}  // namespace mt
