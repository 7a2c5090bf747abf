#include "grammar/grammar.h"

#include <gtest/gtest.h>

#include <string>

namespace mt::grammar {
namespace {

std::shared_ptr<const Grammar> Compile(std::string_view text) {
  auto g = Grammar::Parse(text);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? *g : nullptr;
}

// Whether `text` is a whole sentence of `grammar`, fed in one piece.
bool Accepts(std::string_view grammar, std::string_view text) {
  auto g = Compile(grammar);
  if (!g) return false;
  Matcher m(g);
  return m.Accept(text) && m.IsComplete();
}

// Whether `text` is a prefix of some sentence (it may be a whole one).
bool Prefix(std::string_view grammar, std::string_view text) {
  auto g = Compile(grammar);
  if (!g) return false;
  Matcher m(g);
  return m.Accept(text);
}

std::string ParseError(std::string_view text) {
  auto g = Grammar::Parse(text);
  return g.ok() ? "(compiled)" : g.status().message();
}

TEST(Grammar, LiteralsAndAlternatives) {
  const char* g = R"(root ::= "yes" | "no" | "maybe" "!")";
  EXPECT_TRUE(Accepts(g, "yes"));
  EXPECT_TRUE(Accepts(g, "no"));
  EXPECT_TRUE(Accepts(g, "maybe!"));
  EXPECT_FALSE(Accepts(g, "maybe"));
  EXPECT_TRUE(Prefix(g, "may"));
  EXPECT_FALSE(Prefix(g, "yess"));
  EXPECT_FALSE(Prefix(g, "x"));
  EXPECT_FALSE(Accepts(g, ""));
}

TEST(Grammar, SetsAndEscapes) {
  const char* g = R"(root ::= [a-c0-9_] [^"\\\x00-\x1f] "\n\t\"\\\u00e9\U0001F600" .)";
  EXPECT_TRUE(Accepts(g, "b~\n\t\"\\é😀z"));
  EXPECT_TRUE(Accepts(g, "_é\n\t\"\\é😀\n"));  // '.' takes a newline too
  EXPECT_FALSE(Prefix(g, "d"));
  EXPECT_FALSE(Prefix(g, "a\""));
  EXPECT_FALSE(Prefix(g, "a\\"));
  EXPECT_FALSE(Prefix(g, std::string("a\x01", 2)));
  // A '-' first or last in a set is itself.
  EXPECT_TRUE(Accepts(R"(root ::= [-a] [a-])", "--"));
  EXPECT_TRUE(Accepts(R"(root ::= [\]] [\-])", "]-"));
}

TEST(Grammar, Repetitions) {
  const char* g = R"(root ::= "a"* "b"+ "c"? ("d" "e"){2} "f"{1,3} "g"{2,})";
  EXPECT_TRUE(Accepts(g, "bdedefgg"));
  EXPECT_TRUE(Accepts(g, "aaabbcdedefffggggg"));
  EXPECT_FALSE(Accepts(g, "dedefgg"));      // b+ needs one
  EXPECT_FALSE(Accepts(g, "bdefgg"));       // (de){2}
  EXPECT_FALSE(Accepts(g, "bdedeffffgg"));  // f{1,3}
  EXPECT_FALSE(Accepts(g, "bdedefg"));      // g{2,}
  EXPECT_FALSE(Accepts(g, "bccdedefgg"));   // c?
  EXPECT_TRUE(Accepts(R"(root ::= "x"{0,2})", ""));
  EXPECT_TRUE(Accepts(R"(root ::= "x"{0,2})", "xx"));
  EXPECT_FALSE(Accepts(R"(root ::= "x"{0,2})", "xxx"));
  EXPECT_TRUE(Accepts(R"(root ::= "x"{ 3 })", "xxx"));
}

TEST(Grammar, RulesMultilineAndComments) {
  const char* g = R"(# a list of numbers
root ::= "[" ws (
    num ("," ws num)*   # at least one
  )? "]"
num ::= [0-9]+
ws ::= " "*
item ::= "x"
       | "y"
)";
  EXPECT_TRUE(Accepts(g, "[]"));
  EXPECT_TRUE(Accepts(g, "[ 1, 22,333]"));
  EXPECT_FALSE(Accepts(g, "[1,]"));
  EXPECT_FALSE(Prefix(g, "[,"));
  auto item = Grammar::Parse(g, "item");
  ASSERT_TRUE(item.ok());
  Matcher m(*item);
  EXPECT_TRUE(m.CanAccept("y"));
}

