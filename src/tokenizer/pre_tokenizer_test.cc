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

// GLM-4/4.5's split is Llama 3's regex (llama.cpp's CHATGLM4), but the BPE keeps its merges
// and the vocabulary takes no BOS token.
TEST(PreTokenizerTest, Glm4IsLlama3sSplitWithMergesAndNoBos) {
  for (const char* name : {"glm4", "chatglm-bpe"}) {
    EXPECT_EQ(Split(name, kText), Split("llama-bpe", kText)) << name;
    EXPECT_EQ(Split(name, "1234567"), (Pieces{"123", "456", "7"})) << name;
    Result<PreTokenizer> p = PreTokenizer::ForName(name);
    ASSERT_TRUE(p.ok());
    EXPECT_FALSE(p->ignore_merges());
    EXPECT_TRUE(p->no_bos());
  }
  EXPECT_FALSE(PreTokenizer::ForName("llama-bpe")->no_bos());
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

TEST(PreTokenizerTest, Deepseek3) {
  // Pass 1 cuts "12345" into "123" "45"; pass 3 gives " (" (a space and punctuation), "x",
  // ")", and "\n\n" (\s*[\r\n]+ backtracked to end at the last newline) before " ", " end".
  EXPECT_EQ(Split("deepseek-v3", "Hello, world! 12345 (x) test\n\n  end"),
            (Pieces{"Hello", ",", " world", "!", " ", "123", "45", " (", "x", ")", " test", "\n\n",
                    " ", " end"}));
  // Pass 2 isolates runs of ideographs and of kana, even inside a letter run.
  const std::string cjk = "\u4f60\u597d", kana = "\u30ab\u30bf\u3072\u3089";
  EXPECT_EQ(Split("deepseek-v3", "a" + cjk + kana + " b" + kana),
            (Pieces{"a", cjk + kana, " b", kana}));
  // One ASCII punctuation mark joins the ASCII word after it, where a match starts at it.
  EXPECT_EQ(Split("deepseek-v3", "a.md b(c)"), (Pieces{"a", ".md", " b", "(c", ")"}));
  // Combining marks stay with their letters (qwen2 splits them off); any N digits, in threes.
  EXPECT_EQ(Split("deepseek-v3", "cafe\u0301 ok"), (Pieces{"cafe\u0301", " ok"}));
  EXPECT_EQ(Split("qwen2", "cafe\u0301 ok"), (Pieces{"cafe", "\u0301", " ok"}));
  EXPECT_EQ(Split("deepseek-v3", "1234567 \u0663\u0664\u0665\u0666"),
            (Pieces{"123", "456", "7", " ", "\u0663\u0664\u0665", "\u0666"}));
  // Hangul is not in pass 2: it is a letter run with its space; kanji leave ASCII apart.
  EXPECT_EQ(
      Split("deepseek-v3", "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8 \u65e5\u672c\u8a9eabc"),
      (Pieces{"\ud55c\uad6d\uc5b4", " \ud14d\uc2a4\ud2b8", " ", "\u65e5\u672c\u8a9e", "abc"}));
  // Symbols (emoji are So) run together with one leading space; a tab prefixes a word.
  EXPECT_EQ(Split("deepseek-v3", "a \U0001F642\U0001F642\tb"),
            (Pieces{"a", " \U0001F642\U0001F642", "\tb"}));
  Result<PreTokenizer> p = PreTokenizer::ForName("deepseek-v3");
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->nfc());
  EXPECT_FALSE(p->ignore_merges());
}

