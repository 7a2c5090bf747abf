#include "grammar/grammar.h"

#include <algorithm>
#include <map>
#include <utility>

#include "base/check.h"
#include "tokenizer/utf8.h"

namespace mt::grammar {

using Element = Grammar::Element;
using Kind = Grammar::Kind;
using Range = Grammar::Range;

namespace {

constexpr size_t kMaxText = 1 << 20;
constexpr size_t kMaxElements = 100000;
constexpr uint32_t kMaxRepeat = 10000;
constexpr int kMaxNesting = 256;  // parentheses
constexpr uint32_t kMaxCodePoint = 0x10FFFF;

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

// A byte of the grammar text for an error message, which must stay one printable line:
// 'c' for printable ASCII, else \xHH.
std::string Shown(char c) {
  const auto b = static_cast<uint8_t>(c);
  return b > 0x20 && b < 0x7F ? fmt::format("'{}'", c) : fmt::format("\\x{:02x}", b);
}

// Sorts and merges `ranges` in place (adjacent and overlapping ones become one).
void Normalize(std::vector<Range>& ranges) {
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.lo < b.lo; });
  size_t n = 0;
  for (const Range& r : ranges) {
    if (n > 0 && r.lo <= ranges[n - 1].hi + 1) {
      ranges[n - 1].hi = std::max(ranges[n - 1].hi, r.hi);
    } else {
      ranges[n++] = r;
    }
  }
  ranges.resize(n);
}

}  // namespace

// Parses GBNF into rules whose alternatives are element runs, then flattens them into a
// Grammar. A term under a postfix operator becomes a generated rule:
//   x*     -> R ::= x R |              x+ -> x R (R as for x*)
//   x?     -> R ::= x |                x{m,n} -> x..x (m times) then n - m nested optionals
class GrammarCompiler {
 public:
  explicit GrammarCompiler(std::string_view text) : text_(text) {}

  Result<std::shared_ptr<const Grammar>> Compile(std::string_view root) {
    if (text_.size() > kMaxText) {
      return InvalidArgument("grammar: {} bytes of text, more than the limit of {}", text_.size(),
                             kMaxText);
    }
    MT_RETURN_IF_ERROR(ParseRules());
    for (size_t r = 0; r < rules_.size(); ++r) {
      if (!defined_[r]) {
        pos_ = first_use_[r];
        return Error(fmt::format("rule '{}' is not defined", names_[r]));
      }
    }
    auto it = index_.find(std::string(root));
    if (it == index_.end() || !defined_[it->second]) {
      return InvalidArgument("grammar: no rule '{}'", root);
    }
    MT_RETURN_IF_ERROR(CheckLeftRecursion());
    return Flatten(it->second);
  }

 private:
  using Sequence = std::vector<Element>;
  using Alternatives = std::vector<Sequence>;

