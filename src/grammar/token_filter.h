// A grammar applied to sampling: which tokens of a vocabulary can come next.
#pragma once

#include <cstdint>
#include <memory>
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

 private:
  enum Kind : uint8_t { kText, kEnd, kNever };
  std::string bytes_;              // every text token's bytes, one after another
  std::vector<uint32_t> offsets_;  // (n_vocab + 1) where each token's bytes start
  std::vector<Kind> kinds_;        // (n_vocab) end-of-generation and control tokens
};

// One sequence's grammar state as a sampler filter: a text token is allowed when the
// grammar can take its bytes next, an end-of-generation token when the text so far is a
// whole sentence; control tokens never, nor tokens with no bytes. Not thread-safe.
//
// A lazy filter (llama.cpp's lazy grammars) allows everything until the output contains
// `trigger`; the grammar then applies to the text after it. A token whose bytes complete the
// trigger is allowed only when the grammar takes the rest of its bytes.
class GrammarFilter : public TokenFilter {
 public:
  GrammarFilter(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const GrammarVocab> vocab,
                std::string trigger = "");

  bool Allows(int32_t id) const override;
  // Moves past the sampled token `id`. Returns false, changing nothing, when the grammar
  // refuses it (a token Allows said no to). An end-of-generation token changes nothing
  // (accepted when the output is complete).
  bool Accept(int32_t id);
  // The output so far is a whole sentence of the grammar (a lazy filter not yet triggered:
  // whole free text).
  bool IsComplete() const { return !active_ || matcher_.IsComplete(); }
  // Whether the grammar applies yet (always, without a trigger).
  bool active() const { return active_; }

 private:
  // Lazy: where `piece`, after the text so far, completes the trigger: the offset in
  // `piece` just past it, or npos.
  size_t TriggerEnd(std::string_view piece) const;

  Matcher matcher_;
  std::shared_ptr<const GrammarVocab> vocab_;
  std::string trigger_;
  bool active_;
  std::string tail_;  // lazy, not yet triggered: the output's last trigger_.size() - 1 bytes
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
