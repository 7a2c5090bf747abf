#include "grammar/token_filter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "tokenizer/vocab_spec.h"

namespace mt::grammar {
namespace {

// The built-in byte-level BPE (bytes, ~630 merged tokens, two control tokens, unused ones).
const Tokenizer& SmallTokenizer() {
  static const Tokenizer tok = [] {
    VocabSpec spec = BuiltinBpeVocab(1000, "qwen2", {"<|endoftext|>", "<|im_start|>"});
    spec.eos_id = static_cast<int32_t>(*FindTokenId(spec, "<|endoftext|>"));
    return std::move(Tokenizer::Create(std::move(spec))).value();
  }();
  return tok;
}

std::shared_ptr<const GrammarVocab> SmallVocab() {
  static const auto vocab = std::make_shared<const GrammarVocab>(SmallTokenizer());
  return vocab;
}

std::shared_ptr<const Grammar> Compile(std::string_view text) {
  auto g = Grammar::Parse(text);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return *g;
}

// Feeds `text` byte by byte (byte tokens: id b is byte b); false at the first refusal.
bool Feed(GrammarFilter& f, std::string_view text) {
  for (char c : text) {
    if (!f.Accept(static_cast<int32_t>(static_cast<uint8_t>(c)))) return false;
  }
  return true;
}

TEST(GrammarFilter, AllowsWhatTheGrammarCanTakeNext) {
  const Tokenizer& tok = SmallTokenizer();
  const int32_t eos = *tok.eos_id();
  const int32_t im_start = static_cast<int32_t>(*FindTokenId(tok.vocab(), "<|im_start|>"));
  GrammarFilter f(Compile(R"(root ::= "{" [0-9]+ "}")"), SmallVocab());
  int n_allowed = 0;
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    const std::string piece = tok.TokenPiece(id, false);
    const bool expect = piece == "{";  // nothing else starts the output
    EXPECT_EQ(f.Allows(id), expect) << id << " '" << piece << "'";
    n_allowed += f.Allows(id);
  }
  EXPECT_EQ(n_allowed, 1);
  EXPECT_FALSE(f.Allows(eos));       // not complete yet
  EXPECT_FALSE(f.Allows(im_start));  // control tokens never
  EXPECT_FALSE(f.Allows(-1));
  EXPECT_FALSE(f.Allows(tok.n_vocab()));
  ASSERT_TRUE(f.Accept(static_cast<int32_t>('{')));   // byte tokens: id b is byte b
  EXPECT_FALSE(f.Accept(static_cast<int32_t>('}')));  // a digit first
  ASSERT_TRUE(f.Accept(static_cast<int32_t>('7')));
  EXPECT_FALSE(f.Allows(eos));
  ASSERT_TRUE(f.Accept(static_cast<int32_t>('}')));
  EXPECT_TRUE(f.IsComplete());
  EXPECT_TRUE(f.Allows(eos));
  EXPECT_TRUE(f.Accept(eos));
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    if (id != eos) EXPECT_FALSE(f.Allows(id)) << id;  // the grammar is done
  }
}

// Sampling under the filter from random logits always yields a sentence of the grammar.
TEST(GrammarFilter, SampledOutputFollowsTheGrammar) {
  const Tokenizer& tok = SmallTokenizer();
  const char* grammar = R"(root ::= "[" ws (item ("," ws item)*)? "]"
item ::= "\"" [a-z ]{1,12} "\"" | [0-9]{1,4}
ws ::= " "?)";
  auto g = Compile(grammar);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(tok.n_vocab());
  for (int trial = 0; trial < 40; ++trial) {
    GrammarFilter f(g, SmallVocab());
    SamplerParams p;
    p.seed = static_cast<uint64_t>(trial);
    p.top_k = trial % 2 == 0 ? 40 : 0;
    Sampler sampler(p);
    std::vector<int32_t> out;
    bool ended = false;
    for (int step = 0; step < 300 && !ended; ++step) {
      for (float& l : logits) l = normal(rng);
      logits[*tok.eos_id()] += 2.0f;  // end when allowed, mostly
      const int32_t id = sampler.Sample(logits, out, &f);
      ASSERT_GE(id, 0) << "trial " << trial << ": no token allowed after '" << tok.Decode(out)
                       << "'";
      ASSERT_TRUE(f.Accept(id));
      if (tok.IsEndOfGeneration(id)) {
        ended = true;
      } else {
        out.push_back(id);
      }
    }
    ASSERT_TRUE(ended) << trial;
    Matcher check(g);
    const std::string text = tok.Decode(out);
    EXPECT_TRUE(check.Accept(text) && check.IsComplete()) << text;
  }
}