  // --- Errors and positions.
  Status Error(std::string_view what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return InvalidArgument("grammar: line {}, column {}: {}", line, col, what);
  }
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[pos_]; }

  // Skips spaces, tabs and comments; newlines too when `newlines`.
  void SkipSpace(bool newlines) {
    while (!AtEnd()) {
      const char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++pos_;
      } else if (c == '#') {
        while (!AtEnd() && text_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  // --- Rules.
  uint32_t RuleIndex(const std::string& name, size_t at) {
    auto [it, inserted] = index_.try_emplace(name, static_cast<uint32_t>(rules_.size()));
    if (inserted) {
      rules_.emplace_back();
      names_.push_back(name);
      defined_.push_back(false);
      first_use_.push_back(at);
      origin_.push_back(it->second);
    }
    return it->second;
  }

  uint32_t NewRule(const std::string& parent, Alternatives alternatives) {
    const uint32_t r = static_cast<uint32_t>(rules_.size());
    names_.push_back(parent + "_" + std::to_string(r));
    rules_.push_back(std::move(alternatives));
    defined_.push_back(true);
    first_use_.push_back(pos_);
    origin_.push_back(index_.at(parent));
    return r;
  }

  Status CountElements(size_t n) {
    n_elements_ += n;
    if (n_elements_ > kMaxElements) {
      return Error(fmt::format("the grammar expands to more than {} elements", kMaxElements));
    }
    return Status::Ok();
  }

  Status ParseRules() {
    while (true) {
      SkipSpace(/*newlines=*/true);
      if (AtEnd()) return Status::Ok();
      const size_t start = pos_;
      while (!AtEnd() && IsNameChar(text_[pos_])) ++pos_;
      if (pos_ == start) return Error("expected a rule name");
      const std::string name(text_.substr(start, pos_ - start));
      SkipSpace(false);
      if (text_.substr(pos_, 3) != "::=") return Error("expected '::=' after the rule name");
      pos_ += 3;
      const uint32_t r = RuleIndex(name, start);
      if (defined_[r]) return Error(fmt::format("rule '{}' is defined twice", name));
      defined_[r] = true;
      current_ = name;
      Alternatives alts;
      MT_RETURN_IF_ERROR(ParseAlternatives(/*depth=*/0, alts));
      rules_[r] = std::move(alts);
      if (!AtEnd() && Peek() != '\n') {
        return Error(fmt::format("unexpected {}", Shown(Peek())));
      }
    }
  }

  // Alternatives up to ')' (depth > 0) or the end of the rule (depth 0).
  Status ParseAlternatives(int depth, Alternatives& alts) {
    SkipSpace(true);
    while (true) {
      Sequence seq;
      MT_RETURN_IF_ERROR(ParseSequence(depth, seq));
      alts.push_back(std::move(seq));
      if (depth == 0) {
        // A following line that starts with '|' continues the rule.
        const size_t save = pos_;
        SkipSpace(true);
        if (Peek() != '|') {
          pos_ = save;
          return Status::Ok();
        }
      }
      if (Peek() != '|') return Status::Ok();
      ++pos_;
      SkipSpace(true);
    }
  }

  Status ParseSequence(int depth, Sequence& seq) {
    while (true) {
      SkipSpace(depth > 0);
      const char c = Peek();
      if (AtEnd() || c == '|' || c == ')' || c == '\n') return Status::Ok();
      const size_t term_start = seq.size();
      if (c == '"') {
        MT_RETURN_IF_ERROR(ParseLiteral(seq));
      } else if (c == '[') {
        MT_RETURN_IF_ERROR(ParseSet(seq));
      } else if (c == '.') {
        ++pos_;
        seq.push_back(Chars({}, /*negated=*/true));  // anything: the complement of nothing
      } else if (c == '(') {
        if (depth >= kMaxNesting) return Error("parentheses nested too deeply");
        ++pos_;
        Alternatives inner;
        MT_RETURN_IF_ERROR(ParseAlternatives(depth + 1, inner));
        SkipSpace(true);
        if (Peek() != ')') return Error("expected ')'");
        ++pos_;
        if (inner.size() == 1) {
          for (const Element& e : inner[0]) seq.push_back(e);
        } else {
          seq.push_back(Ref(NewRule(current_, std::move(inner))));
        }
      } else if (IsNameChar(c)) {
        const size_t start = pos_;
        while (!AtEnd() && IsNameChar(text_[pos_])) ++pos_;
        seq.push_back(Ref(RuleIndex(std::string(text_.substr(start, pos_ - start)), start)));
      } else {
        return Error(fmt::format("unexpected {}", Shown(c)));
      }
      MT_RETURN_IF_ERROR(CountElements(seq.size() - term_start));
      MT_RETURN_IF_ERROR(ParsePostfix(seq, term_start));
    }
  }

  // Applies postfix operators to the term seq[term_start, end).
  Status ParsePostfix(Sequence& seq, size_t term_start) {
    while (true) {
      const char c = Peek();
      uint32_t min = 0, max = 0;
      bool unbounded = false;
      if (c == '*') {
        unbounded = true;
      } else if (c == '+') {
        min = 1;
        unbounded = true;
      } else if (c == '?') {
        max = 1;
      } else if (c == '{') {
        MT_RETURN_IF_ERROR(ParseBraces(&min, &max, &unbounded));
        --pos_;  // ParseBraces leaves pos_ past '}'; the loop's ++pos_ follows
      } else {
        return Status::Ok();
      }
      ++pos_;
      const Sequence term(seq.begin() + term_start, seq.end());
      seq.resize(term_start);
      MT_RETURN_IF_ERROR(Repeat(term, min, max, unbounded, seq));
    }
  }

  Status ParseBraces(uint32_t* min, uint32_t* max, bool* unbounded) {
    ++pos_;  // '{'
    auto number = [&](uint32_t* out) -> Status {
      SkipSpace(false);
      const size_t start = pos_;
      uint64_t v = 0;
      while (!AtEnd() && text_[pos_] >= '0' && text_[pos_] <= '9') {
        v = v * 10 + static_cast<uint64_t>(text_[pos_] - '0');
        if (v > kMaxRepeat) {
          pos_ = start;
          return Error(fmt::format("repetition count above {}", kMaxRepeat));
        }
        ++pos_;
      }
      if (pos_ == start) return Error("expected a number in '{...}'");
      *out = static_cast<uint32_t>(v);
      SkipSpace(false);
      return Status::Ok();
    };
    MT_RETURN_IF_ERROR(number(min));
    *max = *min;
    *unbounded = false;
    if (Peek() == ',') {
      ++pos_;
      SkipSpace(false);
      if (Peek() == '}') {
        *unbounded = true;
      } else {
        MT_RETURN_IF_ERROR(number(max));
        if (*max < *min) return Error("repetition {m,n} with n < m");
      }
    }
    if (Peek() != '}') return Error("expected '}'");
    ++pos_;
    return Status::Ok();
  }

  // Appends `term` repeated min..max times (max unbounded when `unbounded`) to `seq`.
  Status Repeat(const Sequence& term, uint32_t min, uint32_t max, bool unbounded, Sequence& seq) {
    MT_RETURN_IF_ERROR(CountElements(static_cast<size_t>(term.size()) * (min + 1)));
    for (uint32_t i = 0; i < min; ++i) seq.insert(seq.end(), term.begin(), term.end());
    if (unbounded) {
      // R ::= term R | (empty)
      const uint32_t r = NewRule(current_, {});
      Sequence more = term;
      more.push_back(Ref(r));
      rules_[r] = {std::move(more), {}};
      seq.push_back(Ref(r));
      return Status::Ok();
    }
    if (max == min) return Status::Ok();
    // (term (term (...)?)?)?: R1 ::= term | ; Rk ::= term R(k-1) | .
    MT_RETURN_IF_ERROR(CountElements(static_cast<size_t>(term.size() + 1) * (max - min)));
    uint32_t inner = 0;
    for (uint32_t k = 0; k < max - min; ++k) {
      Sequence one = term;
      if (k > 0) one.push_back(Ref(inner));
      inner = NewRule(current_, {std::move(one), {}});
    }
    seq.push_back(Ref(inner));
    return Status::Ok();
  }

  // --- Terminals.
  static Element Ref(uint32_t rule) {
    Element e;
    e.kind = Kind::kRuleRef;
    e.value = rule;
    return e;
  }

  Element Chars(std::vector<Range> ranges, bool negated) {
    Normalize(ranges);
    Element e;
    e.kind = Kind::kChars;
    e.negated = negated;
    e.value = static_cast<uint32_t>(ranges_.size());
    e.count = static_cast<uint32_t>(ranges.size());
    ranges_.insert(ranges_.end(), ranges.begin(), ranges.end());
    return e;
  }

  // One character of a literal or set at pos_: an escape or a UTF-8 sequence.
  Status ParseChar(uint32_t* out) {
    if (AtEnd()) return Error("unexpected end of text");
    if (text_[pos_] == '\\') {
      ++pos_;
      if (AtEnd()) return Error("unexpected end of text after '\\'");
      const char c = text_[pos_++];
      int hex_digits = 0;
      switch (c) {
        case 'n':
          *out = '\n';
          return Status::Ok();
        case 'r':
          *out = '\r';
          return Status::Ok();
        case 't':
          *out = '\t';
          return Status::Ok();
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
          *out = static_cast<uint8_t>(c);
          return Status::Ok();
        case 'x':
          hex_digits = 2;
          break;
        case 'u':
          hex_digits = 4;
          break;
        case 'U':
          hex_digits = 8;
          break;
        default:
          pos_ -= 2;
          return Error(Shown(c)[0] == '\''
                           ? fmt::format("unknown escape '\\{}'", c)
                           : fmt::format("unknown escape: '\\' before {}", Shown(c)));
      }
      uint32_t v = 0;
      for (int i = 0; i < hex_digits; ++i) {
        const char h = Peek();
        uint32_t d = 0;
        if (h >= '0' && h <= '9') {
          d = static_cast<uint32_t>(h - '0');
        } else if (h >= 'a' && h <= 'f') {
          d = static_cast<uint32_t>(h - 'a' + 10);
        } else if (h >= 'A' && h <= 'F') {
          d = static_cast<uint32_t>(h - 'A' + 10);
        } else {
          return Error(fmt::format("expected {} hex digits after '\\{}'", hex_digits, c));
        }
        v = v * 16 + d;
        ++pos_;
      }
      if (v > kMaxCodePoint) return Error("code point above U+10FFFF");
      *out = v;
      return Status::Ok();
    }
    const size_t len = utf8::ValidSequenceLength(text_, pos_);
    if (len == 0) return Error("invalid UTF-8");
    *out = utf8::DecodeAt(text_, pos_, len);
    pos_ += len;
    return Status::Ok();
  }

  Status ParseLiteral(Sequence& seq) {
    ++pos_;  // '"'
    while (true) {
      if (AtEnd() || Peek() == '\n') return Error("unterminated string literal");
      if (Peek() == '"') {
        ++pos_;
        return Status::Ok();
      }
      uint32_t c = 0;
      MT_RETURN_IF_ERROR(ParseChar(&c));
      seq.push_back(Chars({{c, c}}, false));
    }
  }

  Status ParseSet(Sequence& seq) {
    ++pos_;  // '['
    bool negated = false;
    if (Peek() == '^') {
      negated = true;
      ++pos_;
    }
    std::vector<Range> ranges;
    while (true) {
      if (AtEnd() || Peek() == '\n') return Error("unterminated character set");
      if (Peek() == ']') {
        ++pos_;
        break;
      }
      uint32_t lo = 0, hi = 0;
      MT_RETURN_IF_ERROR(ParseChar(&lo));
      hi = lo;
      if (Peek() == '-' && pos_ + 1 < text_.size() && text_[pos_ + 1] != ']') {
        ++pos_;
        MT_RETURN_IF_ERROR(ParseChar(&hi));
        if (hi < lo) return Error("character range with its end before its start");
      }
      ranges.push_back({lo, hi});
    }
    if (ranges.empty() && !negated) return Error("empty character set '[]'");
    seq.push_back(Chars(std::move(ranges), negated));
    return Status::Ok();
  }

  // --- Structure.
  // Refuses rules that can reach themselves without consuming text (left recursion, or a
  // repetition of something that may be empty): the recognizer would expand them forever.
  Status CheckLeftRecursion() const {
    const size_t n = rules_.size();
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const Sequence& alt : rules_[r]) {
          const bool all = std::all_of(alt.begin(), alt.end(), [&](const Element& e) {
            return e.kind == Kind::kRuleRef && nullable[e.value];
          });
          if (all) {
            nullable[r] = true;
            changed = true;
            break;
          }
        }
      }
    }
    // first[r]: rules that can start r, reached through nullable elements only.
    std::vector<std::vector<uint32_t>> first(n);
    for (size_t r = 0; r < n; ++r) {
      for (const Sequence& alt : rules_[r]) {
        for (const Element& e : alt) {
          if (e.kind != Kind::kRuleRef) break;
          first[r].push_back(e.value);
          if (!nullable[e.value]) break;
        }
      }
    }
    // Depth-first search for a cycle, iterative (rule chains can be long).
    enum : uint8_t { kNew, kOpen, kDone };
    std::vector<uint8_t> state(n, kNew);
    std::vector<std::pair<uint32_t, size_t>> stack;  // (rule, next edge)
    for (uint32_t start = 0; start < n; ++start) {
      if (state[start] != kNew) continue;
      stack.push_back({start, 0});
      state[start] = kOpen;
      while (!stack.empty()) {
        auto& [r, next] = stack.back();
        if (next == first[r].size()) {
          state[r] = kDone;
          stack.pop_back();
          continue;
        }
        const uint32_t s = first[r][next++];
        if (state[s] == kOpen) {
          return InvalidArgument(  // named by the rule the user wrote
              "grammar: rule '{}' is left-recursive (or repeats something that may be empty)",
              names_[origin_[s]]);
        }
        if (state[s] == kNew) {
          state[s] = kOpen;
          stack.push_back({s, 0});
        }
      }
    }
    return Status::Ok();
  }

  std::shared_ptr<const Grammar> Flatten(uint32_t root) {
    auto g = std::make_shared<Grammar>();
    g->ranges_ = std::move(ranges_);
    g->root_ = root;
    g->rules_.resize(rules_.size());
    for (size_t r = 0; r < rules_.size(); ++r) {
      g->rules_[r].name = names_[r];
      for (const Sequence& alt : rules_[r]) {
        g->rules_[r].alternatives.push_back(static_cast<uint32_t>(g->elements_.size()));
        g->elements_.insert(g->elements_.end(), alt.begin(), alt.end());
        g->elements_.push_back(Element{});  // kEnd
      }
    }
    return g;
  }

  std::string_view text_;
  size_t pos_ = 0;
  std::string current_;  // the rule being parsed, to name generated rules
  std::vector<Alternatives> rules_;
  std::vector<std::string> names_;
  std::vector<bool> defined_;
  std::vector<size_t> first_use_;  // where each rule is first named (for errors)
  std::vector<uint32_t> origin_;   // the user's rule each rule is (or was generated for)
  std::map<std::string, uint32_t> index_;
  std::vector<Range> ranges_;
  size_t n_elements_ = 0;
};