TEST(Grammar, RecursionNests) {
  const char* g = R"g(root ::= "(" root ")" | "")g";
  EXPECT_TRUE(Accepts(g, ""));
  EXPECT_TRUE(Accepts(g, "((()))"));
  EXPECT_FALSE(Accepts(g, "(()"));
  EXPECT_FALSE(Prefix(g, "())"));
  std::string deep(1000, '(');
  deep += std::string(1000, ')');
  EXPECT_TRUE(Accepts(g, deep));
}

TEST(Grammar, CompleteAndContinue) {
  auto g = Compile(R"(root ::= "ab" "c"?)");
  Matcher m(g);
  EXPECT_FALSE(m.IsComplete());
  EXPECT_TRUE(m.CanContinue());
  ASSERT_TRUE(m.Accept("a"));
  EXPECT_FALSE(m.IsComplete());
  ASSERT_TRUE(m.Accept("b"));
  EXPECT_TRUE(m.IsComplete());
  EXPECT_TRUE(m.CanContinue());
  EXPECT_FALSE(m.Accept("d"));  // refused: unchanged
  EXPECT_TRUE(m.IsComplete());
  ASSERT_TRUE(m.Accept("c"));
  EXPECT_TRUE(m.IsComplete());
  EXPECT_FALSE(m.CanContinue());
  EXPECT_FALSE(m.CanAccept("c"));
}

TEST(Grammar, Utf8SplitAcrossPieces) {
  auto g = Compile(R"(root ::= "é" [α-ω]+)");  // é = c3 a9; α..ω = U+03B1..U+03C9
  Matcher m(g);
  EXPECT_TRUE(m.CanAccept("\xc3"));
  EXPECT_FALSE(m.CanAccept("\xc4"));  // starts U+0100..U+013F: not é
  ASSERT_TRUE(m.Accept("\xc3"));
  EXPECT_FALSE(m.IsComplete());
  EXPECT_TRUE(m.CanContinue());
  ASSERT_TRUE(m.Accept("\xa9\xce"));  // é, then half of a Greek letter
  EXPECT_FALSE(m.CanAccept("\xa0"));  // U+03A0 (Π) is outside α-ω
  ASSERT_TRUE(m.Accept("\xb1"));      // α
  EXPECT_TRUE(m.IsComplete());
  // Bytes that are not UTF-8 are refused.
  EXPECT_FALSE(m.CanAccept("\xa9"));          // a continuation byte first
  EXPECT_FALSE(m.CanAccept("\xc0\x80"));      // overlong
  EXPECT_FALSE(m.CanAccept("\xed\xa0\x80"));  // a surrogate
  EXPECT_FALSE(m.CanAccept("\xce\x41"));      // a lead byte, then ASCII
  // A lead byte's range starts at its shortest form: E0 cannot begin '{' (E0 81 BB would
  // be an overlong '{'), nor F0 anything below U+10000.
  Matcher brace(Compile(R"(root ::= "{")"));
  EXPECT_FALSE(brace.CanAccept("\xe0"));
  EXPECT_FALSE(brace.CanAccept("\xc1"));
  Matcher wide(Compile(R"(root ::= [\u0800-\uffff])"));
  EXPECT_TRUE(wide.CanAccept("\xe0"));
  EXPECT_FALSE(wide.CanAccept("\xf0"));
  // Half a surrogate begins nothing, even where any character may come: no byte could
  // finish it (a sampler would find no token allowed after it).
  Matcher any(Compile(R"(root ::= [^"]*)"));
  EXPECT_TRUE(any.CanAccept("\xed"));  // U+D000-U+D7FF are characters
  EXPECT_TRUE(any.CanAccept("\xed\x9f"));
  EXPECT_FALSE(any.CanAccept("\xed\xa0"));  // U+D800-U+D83F: surrogates only
  EXPECT_FALSE(any.CanAccept("\xed\xbf"));
}

TEST(Grammar, CanAcceptLeavesStateAlone) {
  auto g = Compile(R"(root ::= "ab")");
  Matcher m(g);
  EXPECT_TRUE(m.CanAccept("ab"));
  EXPECT_TRUE(m.CanAccept("a"));
  EXPECT_FALSE(m.CanAccept("b"));
  ASSERT_TRUE(m.Accept("a"));
  EXPECT_TRUE(m.CanAccept("b"));
  EXPECT_FALSE(m.CanAccept("a"));
  Matcher copy = m;
  ASSERT_TRUE(copy.Accept("b"));
  EXPECT_TRUE(copy.IsComplete());
  EXPECT_FALSE(m.IsComplete());  // copies are independent
}

TEST(Grammar, AmbiguityKeepsEveryParse) {
  // "aa" can be x then y or y alone; both parses must survive to accept what follows.
  const char* g = R"(root ::= x? y "1" | y "2"
x ::= "a"
y ::= "a" | "aa")";
  EXPECT_TRUE(Accepts(g, "aa1"));
  EXPECT_TRUE(Accepts(g, "aa2"));
  EXPECT_TRUE(Accepts(g, "a1"));
  EXPECT_FALSE(Accepts(g, "aaa2"));
}

