#include "grammar/token_filter.h"

#include <algorithm>
#include <array>
#include <utility>

#include "base/check.h"

namespace mt::grammar {
namespace {

// Ids 0..n-1 grouped by key (a counting sort): ids[start[k], start[k + 1]) are those with key
// k, in id order. keys(id, emit) calls emit(k) once for each key of `id` (none, one or more).
template <typename Keys>
void GroupByKey(int32_t n, size_t n_keys, Keys keys, std::vector<uint32_t>& start,
                std::vector<int32_t>& ids) {
  start.assign(n_keys + 1, 0);
  for (int32_t id = 0; id < n; ++id) keys(id, [&](size_t k) { ++start[k + 1]; });
  for (size_t k = 1; k < start.size(); ++k) start[k] += start[k - 1];
  ids.resize(start.back());
  std::vector<uint32_t> at(start.begin(), start.end() - 1);
  for (int32_t id = 0; id < n; ++id) keys(id, [&](size_t k) { ids[at[k]++] = id; });
}

}  // namespace

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
    if (kind == kEnd) ends_.push_back(id);
  }
  // Text tokens with bytes by their first two bytes, and by each byte they contain.
  GroupByKey(
      n, 256 * 257,
      [&](int32_t id, auto&& emit) {
        const std::string_view p = piece(id);
        if (!is_text(id) || p.empty()) return;
        emit(static_cast<size_t>(static_cast<uint8_t>(p[0])) * 257 +
             (p.size() == 1 ? kOneByte : static_cast<uint8_t>(p[1])));
      },
      prefix_start_, by_prefix_);
  GroupByKey(
      n, 256,
      [&](int32_t id, auto&& emit) {
        if (!is_text(id)) return;
        std::array<bool, 256> seen{};
        for (char c : piece(id)) {
          const auto b = static_cast<uint8_t>(c);
          if (!seen[b]) emit(b);
          seen[b] = true;
        }
      },
      byte_start_, by_byte_);
}

GrammarFilter::GrammarFilter(std::shared_ptr<const Grammar> grammar,
                             std::shared_ptr<const GrammarVocab> vocab, LazyStart lazy)
    : matcher_(std::move(grammar)),
      vocab_(std::move(vocab)),
      lazy_(std::move(lazy)),
      active_(lazy_.trigger.empty() && lazy_.block_open.empty() && !lazy_.in_block),
      phase_(lazy_.in_block             ? Phase::kBlock
             : lazy_.block_open.empty() ? Phase::kFree
                                        : Phase::kStart) {
  MT_CHECK(vocab_ != nullptr);
  MT_CHECK(lazy_.block_open.empty() == lazy_.block_close.empty());
  MT_CHECK(!lazy_.in_block || !lazy_.block_close.empty());
  first_byte_.assign(256, 0);
  first_pair_.assign(65536, 0);
}

uint32_t GrammarFilter::Cached(std::vector<uint32_t>& table, uint32_t key,
                               std::string_view prefix) const {
  uint32_t& entry = table[key];
  if (entry >> 1 != generation_) entry = generation_ << 1 | matcher_.CanAccept(prefix);
  return entry & 1;
}

namespace {

constexpr size_t kNone = std::string_view::npos;

// The offset in `piece` just past the first `tag` in tail + piece, or kNone: one that starts
// in the tail (the longer its part there, the earlier it starts), else one inside the piece.
size_t TagEnd(std::string_view tail, std::string_view tag, std::string_view piece) {
  for (size_t k = std::min(tail.size(), tag.size() - 1); k > 0; --k) {
    if (tail.substr(tail.size() - k) == tag.substr(0, k) &&
        piece.substr(0, tag.size() - k) == tag.substr(k)) {
      return tag.size() - k;
    }
  }
  const size_t at = piece.find(tag);
  return at == kNone ? at : at + tag.size();
}

// The last bytes of tail + piece that may begin `tag`.
std::string TailFor(std::string_view tag, std::string_view tail, std::string_view piece) {
  std::string out(tail);
  out += piece;
  if (out.size() >= tag.size()) out.erase(0, out.size() - (tag.size() - 1));
  return out;
}

}  // namespace