Result<std::shared_ptr<const Grammar>> Grammar::Parse(std::string_view text,
                                                      std::string_view root) {
  return GrammarCompiler(text).Compile(root);
}

bool Grammar::Matches(const Element& e, uint32_t c) const {
  bool in = false;
  for (uint32_t i = e.value; i < e.value + e.count; ++i) {
    if (c < ranges_[i].lo) break;  // sorted
    if (c <= ranges_[i].hi) {
      in = true;
      break;
    }
  }
  return in != e.negated;
}

bool Grammar::MatchesAny(const Element& e, uint32_t lo, uint32_t hi) const {
  if (!e.negated) {
    for (uint32_t i = e.value; i < e.value + e.count; ++i) {
      if (ranges_[i].lo <= hi && lo <= ranges_[i].hi) return true;
    }
    return false;
  }
  // Negated: some code point of [lo, hi] lies outside every (sorted, merged) range.
  uint32_t next = lo;  // the lowest code point of [lo, hi] not yet known to be covered
  for (uint32_t i = e.value; i < e.value + e.count; ++i) {
    if (ranges_[i].hi < next) continue;
    if (ranges_[i].lo > next) return true;
    if (ranges_[i].hi >= hi) return false;
    next = ranges_[i].hi + 1;
  }
  return next <= hi;
}

