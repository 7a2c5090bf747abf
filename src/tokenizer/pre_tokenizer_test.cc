#include "tokenizer/pre_tokenizer.h"

#include <gtest/gtest.h>

namespace mt {
namespace {

using Pieces = std::vector<std::string>;

Pieces Split(std::string_view pre, std::string_view text) {
  Result<PreTokenizer> p = PreTokenizer::ForName(pre);
  EXPECT_TRUE(p.ok()) << p.status().message();
  std::vector<std::string_view> views;
  EXPECT_TRUE(p->Split(text, views).ok());
  return Pieces(views.begin(), views.end());
}

// Expected pieces are derived by hand from the regexes (tokenizer.json's, leftmost
// alternative first, greedy with backtracking).
constexpr std::string_view kText = "Hello, y'all! 1234 don't  \n\n  x";

TEST(PreTokenizerTest, Qwen2) {
  // "'all" is not a contraction, so [^\r\n\p{L}\p{N}]?\p{L}+ takes it whole; digits are single;
  // " " before a digit is left alone by \s+(?!\S) -> \s+; "  \n\n" is \s*[\r\n]+ (backtracked
  // to end at the last newline); then \s+(?!\S) leaves one space for " x".
  EXPECT_EQ(Split("qwen2", kText), (Pieces{"Hello", ",", " y", "'all", "!", " ", "1", "2", "3", "4",
                                           " don", "'t", "  \n\n", " ", " x"}));
  // Contractions are case-insensitive.
  EXPECT_EQ(Split("qwen2", "WE'LL I'M HE'S"), (Pieces{"WE", "'LL", " I", "'M", " HE", "'S"}));
  // Punctuation takes trailing newlines; letters take one leading non-letter.
  EXPECT_EQ(Split("qwen2", "a.\n\nb"), (Pieces{"a", ".\n\n", "b"}));
  EXPECT_EQ(Split("qwen2", "$x #y"), (Pieces{"$x", " #", "y"}));
  EXPECT_EQ(Split("qwen2", "  "), (Pieces{"  "}));
}

TEST(PreTokenizerTest, Llama3DigitsInThrees) {
  EXPECT_EQ(Split("llama-bpe", kText), (Pieces{"Hello", ",", " y", "'all", "!", " ", "123", "4",
                                               " don", "'t", "  \n\n", " ", " x"}));
  EXPECT_EQ(Split("llama-bpe", "1234567"), (Pieces{"123", "456", "7"}));
  Result<PreTokenizer> p = PreTokenizer::ForName("llama-bpe");
  EXPECT_TRUE(p->ignore_merges());
  EXPECT_FALSE(p->nfc());
}

TEST(PreTokenizerTest, Gpt2AndOlmo) {
  // No letter-with-prefix rule: "'" and "all" split; digits stay in one run with the space;
  // lowercase contractions only.
  const Pieces want = {"Hello", ",", " y", "'", "all", "!", " 1234", " don", "'t", "  \n\n ", " x"};
  EXPECT_EQ(Split("gpt-2", kText), want);
  EXPECT_EQ(Split("olmo", kText), want);
  EXPECT_EQ(Split("gpt-2", "WE'LL we'll"), (Pieces{"WE", "'", "LL", " we", "'ll"}));
  EXPECT_EQ(Split("gpt-2", "a\tb"), (Pieces{"a", "\t", "b"}));  // the final \s+ alternative
}

TEST(PreTokenizerTest, LlamaCppDefaultIsFourPasses) {
  // Pass 1 isolates punctuation/symbols, pass 4 cuts digit runs into threes.
  EXPECT_EQ(Split("default", "a+b=12345"), (Pieces{"a", "+", "b", "=", "123", "45"}));
  EXPECT_EQ(Split("", "a+b"), (Pieces{"a", "+", "b"}));
}

TEST(PreTokenizerTest, SpacesAreOnigurumaSpaces) {
  // U+0085 is \s for Oniguruma (Hugging Face), so it is not part of a punctuation run;
  // U+180E is not \s there (PCRE2's own \s would take it), so it is.
  EXPECT_EQ(Split("qwen2", "a\xC2\x85!"), (Pieces{"a", "\xC2\x85", "!"}));
  EXPECT_EQ(Split("qwen2", "a\xE1\xA0\x8E!"), (Pieces{"a", "\xE1\xA0\x8E!"}));
  // NBSP and ideographic space are separators.
  EXPECT_EQ(Split("qwen2",
                  "a\xC2\xA0\xC2\xA0"
                  "b"),
            (Pieces{"a", "\xC2\xA0",
                    "\xC2\xA0"
                    "b"}));
}

TEST(PreTokenizerTest, InvalidUtf8IsKeptInItsOwnPiece) {
  EXPECT_EQ(Split("qwen2",
                  "ab\xFF"
                  "cd"),
            (Pieces{"ab", "\xFF", "cd"}));
  EXPECT_EQ(Split("gpt-2", "\xC3"), (Pieces{"\xC3"}));
  EXPECT_EQ(Split("qwen2", ""), Pieces{});
}

TEST(PreTokenizerTest, UnknownNameIsAnError) {
  Result<PreTokenizer> p = PreTokenizer::ForName("falcon");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(p.status().message().find("'falcon'"), std::string::npos);
  EXPECT_TRUE(PreTokenizer::ForName("qwen2")->nfc());
  EXPECT_FALSE(PreTokenizer::ForName("olmo")->nfc());
}

}  // namespace
}  // namespace mt
