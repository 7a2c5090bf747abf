#include "grammar/token_filter.h"

#include <algorithm>
#include <utility>

#include "base/check.h"

namespace mt::grammar {

GrammarVocab::GrammarVocab(const Tokenizer& tokenizer) {
  const int32_t n = tokenizer.n_vocab();
  offsets_.reserve(static_cast<size_t>(n) + 1);
  kinds_.reserve(static_cast<size_t>(n));
  offsets_.push_back(0);
  for (int32_t id = 0; id < n; ++id) {
    const TokenType type = tokenizer.token_type(id);
    Kind kind = kNever;
    if (tokenizer.IsEndOfGeneration(id)) {
      kind = kEnd;
    } else if (type == TokenType::kNormal || type == TokenType::kByte ||
               type == TokenType::kUserDefined) {
      kind = kText;
      bytes_ += tokenizer.TokenPiece(id, /*special=*/false);
    }
    kinds_.push_back(kind);
    offsets_.push_back(static_cast<uint32_t>(bytes_.size()));
  }
}

GrammarFilter::GrammarFilter(std::shared_ptr<const Grammar> grammar,
                             std::shared_ptr<const GrammarVocab> vocab, std::string trigger)
    : matcher_(std::move(grammar)),
      vocab_(std::move(vocab)),
      trigger_(std::move(trigger)),
      active_(trigger_.empty()) {
  MT_CHECK(vocab_ != nullptr);
  first_byte_.assign(256, 0);
  first_pair_.assign(65536, 0);
}

uint32_t GrammarFilter::Cached(std::vector<uint32_t>& table, uint32_t key,
                               std::string_view prefix) const {
  uint32_t& entry = table[key];
  if (entry >> 1 != generation_) entry = generation_ << 1 | matcher_.CanAccept(prefix);
  return entry & 1;
}

size_t GrammarFilter::TriggerEnd(std::string_view piece) const {
  // The first match in tail_ + piece, without building it: one that starts in the tail
  // (the longer its part there, the earlier it starts), else one inside the piece.
  const std::string_view trigger = trigger_;
  for (size_t k = std::min(tail_.size(), trigger.size() - 1); k > 0; --k) {
    if (std::string_view(tail_).substr(tail_.size() - k) == trigger.substr(0, k) &&
        piece.substr(0, trigger.size() - k) == trigger.substr(k)) {
      return trigger.size() - k;
    }
  }
  const size_t at = piece.find(trigger);
  return at == std::string_view::npos ? at : at + trigger.size();
}

bool GrammarFilter::Allows(int32_t id) const {
  if (id < 0 || id >= vocab_->n_vocab()) return false;
  if (vocab_->is_end(id)) return IsComplete();
  if (!active_) {  // free text, unless this token starts the grammar
    if (!vocab_->is_text(id)) return true;
    const std::string_view piece = vocab_->piece(id);
    const size_t end = TriggerEnd(piece);
    return end == std::string_view::npos || matcher_.CanAccept(piece.substr(end));
  }
  if (!vocab_->is_text(id)) return false;
  const std::string_view piece = vocab_->piece(id);
  if (piece.empty()) return false;
  const auto b0 = static_cast<uint8_t>(piece[0]);
  if (!Cached(first_byte_, b0, piece.substr(0, 1))) return false;
  if (piece.size() == 1) return true;
  const uint32_t pair = b0 * 256u + static_cast<uint8_t>(piece[1]);
  if (!Cached(first_pair_, pair, piece.substr(0, 2))) return false;
  return piece.size() == 2 || matcher_.CanAccept(piece);
}

bool GrammarFilter::Accept(int32_t id) {
  if (id >= 0 && id < vocab_->n_vocab() && vocab_->is_end(id)) return IsComplete();
  if (!active_) {
    if (!Allows(id)) return false;
    const std::string_view piece = vocab_->piece(id);  // "" for control tokens
    const size_t end = TriggerEnd(piece);
    if (end == std::string_view::npos) {
      tail_ += piece;
      if (tail_.size() >= trigger_.size()) tail_.erase(0, tail_.size() - (trigger_.size() - 1));
      return true;
    }
    const bool accepted = matcher_.Accept(piece.substr(end));  // Allows checked it
    active_ = true;
    tail_.clear();
    ++generation_;
    return accepted;
  }
  if (!Allows(id) || !matcher_.Accept(vocab_->piece(id))) return false;
  ++generation_;
  return true;
}

}  // namespace mt::grammar