// --- Matcher.

namespace {
constexpr size_t kMaxStacks = 1024;      // parses alive at once; more are dropped
constexpr size_t kMaxStackDepth = 4096;  // nesting of one parse; deeper ones are dropped
constexpr int kMaxExpandDepth = 4096;    // rule references followed without text
}  // namespace

void Matcher::StackSet::Add(std::span<const uint32_t> stack) {
  size_t begin = 0;
  for (uint32_t end : ends) {
    if (end - begin == stack.size() &&
        std::equal(stack.begin(), stack.end(), data.begin() + begin)) {
      return;  // already there
    }
    begin = end;
  }
  if (ends.size() >= kMaxStacks) return;
  data.insert(data.end(), stack.begin(), stack.end());
  ends.push_back(static_cast<uint32_t>(data.size()));
}

Matcher::Matcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  MT_CHECK(grammar_ != nullptr);
  for (uint32_t alt : grammar_->rules()[grammar_->root()].alternatives) {
    work_.assign(1, alt);
    Expand(stacks_, 0);
  }
}

void Matcher::Expand(StackSet& out, int depth) const {
  if (depth > kMaxExpandDepth || work_.size() > kMaxStackDepth) return;
  if (work_.empty()) {
    out.Add(work_);
    return;
  }
  const auto& elements = grammar_->elements();
  const uint32_t p = work_.back();
  const Element& e = elements[p];
  switch (e.kind) {
    case Kind::kChars:
      out.Add(work_);
      return;
    case Kind::kEnd:
      work_.pop_back();
      Expand(out, depth + 1);
      work_.push_back(p);
      return;
    case Kind::kRuleRef: {
      // Continue after the reference once the rule is done; a reference last in its
      // alternative leaves nothing to continue, so it is dropped (right recursion such as
      // R ::= x R does not grow the stack).
      const bool last = elements[p + 1].kind == Kind::kEnd;
      if (last) {
        work_.pop_back();
      } else {
        work_.back() = p + 1;
      }
      for (uint32_t alt : grammar_->rules()[e.value].alternatives) {
        work_.push_back(alt);
        Expand(out, depth + 1);
        work_.pop_back();
      }
      if (last) {
        work_.push_back(p);
      } else {
        work_.back() = p;
      }
      return;
    }
  }
}

