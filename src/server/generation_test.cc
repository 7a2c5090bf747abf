// MakeSpec without HTTP: a parsed request becomes the job the scheduler runs.
#include "server/generation.h"

#include <gtest/gtest.h>

#include "grammar/grammar.h"
#include "tokenizer/vocab_spec.h"

namespace mt::server {
namespace {

const Tokenizer& Tok() {
  static const Tokenizer tok = [] {
    VocabSpec spec = BuiltinBpeVocab(1000, "qwen2", {"<|im_start|>", "<|im_end|>"});
    return std::move(Tokenizer::Create(std::move(spec))).value();
  }();
  return tok;
}

ApiRequest Parse(const std::string& body, Endpoint endpoint) {
  ApiRequest r;
  std::optional<ApiError> e = ParseRequest(body, endpoint, "m", &r);
  EXPECT_FALSE(e.has_value()) << (e ? e->message : "");
  return r;
}

const std::string kTools = R"("tools": [{"type": "function", "function": {"name": "now",
    "parameters": {"type": "object", "properties": {}, "additionalProperties": false}}}])";

// enable_thinking: the request's, else the server's default; a Qwen3 hybrid template then
// ends the prompt with an empty think block.
TEST(MakeSpec, EnableThinkingFromTheRequestOrTheServer) {
  const ChatTemplate qwen3(ChatTemplate::Kind::kChatml, "", "name",
                           ChatThinking{.history = true, .switchable = true});
  const std::string chat = R"({"model": "m", "messages": [{"role": "user", "content": "Hi"}])";
  const std::string prompt = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
  const std::string no_thinking = prompt + "<think>\n\n</think>\n\n";
  for (bool server_default : {true, false}) {
    const GenerationTarget target{Tok(), &qwen3, "", 512, server_default};
    GenerationSpec unset, off, on;
    ASSERT_FALSE(MakeSpec(target, Parse(chat + "}", Endpoint::kChat), 0, 1, &unset));
    EXPECT_EQ(Tok().Decode(unset.prompt), server_default ? prompt : no_thinking);
    ASSERT_FALSE(MakeSpec(target,
                          Parse(chat + R"(, "chat_template_kwargs": {"enable_thinking": false}})",
                                Endpoint::kChat),
                          0, 1, &off));
    EXPECT_EQ(Tok().Decode(off.prompt), no_thinking);
    ASSERT_FALSE(MakeSpec(target,
                          Parse(chat + R"(, "chat_template_kwargs": {"enable_thinking": true}})",
                                Endpoint::kChat),
                          0, 1, &on));
    EXPECT_EQ(Tok().Decode(on.prompt), prompt);
  }
}

// A template that opens <think> itself: the answer's grammar waits for the reasoning's end.
TEST(MakeSpec, GrammarAfterForcedReasoning) {
  const ChatTemplate thinker(ChatTemplate::Kind::kChatml, "", "name",
                             ChatThinking{.history = true, .forced_open = true});
  const ChatTemplate plain(ChatTemplate::Kind::kChatml, "", "name");
  const std::string body = R"({"model": "m", "messages": [{"role": "user", "content": "Hi"}],
      "response_format": {"type": "json_object"}})";
  GenerationSpec thinking, direct;
  ASSERT_FALSE(MakeSpec({Tok(), &thinker, "", 512}, Parse(body, Endpoint::kChat), 0, 1, &thinking));
  EXPECT_NE(thinking.grammar, nullptr);
  EXPECT_EQ(thinking.grammar_trigger, "</think>");
  ASSERT_FALSE(MakeSpec({Tok(), &plain, "", 512}, Parse(body, Endpoint::kChat), 0, 1, &direct));
  EXPECT_EQ(direct.grammar_trigger, "");
}

TEST(MakeSpec, ChatRendersTheTemplateAndTheTools) {
  const ChatTemplate chatml(ChatTemplate::Kind::kChatml, "", "name");
  const GenerationTarget target{Tok(), &chatml, "", 512};
  GenerationSpec plain, offered, required, automatic;
  const std::string chat = R"({"model": "m", "messages": [{"role": "user", "content": "Hi"}], )";
  ASSERT_FALSE(MakeSpec(target, Parse(chat + R"("seed": 5})", Endpoint::kChat), 0, 99, &plain));
  EXPECT_EQ(Tok().Decode(plain.prompt), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(plain.sampling.seed, 5u);
  EXPECT_EQ(plain.max_tokens, -1);  // chat: until the context is full
  EXPECT_EQ(plain.grammar, nullptr);
  ASSERT_FALSE(MakeSpec(target, Parse(chat + kTools + R"(, "tool_choice": "none"})",
                                      Endpoint::kChat),
                        0, 99, &offered));
  EXPECT_EQ(offered.prompt, plain.prompt);  // none: the tools stay out of the prompt
  EXPECT_EQ(offered.sampling.seed, 99u);    // no seed in the request: the fresh one
  ASSERT_FALSE(MakeSpec(target, Parse(chat + kTools + R"(, "tool_choice": "required"})",
                                      Endpoint::kChat),
                        0, 99, &required));
  EXPECT_NE(Tok().Decode(required.prompt).find("<tools>\n{\"type\": \"function\""),
            std::string::npos);
  ASSERT_NE(required.grammar, nullptr);
  EXPECT_TRUE(required.grammar_trigger.empty());  // calls from the first token
  grammar::Matcher m(required.grammar);
  EXPECT_TRUE(m.Accept("<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>") &&
              m.IsComplete());
  ASSERT_FALSE(MakeSpec(target, Parse(chat + kTools + "}", Endpoint::kChat), 0, 99, &automatic));
  ASSERT_NE(automatic.grammar, nullptr);
  EXPECT_EQ(automatic.grammar_trigger, "<tool_call>");  // auto: lazy, from the model's call
}

TEST(MakeSpec, RefusesWhatTheModelCannotDo) {
  const ChatTemplate tulu(ChatTemplate::Kind::kTulu, "</s>", "name");
  const std::string chat = R"({"model": "m", "messages": [{"role": "user", "content": "Hi"}], )";
  GenerationSpec spec;
  std::optional<ApiError> e = MakeSpec({Tok(), &tulu, "", 512},
                                       Parse(chat + kTools + "}", Endpoint::kChat), 0, 1, &spec);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->param, "tools");
  EXPECT_NE(e->message.find("tulu"), std::string::npos);
  e = MakeSpec({Tok(), nullptr, "no template here", 512}, Parse(chat + R"("n": 1})", Endpoint::kChat), 0,
               1, &spec);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code, "chat_template_unavailable");
  EXPECT_EQ(e->message, "no template here");
  e = MakeSpec({Tok(), nullptr, "", 8},
               Parse(R"({"model": "m", "prompt": "a much longer prompt than eight tokens"})",
                     Endpoint::kCompletions),
               0, 1, &spec);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code, "context_length_exceeded");
  e = MakeSpec({Tok(), nullptr, "", 512},
               Parse(R"({"model": "m", "prompt": [1, 2, 5000]})", Endpoint::kCompletions), 0, 1,
               &spec);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "prompt[2]: token id 5000 is outside the vocabulary (0..999)");
}

}  // namespace
}  // namespace mt::server
