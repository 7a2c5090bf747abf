// Constrained decoding: a context-free grammar that generated text must follow (JSON
// output, a JSON schema, anything a user writes down).
//
// Grammars are written in GBNF, the notation llama.cpp's `--grammar` and llama-server's
// `grammar` field take, so grammars written for it work here unchanged:
//   root   ::= "{" ws pair ("," ws pair)* "}"      # rules: name ::= alternatives
//   pair   ::= string ":" ws value                 # a name refers to a rule
//   string ::= "\"" [^"\\\x00-\x1f]* "\""          # literals, [sets], [^negated sets]
//   ws     ::= [ \t\n]{0,16}                       # . * + ? {m} {m,} {m,n} ( ) |
// Literals and sets take \n \r \t \\ \" \] \- \xHH \uHHHH \UHHHHHHHH; `#` starts a comment.
// A newline ends a rule's alternatives unless it is inside parentheses or the next line
// starts with `|`. Matching is over Unicode code points; text is UTF-8.
//
// A Matcher recognizes text incrementally (text may stop in the middle of a UTF-8
// character). It keeps every parse alive at once (a set of parse stacks, as a pushdown
// automaton), so ambiguity costs states, not backtracking. Grammars with left recursion, or
// a repetition of something that may be empty, are refused when compiled: the recognizer
// could loop on them. Bounds keep a hostile grammar cheap: at most 1024 parses alive at once
// and a parse nesting 4096 deep; parses past them are dropped, so a grammar that ambiguous
// may refuse text it describes (never accept text it does not).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace mt::grammar {

class Grammar {
 public:
  // Compiles GBNF `text` whose start rule is `root`. Errors (InvalidArgument, one line):
  // "grammar: line L, column C: <what>" for syntax and undefined rules (where first used);
  // "grammar: no rule 'root'", "grammar: rule 'x' is left-recursive (or repeats something
  // that may be empty)" for structure. Limits keep hostile text cheap: at most 1 MiB of
  // text, 100000 elements after expansion, repetition counts up to 10000.
  static Result<std::shared_ptr<const Grammar>> Parse(std::string_view text,
                                                      std::string_view root = "root");

  // Internal form, read by Matcher. Every rule is a list of alternatives; each alternative is
  // a run of elements in `elements` ending with an kEnd element. Repetitions and groups are
  // expanded into extra rules at compile time.
  enum class Kind : uint8_t {
    kEnd,      // end of an alternative
    kRuleRef,  // value: the rule's index
    kChars,    // value: first range in `ranges`; count ranges; negated: matches the others
  };
  struct Element {
    Kind kind = Kind::kEnd;
    bool negated = false;
    uint32_t value = 0;
    uint32_t count = 0;
  };
  struct Range {
    uint32_t lo = 0, hi = 0;  // code points, inclusive
  };
  struct Rule {
    std::string name;  // generated rules (groups, repetitions) get "<parent>_<index>"
    std::vector<uint32_t> alternatives;  // (n_alternatives) index of each one's first element
  };

  const std::vector<Rule>& rules() const { return rules_; }
  const std::vector<Element>& elements() const { return elements_; }
  const std::vector<Range>& ranges() const { return ranges_; }
  uint32_t root() const { return root_; }

  // Whether code point `c` is in the set of kChars element `e`.
  bool Matches(const Element& e, uint32_t c) const;
  // Whether some code point in [lo, hi] is in the set of kChars element `e`.
  bool MatchesAny(const Element& e, uint32_t lo, uint32_t hi) const;

 private:
  friend class GrammarCompiler;
  std::vector<Rule> rules_;
  std::vector<Element> elements_;  // (n_elements)
  std::vector<Range> ranges_;      // (n_ranges)
  uint32_t root_ = 0;
};

// Where a recognizer stands: every parse still alive. Copyable (copies are independent);
// not thread-safe, not even its const methods (they share scratch). The grammar is shared
// and immutable.
class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Grammar> grammar);

  // Consumes `bytes` (UTF-8; may start or end inside a character). Returns false and leaves
  // the matcher unchanged when no parse can take them (including bytes that are not UTF-8).
  bool Accept(std::string_view bytes);
  // Whether Accept(bytes) would return true; leaves the matcher unchanged. The fast path of
  // token masking: most candidates fail on their first character.
  bool CanAccept(std::string_view bytes) const;
  // The text so far is a whole sentence of the grammar (no character left half-read).
  bool IsComplete() const;
  // Some non-empty continuation exists (false once every parse has ended).
  bool CanContinue() const;

  const Grammar& grammar() const { return *grammar_; }

 private:
  // Parse stacks, each a run of element indices with its top last. A top is always a kChars
  // element (what the parse takes next); an empty stack is a finished parse. Distinct.
  struct StackSet {
    std::vector<uint32_t> data;                 // the stacks, one after another
    std::vector<uint32_t> ends;                 // (n_stacks) where each stack ends in data
    void Add(std::span<const uint32_t> stack);  // unless already there, or full
  };

  // The set after consuming `bytes` from the current state (&stacks_ or a scratch set), or
  // null when no parse takes them; *value, *missing, *length: the half-read character.
  const StackSet* Run(std::string_view bytes, uint32_t* value, uint32_t* missing,
                      uint32_t* length) const;
  // Advances every stack of `from` that takes code point `c` into `to` (cleared first).
  void Advance(const StackSet& from, uint32_t c, StackSet& to) const;
  // Whether some stack can take a code point in [lo, hi] (a half-read character).
  bool CanStart(const StackSet& stacks, uint32_t lo, uint32_t hi) const;
  // Adds to `out` every stack reachable from work_ without consuming text (rule references
  // entered, finished alternatives left). Leaves work_ as it found it.
  void Expand(StackSet& out, int depth) const;

  std::shared_ptr<const Grammar> grammar_;
  StackSet stacks_;  // (n_parses) the parses alive
  // A character begun but not finished: its bits so far, the bytes still missing and its
  // length in bytes.
  uint32_t partial_value_ = 0;
  uint32_t partial_missing_ = 0;
  uint32_t partial_length_ = 1;
  // Scratch, reused so that checking a token allocates nothing once warm.
  mutable std::vector<uint32_t> work_;  // the stack being expanded
  mutable StackSet scratch_[2];
};

}  // namespace mt::grammar