// A lazy filter lets anything through until the trigger text, then applies the grammar to
// what follows it, across token boundaries and inside a token.
TEST(GrammarFilter, LazyAppliesAfterTheTrigger) {
  const Tokenizer& tok = SmallTokenizer();
  const int32_t eos = *tok.eos_id();
  auto g = Compile(R"(root ::= "{" [0-9]+ "}")");
  auto byte = [](char c) { return static_cast<int32_t>(static_cast<uint8_t>(c)); };
  GrammarFilter f(g, SmallVocab(), {"@@"});
  EXPECT_FALSE(f.active());
  EXPECT_TRUE(f.Allows(byte('x')));
  EXPECT_TRUE(f.Allows(eos));  // free text may end
  ASSERT_TRUE(f.Accept(byte('a')));
  ASSERT_TRUE(f.Accept(byte('@')));
  EXPECT_FALSE(f.active());
  ASSERT_TRUE(f.Accept(byte('@')));  // the trigger, split over two tokens
  EXPECT_TRUE(f.active());
  EXPECT_FALSE(f.Allows(eos));
  EXPECT_FALSE(f.Allows(byte('x')));
  EXPECT_TRUE(f.Allows(byte('{')));
  ASSERT_TRUE(f.Accept(byte('{')));
  ASSERT_TRUE(f.Accept(byte('4')));
  ASSERT_TRUE(f.Accept(byte('}')));
  EXPECT_TRUE(f.Allows(eos));
  // A trigger spread over three tokens, after a false start.
  GrammarFilter three(g, SmallVocab(), {"<#>"});
  for (char c : std::string("x<<#")) ASSERT_TRUE(three.Accept(byte(c)));
  EXPECT_FALSE(three.active());
  EXPECT_TRUE(three.Allows(byte('x')));  // still free text
  EXPECT_TRUE(three.Allows(byte('>')));
  ASSERT_TRUE(three.Accept(byte('>')));
  EXPECT_TRUE(three.active());
  EXPECT_TRUE(three.Allows(byte('{')));
  // A token that completes the trigger is allowed only when the grammar takes its rest.
  int32_t word = -1;
  for (int32_t id = 256; id < tok.n_vocab() && word < 0; ++id) {
    const std::string p = tok.TokenPiece(id, false);
    if (p.size() >= 3 &&
        std::all_of(p.begin(), p.end(), [](char c) { return c >= 'a' && c <= 'z'; })) {
      word = id;
    }
  }
  ASSERT_GE(word, 0) << "no all-letter token of 3+ bytes in the built-in vocabulary";
  const std::string piece = tok.TokenPiece(word, false);
  const std::string trigger = piece.substr(0, 2), rest = piece.substr(2);
  GrammarFilter takes(Compile("root ::= \"" + rest + "\" \"!\""), SmallVocab(), {trigger});
  GrammarFilter refuses(Compile(R"(root ::= "!")"), SmallVocab(), {trigger});
  EXPECT_TRUE(takes.Allows(word));
  EXPECT_FALSE(refuses.Allows(word));
  ASSERT_TRUE(takes.Accept(word));
  EXPECT_TRUE(takes.active());
  EXPECT_FALSE(takes.IsComplete());
  ASSERT_TRUE(takes.Accept(byte('!')));
  EXPECT_TRUE(takes.IsComplete());
}