bool GrammarFilter::Starts(std::string_view piece, std::string* rest, Phase* phase,
                           std::string* tail) const {
  Phase now = phase_;
  std::string_view before = tail_;  // the output's bytes before what is left to search
  size_t searched = 0;              // bytes of `piece` passed over (a block, its tags)
  if (now == Phase::kStart) {
    std::string start = tail_;  // the output so far: the open tag begun, perhaps
    start += piece;
    const std::string_view text = start;
    const std::string_view open = lazy_.block_open;
    if (text.size() < open.size() && text == open.substr(0, text.size())) {  // undecided
      if (phase != nullptr) {
        *phase = Phase::kStart;
        *tail = std::move(start);
      }
      return false;
    }
    if (text.substr(0, open.size()) == open) {  // the block opens in `piece`
      searched = open.size() - tail_.size();
      now = Phase::kBlock;
      before = {};
    } else if (lazy_.trigger.empty()) {  // no block: the grammar from the start
      *rest = text;
      return true;
    } else {
      now = Phase::kFree;  // free text from the start (tail_ holds all of it)
    }
  }
  if (now == Phase::kBlock) {
    const std::string_view close = lazy_.block_close;
    const size_t end = TagEnd(before, close, piece.substr(searched));
    if (end == kNone) {
      if (phase != nullptr) {
        *phase = now;
        *tail = TailFor(close, before, piece.substr(searched));
      }
      return false;
    }
    searched += end;
    if (lazy_.trigger.empty()) {  // the grammar right after the block
      *rest = piece.substr(searched);
      return true;
    }
    now = Phase::kFree;
    before = {};
  }
  const std::string_view rest_of_piece = piece.substr(searched);
  const size_t end = TagEnd(before, lazy_.trigger, rest_of_piece);
  if (end != kNone) {
    *rest = rest_of_piece.substr(end);
    return true;
  }
  if (phase != nullptr) {
    *phase = now;
    *tail = TailFor(lazy_.trigger, before, rest_of_piece);
  }
  return false;
}

bool GrammarFilter::Allows(int32_t id) const {
  if (id < 0 || id >= vocab_->n_vocab()) return false;
  if (vocab_->is_end(id)) return IsComplete();
  if (!active_) {  // free text, unless this token starts the grammar
    if (!vocab_->is_text(id)) return true;
    std::string rest;
    return !Starts(vocab_->piece(id), &rest) || matcher_.CanAccept(rest);
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

void GrammarFilter::MarkAllowed(std::span<uint8_t> allowed) const {
  if (!active_) {
    if (phase_ == Phase::kStart) {  // the first token or two: one by one
      TokenFilter::MarkAllowed(allowed);
      return;
    }
    // Free text: only a token that completes the tag searched for (the block's end, or the
    // trigger) can be refused, and it holds the tag's last byte.
    const std::string& tag = phase_ == Phase::kBlock ? lazy_.block_close : lazy_.trigger;
    const size_t n = std::min<size_t>(allowed.size(), vocab_->n_vocab());
    std::fill(allowed.begin(), allowed.begin() + n, 1);
    std::fill(allowed.begin() + n, allowed.end(), 0);
    for (int32_t id : vocab_->ends()) {
      if (static_cast<size_t>(id) < n) allowed[id] = IsComplete();
    }
    for (int32_t id : vocab_->containing(static_cast<uint8_t>(tag.back()))) {
      if (static_cast<size_t>(id) < n) allowed[id] = Allows(id);
    }
    return;
  }
  std::fill(allowed.begin(), allowed.end(), 0);
  const auto mark = [&](int32_t id) {
    if (static_cast<size_t>(id) < allowed.size()) allowed[id] = 1;
  };
  if (matcher_.IsComplete()) {
    for (int32_t id : vocab_->ends()) mark(id);
  }
  char pair[2];
  for (int b0 = 0; b0 < 256; ++b0) {
    pair[0] = static_cast<char>(b0);
    if (!Cached(first_byte_, b0, std::string_view(pair, 1))) continue;
    for (int32_t id : vocab_->starting_with(b0, GrammarVocab::kOneByte)) mark(id);
    for (int b1 = 0; b1 < 256; ++b1) {
      const std::span<const int32_t> ids = vocab_->starting_with(b0, b1);
      if (ids.empty()) continue;
      pair[1] = static_cast<char>(b1);
      if (!Cached(first_pair_, b0 * 256u + b1, std::string_view(pair, 2))) continue;
      for (int32_t id : ids) {
        const std::string_view piece = vocab_->piece(id);
        if (piece.size() == 2 || matcher_.CanAccept(piece)) mark(id);
      }
    }
  }
}

bool GrammarFilter::Accept(int32_t id) {
  if (id >= 0 && id < vocab_->n_vocab() && vocab_->is_end(id)) return IsComplete();
  if (!active_) {
    if (!Allows(id)) return false;
    const std::string_view piece = vocab_->piece(id);  // "" for control tokens
    std::string rest;
    Phase phase;
    std::string tail;
    if (!Starts(piece, &rest, &phase, &tail)) {
      phase_ = phase;
      tail_ = std::move(tail);
      return true;
    }
    const bool accepted = matcher_.Accept(rest);  // Allows checked it
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