void Matcher::Advance(const StackSet& from, uint32_t c, StackSet& to) const {
  to.data.clear();
  to.ends.clear();
  const auto& elements = grammar_->elements();
  size_t begin = 0;
  for (uint32_t end : from.ends) {
    if (end > begin) {
      const uint32_t top = from.data[end - 1];
      if (grammar_->Matches(elements[top], c)) {
        work_.assign(from.data.begin() + begin, from.data.begin() + end);
        work_.back() = top + 1;
        Expand(to, 0);
      }
    }
    begin = end;
  }
}

bool Matcher::CanStart(const StackSet& stacks, uint32_t lo, uint32_t hi) const {
  // Surrogates (U+D800-U+DFFF) are never characters: "\xED\xA0" begins nothing, and a
  // parse that took it could never go on.
  const uint32_t below_hi = std::min<uint32_t>(hi, 0xD7FF);
  const uint32_t above_lo = std::max<uint32_t>(lo, 0xE000);
  const auto& elements = grammar_->elements();
  size_t begin = 0;
  for (uint32_t end : stacks.ends) {
    if (end > begin) {
      const Element& top = elements[stacks.data[end - 1]];
      if ((lo <= below_hi && grammar_->MatchesAny(top, lo, below_hi)) ||
          (above_lo <= hi && grammar_->MatchesAny(top, above_lo, hi))) {
        return true;
      }
    }
    begin = end;
  }
  return false;
}

