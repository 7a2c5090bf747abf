#include "tokenizer/vocab_spec.h"

#include <gtest/gtest.h>

#include "gguf/gguf.h"

namespace mt {
namespace {

VocabSpec SmallBpe() {
  VocabSpec v;
  v.model = "gpt2";
  v.pre = "qwen2";
  v.tokens = {"a", "b", "ab", "<|endoftext|>"};
  v.token_types = {1, 1, 1, 3};
  v.merges = {"a b"};
  v.bos_id = 3;
  v.eos_id = 3;
  v.pad_id = 3;
  v.add_bos = false;
  v.chat_template = "{{ messages }}";
  return v;
}

TEST(VocabSpecTest, WritesConverterKeysAndTypes) {
  GgufMetadata md;
  WriteVocabToMetadata(SmallBpe(), md);
  EXPECT_EQ(*md.FindString("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(*md.FindString("tokenizer.ggml.pre"), "qwen2");
  ASSERT_NE(md.FindArray("tokenizer.ggml.tokens"), nullptr);
  EXPECT_EQ(md.FindArray("tokenizer.ggml.tokens")->element_type, GgufType::kString);
  EXPECT_EQ(md.FindArray("tokenizer.ggml.token_type")->element_type, GgufType::kInt32);
  EXPECT_EQ(md.FindArray("tokenizer.ggml.merges")->element_type, GgufType::kString);
  EXPECT_EQ(md.Find("tokenizer.ggml.scores"), nullptr);  // BPE has no scores
  EXPECT_EQ(md.Find("tokenizer.ggml.bos_token_id")->type(), GgufType::kUint32);
  EXPECT_EQ(md.Find("tokenizer.ggml.padding_token_id")->type(), GgufType::kUint32);
  EXPECT_EQ(md.Find("tokenizer.ggml.eot_token_id"), nullptr);  // unset: not written
  EXPECT_EQ(md.Find("tokenizer.ggml.add_bos_token")->type(), GgufType::kBool);
  EXPECT_EQ(md.Find("tokenizer.ggml.add_eos_token"), nullptr);
  EXPECT_EQ(*md.FindString("tokenizer.chat_template"), "{{ messages }}");
}

TEST(VocabSpecTest, RoundTripsThroughMetadata) {
  VocabSpec spm;
  spm.model = "llama";
  spm.pre = "default";
  spm.tokens = {"<unk>", "<s>", "</s>", "\xE2\x96\x81hi"};
  spm.scores = {0.0f, 0.0f, 0.0f, -1.5f};
  spm.token_types = {2, 3, 3, 1};
  spm.unk_id = 0;
  spm.bos_id = 1;
  spm.eos_id = 2;
  spm.sep_id = 2;
  spm.eot_id = 2;
  spm.fim_pre_id = 3;  // any ids: the keys are only carried
  spm.fim_suf_id = 2;
  spm.fim_mid_id = 1;
  spm.fim_rep_id = 0;
  spm.fim_sep_id = 3;
  spm.add_bos = true;
  spm.add_eos = false;
  spm.add_space_prefix = true;
  for (const VocabSpec& v : {SmallBpe(), spm}) {
    GgufMetadata md;
    WriteVocabToMetadata(v, md);
    Result<VocabSpec> r = ReadVocabFromMetadata(md);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->model, v.model);
    EXPECT_EQ(r->pre, v.pre);
    EXPECT_EQ(r->tokens, v.tokens);
    EXPECT_EQ(r->scores, v.scores);
    EXPECT_EQ(r->token_types, v.token_types);
    EXPECT_EQ(r->merges, v.merges);
    EXPECT_EQ(r->bos_id, v.bos_id);
    EXPECT_EQ(r->eos_id, v.eos_id);
    EXPECT_EQ(r->eot_id, v.eot_id);
    EXPECT_EQ(r->unk_id, v.unk_id);
    EXPECT_EQ(r->sep_id, v.sep_id);
    EXPECT_EQ(r->pad_id, v.pad_id);
    EXPECT_EQ(r->fim_pre_id, v.fim_pre_id);
    EXPECT_EQ(r->fim_suf_id, v.fim_suf_id);
    EXPECT_EQ(r->fim_mid_id, v.fim_mid_id);
    EXPECT_EQ(r->add_bos, v.add_bos);
    EXPECT_EQ(r->add_eos, v.add_eos);
    EXPECT_EQ(r->add_space_prefix, v.add_space_prefix);
    EXPECT_EQ(r->chat_template, v.chat_template);
  }
}

TEST(VocabSpecTest, SeparatorKeyUsesLlamaCppSpelling) {
  VocabSpec v = SmallBpe();
  v.sep_id = 2;
  GgufMetadata md;
  WriteVocabToMetadata(v, md);
  EXPECT_EQ(md.FindUint("tokenizer.ggml.seperator_token_id"), 2u);
}

TEST(VocabSpecTest, ReadErrorsNameTheKey) {
  GgufMetadata md;
  Result<VocabSpec> r = ReadVocabFromMetadata(md);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tokenizer.ggml.model"), std::string::npos);

  md.Set("tokenizer.ggml.model", GgufValue::String("gpt2"));
  r = ReadVocabFromMetadata(md);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tokenizer.ggml.tokens"), std::string::npos);

  md.Set("tokenizer.ggml.tokens", GgufValue::Int32Array({1, 2}));
  r = ReadVocabFromMetadata(md);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("array of int32"), std::string::npos) << r.status().message();

  md.Set("tokenizer.ggml.tokens", GgufValue::StringArray({"a", "b"}));
  md.Set("tokenizer.ggml.token_type", GgufValue::Int32Array({1}));
  r = ReadVocabFromMetadata(md);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("1 entries for 2 tokens"), std::string::npos);

  md.Set("tokenizer.ggml.token_type", GgufValue::Int32Array({1, 3}));
  md.Set("tokenizer.ggml.bos_token_id", GgufValue::String("x"));
  r = ReadVocabFromMetadata(md);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("bos_token_id"), std::string::npos);
}

TEST(VocabSpecTest, ReadDefaultsAndDropsOutOfRangeIds) {
  GgufMetadata md;
  md.Set("tokenizer.ggml.model", GgufValue::String("gpt2"));
  md.Set("tokenizer.ggml.tokens", GgufValue::StringArray({"a", "b"}));
  md.Set("tokenizer.ggml.eos_token_id", GgufValue::Uint32(7));  // past the vocabulary
  md.Set("tokenizer.ggml.bos_token_id", GgufValue::Int32(1));   // another integer type
  Result<VocabSpec> r = ReadVocabFromMetadata(md);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->token_types, (std::vector<int32_t>{1, 1}));
  EXPECT_FALSE(r->eos_id.has_value());
  EXPECT_EQ(r->bos_id, 1u);
  EXPECT_EQ(FindTokenId(*r, "b"), 1u);
  EXPECT_EQ(FindTokenId(*r, "c"), std::nullopt);
}

}  // namespace
}  // namespace mt