TEST(Grammar, SyntaxErrorsNameLineAndColumn) {
  EXPECT_EQ(ParseError("root ::= \"a\"\nfoo ::= \"b"),
            "grammar: line 2, column 11: unterminated string literal");
  EXPECT_EQ(ParseError("root = \"a\""),
            "grammar: line 1, column 6: expected '::=' after the "
            "rule name");
  EXPECT_EQ(ParseError("root ::= [z-a]"),
            "grammar: line 1, column 14: character range with its end before its start");
  EXPECT_EQ(ParseError("root ::= \"\\q\""), "grammar: line 1, column 11: unknown escape '\\q'");
  // Bytes that are not printable are shown as \xHH: the message stays one line.
  EXPECT_EQ(ParseError("root ::= \"a\\\n\""),
            "grammar: line 1, column 12: unknown escape: '\\' before \\x0a");
  EXPECT_EQ(ParseError("root ::= \x01"), "grammar: line 1, column 10: unexpected \\x01");
  EXPECT_EQ(ParseError("root ::= (\"a\""), "grammar: line 1, column 14: expected ')'");
  EXPECT_EQ(ParseError("root ::= \"a\"{3,1}"),
            "grammar: line 1, column 17: repetition {m,n} with n < m");
  EXPECT_EQ(ParseError("root ::= \"a\"{20000}"),
            "grammar: line 1, column 14: repetition count above 10000");
  EXPECT_EQ(ParseError("root ::= \"a\" )"), "grammar: line 1, column 14: unexpected ')'");
  EXPECT_EQ(ParseError("root ::= \"\xff\""), "grammar: line 1, column 11: invalid UTF-8");
}

TEST(Grammar, StructureErrors) {
  EXPECT_EQ(ParseError("root ::= item\n"),
            "grammar: line 1, column 10: rule 'item' is not "
            "defined");
  EXPECT_EQ(ParseError("item ::= \"a\""), "grammar: no rule 'root'");
  EXPECT_EQ(ParseError("root ::= \"a\"\nroot ::= \"b\""),
            "grammar: line 2, column 9: rule 'root' is defined twice");
  EXPECT_EQ(ParseError("root ::= root \"a\" | \"a\""),
            "grammar: rule 'root' is left-recursive (or repeats something that may be empty)");
  EXPECT_EQ(ParseError("root ::= x \"a\"\nx ::= y? root\ny ::= \"b\""),
            "grammar: rule 'root' is left-recursive (or repeats something that may be empty)");
  EXPECT_EQ(ParseError("root ::= (\"a\"?)*"),
            "grammar: rule 'root' is left-recursive (or repeats something that may be empty)");
  // Right recursion and nullable-but-consuming repetitions are fine.
  EXPECT_EQ(ParseError("root ::= \"a\" root | \"\""), "(compiled)");
  EXPECT_EQ(ParseError("root ::= (\"a\" \"b\"?)*"), "(compiled)");
}

TEST(Grammar, SizeLimits) {
  EXPECT_EQ(ParseError("root ::= (\"a\"{10000}){10000}"),
            "grammar: line 1, column 29: the grammar expands to more than 100000 elements");
  std::string big(2 << 20, ' ');
  EXPECT_EQ(ParseError(big), "grammar: 2097152 bytes of text, more than the limit of 1048576");
}

}  // namespace
}  // namespace mt::grammar
