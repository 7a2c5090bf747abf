#include <gtest/gtest.h>

#include <chrono>
#include <set>

#include "tokenizer/utf8.h"
#include "tokenizer/vocab_spec.h"

namespace mt {
namespace {

int32_t T(TokenType t) { return static_cast<int32_t>(t); }

void ExpectUnique(const VocabSpec& v) {
  std::set<std::string> seen(v.tokens.begin(), v.tokens.end());
  EXPECT_EQ(seen.size(), v.tokens.size());  // llama.cpp asserts unique token texts
}

TEST(BuiltinVocabTest, BpeHasByteTokensMergesSpecialsAndPadding) {
  const auto start = std::chrono::steady_clock::now();
  VocabSpec v = BuiltinBpeVocab(50304, "olmo", {"<|endoftext|>", "<|padding|>"});
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(secs, 1.0);
  EXPECT_EQ(v.model, "gpt2");
  EXPECT_EQ(v.pre, "olmo");
  ASSERT_EQ(v.size(), 50304u);
  ASSERT_EQ(v.token_types.size(), 50304u);
  EXPECT_TRUE(v.scores.empty());
  // The 256 byte tokens in GPT-2 form: '!' is itself, ' ' is U+0120, '\n' is U+010A.
  EXPECT_EQ(v.tokens['!'], "!");
  EXPECT_EQ(v.tokens[' '], "\xC4\xA0");
  EXPECT_EQ(v.tokens['\n'], "\xC4\x8A");
  EXPECT_EQ(v.tokens[0], "\xC4\x80");    // U+0100
  EXPECT_EQ(v.tokens[255], "\xC3\xBF");  // U+00FF maps to itself
  EXPECT_GT(v.merges.size(), 500u);
  // Each merge joins two existing tokens into another existing token.
  std::set<std::string> texts(v.tokens.begin(), v.tokens.end());
  for (const std::string& m : v.merges) {
    const size_t sp = m.find(' ');
    ASSERT_NE(sp, std::string::npos);
    const std::string a = m.substr(0, sp), b = m.substr(sp + 1);
    EXPECT_TRUE(texts.count(a) && texts.count(b) && texts.count(a + b)) << m;
  }
  // Common corpus words became single tokens.
  EXPECT_TRUE(FindTokenId(v, "\xC4\xA0the").has_value());  // "Ġthe"
  const uint32_t eot = *FindTokenId(v, "<|endoftext|>");
  EXPECT_EQ(v.token_types[eot], T(TokenType::kControl));
  EXPECT_EQ(*FindTokenId(v, "<|padding|>"), eot + 1);
  EXPECT_EQ(v.tokens[eot + 2], "[PAD" + std::to_string(eot + 2) + "]");
  EXPECT_EQ(v.token_types.back(), T(TokenType::kUnused));
  ExpectUnique(v);
}

TEST(BuiltinVocabTest, BpeIsDeterministicAndRespectsSmallSizes) {
  VocabSpec a = BuiltinBpeVocab(300, "gpt-2", {"<|endoftext|>"});
  VocabSpec b = BuiltinBpeVocab(300, "gpt-2", {"<|endoftext|>"});
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.merges, b.merges);
  ASSERT_EQ(a.size(), 300u);
  EXPECT_EQ(a.tokens[299], "<|endoftext|>");  // 256 bytes + 43 merges + 1 special
  EXPECT_EQ(a.merges.size(), 43u);
  // The longer vocabulary starts with the same merges (training is greedy).
  VocabSpec big = BuiltinBpeVocab(4000, "gpt-2", {});
  ASSERT_GE(big.merges.size(), a.merges.size());
  EXPECT_TRUE(std::equal(a.merges.begin(), a.merges.end(), big.merges.begin()));
  ExpectUnique(big);
}

TEST(BuiltinVocabTest, SpmHasControlBytePiecesScoresAndPadding) {
  const auto start = std::chrono::steady_clock::now();
  VocabSpec v = BuiltinSpmVocab(32000);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(secs, 1.0);
  EXPECT_EQ(v.model, "llama");
  ASSERT_EQ(v.size(), 32000u);
  ASSERT_EQ(v.scores.size(), 32000u);
  ASSERT_EQ(v.token_types.size(), 32000u);
  EXPECT_EQ(v.tokens[0], "<unk>");
  EXPECT_EQ(v.token_types[0], T(TokenType::kUnknown));
  EXPECT_EQ(v.tokens[1], "<s>");
  EXPECT_EQ(v.tokens[2], "</s>");
  EXPECT_EQ(v.token_types[1], T(TokenType::kControl));
  EXPECT_EQ(v.tokens[3], "<0x00>");
  EXPECT_EQ(v.tokens[3 + 0x0A], "<0x0A>");  // llama.cpp's newline lookup
  EXPECT_EQ(v.tokens[258], "<0xFF>");
  EXPECT_EQ(v.token_types[258], T(TokenType::kByte));
  EXPECT_EQ(v.bos_id, 1u);
  EXPECT_EQ(v.eos_id, 2u);
  EXPECT_EQ(v.unk_id, 0u);
  EXPECT_EQ(v.add_bos, true);
  EXPECT_TRUE(v.merges.empty());
  // Pieces after the byte tokens have strictly decreasing scores; "▁the" is one of them.
  size_t n_pieces = 0;
  for (size_t i = 259; i < v.size() && v.token_types[i] == T(TokenType::kNormal); ++i, ++n_pieces) {
    if (i > 259) EXPECT_LT(v.scores[i], v.scores[i - 1]);
  }
  EXPECT_GT(n_pieces, 500u);
  EXPECT_TRUE(FindTokenId(v, "\xE2\x96\x81the").has_value());
  EXPECT_TRUE(FindTokenId(v, "\xE2\x96\x81").has_value());  // "▁" alone
  EXPECT_EQ(v.token_types.back(), T(TokenType::kUnused));
  EXPECT_EQ(v.scores.back(), -10000.0f);
  // No piece holds a newline or tab: those always go through the byte tokens.
  for (size_t i = 259; i < 259 + n_pieces; ++i) {
    EXPECT_EQ(v.tokens[i].find_first_of("\n\t"), std::string::npos);
  }
  ExpectUnique(v);
}

TEST(BuiltinVocabTest, SpmSmallSizeDropsRareCharacters) {
  VocabSpec v = BuiltinSpmVocab(300);
  ASSERT_EQ(v.size(), 300u);
  ExpectUnique(v);
  for (size_t i = 259; i < 300; ++i) EXPECT_EQ(v.token_types[i], T(TokenType::kNormal));
}

}  // namespace
}  // namespace mt
