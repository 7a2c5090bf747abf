// A grammar applied to sampling: which tokens of a vocabulary can come next.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"
#include "sampler/sampler.h"
#include "tokenizer/tokenizer.h"

namespace mt::grammar {

// The vocabulary as a grammar sees it, built once per tokenizer and shared: each token's
// bytes, and which tokens end generation. Immutable, thread-safe.
class GrammarVocab {
 public:
  explicit GrammarVocab(const Tokenizer& tokenizer);

  int32_t n_vocab() const { return static_cast<int32_t>(kinds_.size()); }
  // Text tokens (normal, byte, user-defined) give their bytes; others "".
  std::string_view piece(int32_t id) const {
    return std::string_view(bytes_).substr(offsets_[id], offsets_[id + 1] - offsets_[id]);
  }
  bool is_text(int32_t id) const { return kinds_[id] == kText; }
  bool is_end(int32_t id) const { return kinds_[id] == kEnd; }
  // The text tokens whose bytes start with b0 then b1 (b1 = kOneByte: the token is b0
  // alone), and the end-of-generation tokens.
  static constexpr int kOneByte = 256;
  std::span<const int32_t> starting_with(int b0, int b1) const {
    return Group(by_prefix_, prefix_start_, static_cast<size_t>(b0) * 257 + b1);
  }
  std::span<const int32_t> ends() const { return ends_; }
  // The text tokens whose bytes contain `byte`.
  std::span<const int32_t> containing(uint8_t byte) const {
    return Group(by_byte_, byte_start_, byte);
  }

 private:
  enum Kind : uint8_t { kText, kEnd, kNever };
  static std::span<const int32_t> Group(const std::vector<int32_t>& ids,
                                        const std::vector<uint32_t>& start, size_t k) {
    return std::span(ids).subspan(start[k], start[k + 1] - start[k]);
  }
  std::string bytes_;                   // every text token's bytes, one after another
  std::vector<uint32_t> offsets_;       // (n_vocab + 1) where each token's bytes start
  std::vector<Kind> kinds_;             // (n_vocab) end-of-generation and control tokens
  std::vector<int32_t> by_prefix_;      // (text tokens with bytes) by first two bytes
  std::vector<uint32_t> prefix_start_;  // (256 * 257 + 1) where each two-byte prefix starts
  std::vector<int32_t> ends_;           // end-of-generation tokens
  std::vector<int32_t> by_byte_;        // (sum of distinct bytes per text token) by byte
  std::vector<uint32_t> byte_start_;    // (257) where each byte's tokens start
};

// Where a grammar starts applying (by default: at the first token).
//
// `trigger` (llama.cpp's lazy grammars): everything is allowed until the output contains it;
// the grammar then applies to the text after it. A token whose bytes complete the trigger is
// allowed only when the grammar takes the rest of its bytes.
//
// `block_open` / `block_close` (both or neither): a leading block -- from `block_open` at the
// very start of the output up to the first `block_close` -- stays free text: a thinking
// model's reasoning. With a trigger, the trigger is searched only after it (the model may
// write the call syntax as words while thinking); without one, the grammar applies right
// after the block, or from the start when the output does not open one, and the output
// cannot end before the grammar is complete. `in_block`: the prompt opened the block
// already (the output starts inside it).
struct LazyStart {
  std::string trigger = {};
  std::string block_open = {};
  std::string block_close = {};
  bool in_block = false;
};

// One sequence's grammar state as a sampler filter: a text token is allowed when the
// grammar can take its bytes next, an end-of-generation token when the text so far is a
// whole sentence; control tokens never, nor tokens with no bytes. Before the grammar starts
// (LazyStart, above) the text is free. Not thread-safe.
class GrammarFilter : public TokenFilter {
 public:
  GrammarFilter(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const GrammarVocab> vocab,
                LazyStart lazy = {});

  bool Allows(int32_t id) const override;
  // Once the grammar applies: every token that starts with a refused byte or byte pair is
  // skipped with it, so a state that refuses most of the vocabulary costs its first bytes.
  // Before: only the tokens holding the last byte of the tag searched for can start it.
  void MarkAllowed(std::span<uint8_t> allowed) const override;
  // Moves past the sampled token `id`. Returns false, changing nothing, when the grammar
  // refuses it (a token Allows said no to). An end-of-generation token changes nothing
  // (accepted when the output is complete).
  bool Accept(int32_t id);
  // The output so far is a whole sentence of the grammar (a filter waiting for a trigger:
  // whole free text; one waiting for the end of a block: not yet).
  bool IsComplete() const { return active_ ? matcher_.IsComplete() : !lazy_.trigger.empty(); }
  // Whether the grammar applies yet (from the first token without a LazyStart).
  bool active() const { return active_; }

 private:
  // Before the grammar starts: where the output is (kStart: perhaps the start of block_open
  // so far; kBlock: inside the leading block; kFree: searching for the trigger), and the
  // output's last bytes that may begin the tag searched for (kStart: all of it).
  enum class Phase : uint8_t { kStart, kBlock, kFree };
  // Whether the grammar starts inside `piece` (after the text so far): then `rest` receives
  // the text it applies to first. When not, `phase` and `tail` (if given) receive the state
  // after `piece`.
  bool Starts(std::string_view piece, std::string* rest, Phase* phase = nullptr,
              std::string* tail = nullptr) const;

  Matcher matcher_;
  std::shared_ptr<const GrammarVocab> vocab_;
  LazyStart lazy_;
  bool active_;
  Phase phase_;
  std::string tail_;
  // Whether the grammar can take a token's first byte, and its first two bytes, now: most
  // refusals then cost a table lookup (after "{" a third of Qwen3's vocabulary starts with a
  // space, and all but a few die on the byte after it). An entry holds the generation it was
  // asked in (2 * generation_ + answer); Accept starts a new generation.
  uint32_t Cached(std::vector<uint32_t>& table, uint32_t key, std::string_view prefix) const;
  uint32_t generation_ = 1;
  mutable std::vector<uint32_t> first_byte_;  // (256)
  mutable std::vector<uint32_t> first_pair_;  // (65536) by first byte * 256 + second byte
};

}  // namespace mt::grammar