// gpt-oss / GPT-4o (o200k). The expected pieces were derived by hand and agree with
// js-tiktoken's o200k_base regex.
TEST(PreTokenizerTest, Gpt4o) {
  // Contractions join their word, in any case; "'all" is not one, so "'" prefixes "all".
  EXPECT_EQ(Split("gpt-4o", kText), (Pieces{"Hello", ",", " y", "'all", "!", " ", "123", "4",
                                            " don't", "  \n\n", " ", " x"}));
  EXPECT_EQ(Split("gpt-4o", "I'm HE'S we'LL"), (Pieces{"I'm", " HE'S", " we'LL"}));
  // A word is upper-case letters with a lower-case tail, or upper-case letters alone: it
  // splits where lower case turns to upper, also outside ASCII.
  EXPECT_EQ(Split("gpt-4o", "camelCase HTTPServer iPhone XMLHttpRequest HELLO!"),
            (Pieces{"camel", "Case", " HTTPServer", " i", "Phone", " XMLHttp", "Request", " HELLO",
                    "!"}));
  EXPECT_EQ(
      Split("gpt-4o", "\u043c\u0438\u0440\u041c\u0418\u0420 \u041f\u0440\u0438\u0432\u0435\u0442"),
      (Pieces{"\u043c\u0438\u0440", "\u041c\u0418\u0420",
              " \u041f\u0440\u0438\u0432\u0435\u0442"}));
  // Digits (any \p{N}) in runs of up to three; "." is not part of a number.
  EXPECT_EQ(Split("gpt-4o", "1234567 12.5 \u0663\u0664\u0665\u0666"),
            (Pieces{"123", "456", "7", " ", "12", ".", "5", " ", "\u0663\u0664\u0665", "\u0666"}));
  // Ideographs (Lo) count as both cases, so they run on into Latin letters either way; a
  // fullwidth comma prefixes the next word.
  const std::string nihao = "\u4f60\u597d", shijie = "\u4e16\u754c";
  EXPECT_EQ(Split("gpt-4o", nihao + shijie + "abc ABC" + nihao + " " + nihao + "\uff0c" + shijie),
            (Pieces{nihao + shijie + "abc", " ABC" + nihao, " " + nihao, "\uff0c" + shijie}));
  // Marks \p{M} stay in the word (Hindi's vowel signs and virama; llama.cpp cuts them out).
  EXPECT_EQ(
      Split("gpt-4o", "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e"),
      (Pieces{"\u0928\u092e\u0938\u094d\u0924\u0947", " \u0926\u0941\u0928\u093f\u092f\u093e"}));
  // Emoji are symbols: a run with one leading space; a ZWJ sequence and its variation
  // selector stay with the punctuation after it.
  EXPECT_EQ(Split("gpt-4o", "a \U0001F680\U0001F680 b\U0001F636\u200d\U0001F32B\ufe0f!"),
            (Pieces{"a", " \U0001F680\U0001F680", " b", "\U0001F636\u200d\U0001F32B\ufe0f!"}));
  // Whitespace runs leave their last space to the next word; newlines end a run.
  EXPECT_EQ(Split("gpt-4o", "a  \t b"), (Pieces{"a", "  \t", " b"}));
  EXPECT_EQ(Split("gpt-4o", "line1\n    line2"), (Pieces{"line", "1", "\n", "   ", " line", "2"}));
  EXPECT_EQ(Split("gpt-4o", "a\r\n\r\nb"), (Pieces{"a", "\r\n\r\n", "b"}));
  EXPECT_EQ(Split("gpt-4o", "\tfoo"), (Pieces{"\tfoo"}));
  // Punctuation takes trailing newlines and slashes (Llama 3 only newlines).
  EXPECT_EQ(Split("gpt-4o", "a.\n\nb/\n"), (Pieces{"a", ".\n\n", "b", "/\n"}));
  EXPECT_EQ(Split("gpt-4o", "https://a.b/c"), (Pieces{"https", "://", "a", ".b", "/c"}));
  EXPECT_EQ(Split("gpt-4o", "a.\n/b"), (Pieces{"a", ".\n/", "b"}));
  EXPECT_EQ(Split("llama-bpe", "a.\n/b"), (Pieces{"a", ".\n", "/b"}));
  Result<PreTokenizer> p = PreTokenizer::ForName("gpt-4o");
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->ignore_merges());  // tokenizer.json's ignore_merges; tiktoken does the same
  EXPECT_FALSE(p->add_bos());
  EXPECT_FALSE(p->nfc());
  EXPECT_FALSE(p->no_bos());
  EXPECT_TRUE(PreTokenizer::ForName("llama-bpe")->add_bos());
}

TEST(PreTokenizerTest, DeepseekLlm) {
  // Newlines alone; letters with one leading space; "\u3002" (ideographic full stop) is
  // punctuation; the ideographs are a run of pass 5; the digits a run of pass 6.
  EXPECT_EQ(Split("deepseek-llm", "Hello World 123 \u4f60\u597d\u3002\n"),
            (Pieces{"Hello", " World", " ", "123", " ", "\u4f60\u597d", "\u3002", "\n"}));
  // Cyrillic is in the letter ranges; trailing whitespace is a piece of its own.
  EXPECT_EQ(Split("deepseek-llm", "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440!  "),
            (Pieces{"\u041f\u0440\u0438\u0432\u0435\u0442", " \u043c\u0438\u0440", "!", "  "}));
  // U+2000 lies in pass 5's U+0800..U+4E00, so it stays inside the ideograph run (as Hugging
  // Face matches it; llama.cpp would cut it out).
  EXPECT_EQ(Split("deepseek-llm", "\u4e2d\u2000\u6587"), (Pieces{"\u4e2d\u2000\u6587"}));
  // The letter class has gaps: U+00B5 is in it, U+00D7 (between U+00D6 and U+00D8) is not.
  EXPECT_EQ(Split("deepseek-llm", "\u00b5\u00b5\u00d7\u00b5"),
            (Pieces{"\u00b5\u00b5", "\u00d7", "\u00b5"}));
  // Pass 3's ":-~" holds the ASCII letters, so they are cut out of a mixed letter run.
  EXPECT_EQ(Split("deepseek-llm", "a\u00b5b"), (Pieces{"a", "\u00b5", "b"}));
  // Pass 5 splits every piece, so letters of pass 2 at or above U+0800 (Greek Extended) end
  // up alone.
  EXPECT_EQ(Split("deepseek-llm", "a\u1fd3b"), (Pieces{"a", "\u1fd3", "b"}));
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