// A leading block (a thinking model's reasoning) is not searched for the trigger: the call
// syntax written inside it stays free text; after the block's close it triggers.
TEST(GrammarFilter, LazyTriggerSkipsTheLeadingBlock) {
  const Tokenizer& tok = SmallTokenizer();
  const int32_t eos = *tok.eos_id();
  auto g = Compile(R"(root ::= "{" [0-9]+ "}")");
  const LazyStart thinking{"@@", "<t>", "</t>"};
  // Opened at the start: "@@" inside is words; after "</t>" it is a call.
  GrammarFilter opened(g, SmallVocab(), thinking);
  ASSERT_TRUE(Feed(opened, "<t> call @@x? no @"));
  EXPECT_FALSE(opened.active());
  ASSERT_TRUE(Feed(opened, "@ </t"));
  EXPECT_FALSE(opened.active());
  ASSERT_TRUE(Feed(opened, "> answer @"));
  EXPECT_FALSE(opened.active());
  EXPECT_TRUE(opened.Allows(eos));
  ASSERT_TRUE(Feed(opened, "@"));
  EXPECT_TRUE(opened.active());
  EXPECT_FALSE(opened.Allows('x'));
  ASSERT_TRUE(Feed(opened, "{1}"));
  EXPECT_TRUE(opened.IsComplete());
  // Opened by the prompt: the output starts inside the block.
  LazyStart inside = thinking;
  inside.in_block = true;
  GrammarFilter prompt_opened(g, SmallVocab(), inside);
  ASSERT_TRUE(Feed(prompt_opened, "@@ </t>@@"));
  EXPECT_TRUE(prompt_opened.active());
  // Not at the very start, the open tag is words: the trigger after it counts.
  GrammarFilter late(g, SmallVocab(), thinking);
  ASSERT_TRUE(Feed(late, " <t> @@"));
  EXPECT_TRUE(late.active());
  // No block at all: the trigger may start while the start was still undecided ("<" could
  // begin "<t>"), and may come first.
  GrammarFilter direct(g, SmallVocab(), LazyStart{"<@", "<t>", "</t>"});
  ASSERT_TRUE(Feed(direct, "<"));
  EXPECT_FALSE(direct.active());
  EXPECT_TRUE(direct.Allows('t'));
  ASSERT_TRUE(Feed(direct, "@"));
  EXPECT_TRUE(direct.active());
  EXPECT_FALSE(direct.Allows('t'));
  ASSERT_TRUE(Feed(direct, "{2}"));
  EXPECT_TRUE(direct.IsComplete());
}

// Without a trigger, the grammar applies right after the leading block, or from the start
// when the output does not open one; the output cannot end before it is complete.
TEST(GrammarFilter, GrammarAfterTheLeadingBlock) {
  const int32_t eos = *SmallTokenizer().eos_id();
  auto g = Compile(R"(root ::= "{" [0-9]+ "}")");
  const LazyStart after_block{"", "<t>", "</t>"};
  GrammarFilter thinks(g, SmallVocab(), after_block);
  EXPECT_FALSE(thinks.active());
  ASSERT_TRUE(Feed(thinks, "<t> words {1} </t"));
  EXPECT_FALSE(thinks.active());
  EXPECT_FALSE(thinks.IsComplete());
  EXPECT_FALSE(thinks.Allows(eos));  // the answer must come
  ASSERT_TRUE(Feed(thinks, ">"));
  EXPECT_TRUE(thinks.active());
  EXPECT_FALSE(thinks.Allows('w'));
  ASSERT_TRUE(Feed(thinks, "{1}"));
  EXPECT_TRUE(thinks.IsComplete());
  // No block: the grammar from the start.
  GrammarFilter answers(g, SmallVocab(), after_block);
  EXPECT_FALSE(answers.Allows('w'));
  EXPECT_FALSE(answers.Allows(' '));
  ASSERT_TRUE(Feed(answers, "{2}"));
  EXPECT_TRUE(answers.active());
  EXPECT_TRUE(answers.IsComplete());
  // The open tag begun and left: what was written of it is the grammar's text.
  GrammarFilter left(g, SmallVocab(), after_block);
  ASSERT_TRUE(Feed(left, "<"));
  EXPECT_FALSE(left.Allows('{'));
  EXPECT_TRUE(left.Allows('t'));
  // Opened by the prompt.
  LazyStart inside = after_block;
  inside.in_block = true;
  GrammarFilter prompt_opened(g, SmallVocab(), inside);
  ASSERT_TRUE(Feed(prompt_opened, "{x</t"));
  EXPECT_FALSE(prompt_opened.active());
  ASSERT_TRUE(Feed(prompt_opened, ">{3}"));
  EXPECT_TRUE(prompt_opened.IsComplete());
}