const Matcher::StackSet* Matcher::Run(std::string_view bytes, uint32_t* value, uint32_t* missing,
                                      uint32_t* length) const {
  const StackSet* from = &stacks_;
  *value = partial_value_, *missing = partial_missing_, *length = partial_length_;
  int flip = 0;
  for (char ch : bytes) {
    const auto b = static_cast<uint8_t>(ch);
    if (*missing == 0) {
      if (b < 0x80) {
        *value = b;
      } else if (b >= 0xC2 && b <= 0xDF) {
        *value = b & 0x1F, *missing = 1, *length = 2;
      } else if ((b & 0xF0) == 0xE0) {
        *value = b & 0x0F, *missing = 2, *length = 3;
      } else if (b >= 0xF0 && b <= 0xF4) {
        *value = b & 0x07, *missing = 3, *length = 4;
      } else {
        return nullptr;  // a continuation byte, or a byte never in UTF-8
      }
    } else {
      if ((b & 0xC0) != 0x80) return nullptr;
      *value = (*value << 6) | (b & 0x3F);
      --*missing;
    }
    if (*missing > 0) continue;
    // A whole character: refuse overlong forms, surrogates and values past U+10FFFF.
    const uint32_t c = *value;
    if ((*length == 3 && (c < 0x800 || (c >= 0xD800 && c <= 0xDFFF))) ||
        (*length == 4 && (c < 0x10000 || c > kMaxCodePoint))) {
      return nullptr;
    }
    *length = 1;
    StackSet& to = scratch_[flip];
    flip ^= 1;
    Advance(*from, c, to);
    if (to.ends.empty()) return nullptr;
    from = &to;
  }
  if (*missing > 0) {
    // Half a character: some parse must take a code point it can still become.
    // (The shortest form's floor applies: E0 80 is not the start of U+0000.)
    const uint32_t shift = 6 * *missing;
    const uint32_t floor = *length == 2 ? 0x80 : *length == 3 ? 0x800 : 0x10000;
    const uint32_t lo = std::max(*value << shift, floor);
    const uint32_t hi = std::min((*value << shift) | ((1u << shift) - 1), kMaxCodePoint);
    if (lo > hi || !CanStart(*from, lo, hi)) return nullptr;
  }
  return from;
}

bool Matcher::Accept(std::string_view bytes) {
  uint32_t value = 0, missing = 0, length = 1;
  const StackSet* to = Run(bytes, &value, &missing, &length);
  if (to == nullptr) return false;
  if (to != &stacks_) std::swap(stacks_, to == &scratch_[0] ? scratch_[0] : scratch_[1]);
  partial_value_ = value, partial_missing_ = missing, partial_length_ = length;
  return true;
}

bool Matcher::CanAccept(std::string_view bytes) const {
  uint32_t value = 0, missing = 0, length = 1;
  return Run(bytes, &value, &missing, &length) != nullptr;
}

bool Matcher::IsComplete() const {
  if (partial_missing_ > 0) return false;
  size_t begin = 0;
  for (uint32_t end : stacks_.ends) {
    if (end == begin) return true;
    begin = end;
  }
  return false;
}

bool Matcher::CanContinue() const {
  if (partial_missing_ > 0) return true;
  size_t begin = 0;
  for (uint32_t end : stacks_.ends) {
    if (end > begin) return true;
    begin = end;
  }
  return false;
}

}  // namespace mt::grammar