// The bulk path (every token at once, skipping refused first bytes and pairs) marks exactly
// the tokens Allows allows, in every kind of state, and nothing past the vocabulary.
TEST(GrammarFilter, MarkAllowedIsAllowsForEveryToken) {
  const Tokenizer& tok = SmallTokenizer();
  auto byte = [](char c) { return static_cast<int32_t>(static_cast<uint8_t>(c)); };
  auto same = [&](const GrammarFilter& f, const std::string& what) {
    std::vector<uint8_t> marked(tok.n_vocab() + 3, 7);
    f.MarkAllowed(marked);
    int n_allowed = 0;
    for (int32_t id = 0; id < static_cast<int32_t>(marked.size()); ++id) {
      if (marked[id] != (f.Allows(id) ? 1 : 0)) {
        ADD_FAILURE() << what << ": id " << id << " marked " << int{marked[id]};
        return -1;
      }
      n_allowed += marked[id];
    }
    return n_allowed;
  };
  const auto json = Compile(R"(root ::= "{" ws ( "\"" [a-z ]* "\"" ws ":" ws [0-9]+ ws )? "}"
                               ws ::= [ \n]*)");
  GrammarFilter f(json, SmallVocab());
  EXPECT_EQ(same(f, "start"), 1);  // "{" only
  int seen = 0;
  for (char c : std::string("{ \"ab c\": 12 }")) {
    ASSERT_TRUE(f.Accept(byte(c)));
    seen = std::max(seen, same(f, std::string("after ") + c));
  }
  EXPECT_GT(seen, 50);  // inside the string, many merged tokens fit
  EXPECT_TRUE(f.IsComplete());
  // Multi-byte characters: a token may end inside one.
  GrammarFilter utf8(Compile(R"(root ::= "é" [α-ω]+)"), SmallVocab());
  same(utf8, "utf8 start");
  ASSERT_TRUE(utf8.Accept(0xC3));
  same(utf8, "utf8 half");
  // Lazy, before and after its trigger.
  GrammarFilter lazy(json, SmallVocab(), {"@@"});
  EXPECT_EQ(same(lazy, "lazy"), tok.n_vocab());  // free text: anything
  ASSERT_TRUE(lazy.Accept(byte('@')));
  same(lazy, "lazy half trigger");
  ASSERT_TRUE(lazy.Accept(byte('@')));
  EXPECT_EQ(same(lazy, "triggered"), 1);
  // Inside a leading block, at its end, and after it (a trigger searched for, or the grammar
  // right after the block).
  for (const LazyStart& start : {LazyStart{"@@", "<t>", "</t>"}, LazyStart{"", "<t>", "</t>"}}) {
    GrammarFilter block(json, SmallVocab(), start);
    same(block, "block start");
    for (char c : std::string("<t> a > @@ </t")) {
      ASSERT_TRUE(block.Accept(byte(c)));
      same(block, std::string("block after ") + c);
    }
    ASSERT_TRUE(block.Accept(byte('>')));
    same(block, "after the block");
  }
  // A close tag whose last byte starts merged tokens ("th", "the", ...): after "@" each of
  // them ends the block with letters the grammar refuses.
  GrammarFilter letters(json, SmallVocab(), LazyStart{"", "<t>", "@t"});
  for (char c : std::string("<t> x @")) ASSERT_TRUE(letters.Accept(byte(c)));
  EXPECT_LT(same(letters, "a close tag ending in a letter"), tok.n_vocab());
}

}  // namespace
}  // namespace mt::grammar
