// MakeSpec without HTTP: a parsed request becomes the job the scheduler runs.
#include "server/generation.h"

#include <gtest/gtest.h>

#include "grammar/grammar.h"
#include "grammar/token_filter.h"
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

// The filter the scheduler builds for `spec`, after the model wrote `text` (nullopt: a token
// of it was refused).
std::optional<grammar::GrammarFilter> After(const GenerationSpec& spec, std::string_view text) {
  static const auto vocab = std::make_shared<const grammar::GrammarVocab>(Tok());
  std::optional<grammar::GrammarFilter> f(std::in_place, spec.grammar, vocab, spec.grammar_start);
  const std::vector<int32_t> ids = Tok().Encode(text, false, true).value();
  for (int32_t id : ids) {
    if (!f->Accept(id)) return std::nullopt;
  }
  return f;
}

// Whether the model may write `text` and end there.
bool Completes(const GenerationSpec& spec, std::string_view text) {
  std::optional<grammar::GrammarFilter> f = After(spec, text);
  return f && f->IsComplete();
}

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
    ASSERT_FALSE(MakeSpec(
        target,
        Parse(chat + R"(, "chat_template_kwargs": {"enable_thinking": false}})", Endpoint::kChat),
        0, 1, &off));
    EXPECT_EQ(Tok().Decode(off.prompt), no_thinking);
    ASSERT_FALSE(MakeSpec(
        target,
        Parse(chat + R"(, "chat_template_kwargs": {"enable_thinking": true}})", Endpoint::kChat), 0,
        1, &on));
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
  EXPECT_TRUE(thinking.grammar_start.in_block);
  EXPECT_TRUE(Completes(thinking, "Hmm, {not json} here.\n</think>\n\n{\"x\": 1}"));
  EXPECT_FALSE(Completes(thinking, "Hmm, cut short"));  // the answer must come
  EXPECT_FALSE(Completes(thinking, "Hmm.</think>\n\nplain words"));
  ASSERT_FALSE(MakeSpec({Tok(), &plain, "", 512}, Parse(body, Endpoint::kChat), 0, 1, &direct));
  EXPECT_FALSE(direct.grammar_start.in_block);
  EXPECT_TRUE(Completes(direct, "{\"x\": 1}"));
  EXPECT_FALSE(Completes(direct, "Hmm.</think>{\"x\": 1}"));
}

// A hybrid model asked to think may write its <think> block before the formatted answer.
TEST(MakeSpec, AFormatAfterAnOptionalThinkBlock) {
  const ChatTemplate qwen3(ChatTemplate::Kind::kChatml, "", "name",
                           ChatThinking{.history = true, .switchable = true});
  const std::string body = R"({"model": "m", "messages": [{"role": "user", "content": "Hi"}],
      "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object",
      "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}})";
  GenerationSpec thinking, direct;
  ASSERT_FALSE(MakeSpec({Tok(), &qwen3, "", 512}, Parse(body, Endpoint::kChat), 0, 1, &thinking));
  EXPECT_EQ(thinking.grammar_start.trigger, "");
  EXPECT_TRUE(Completes(thinking, "<think>\nLet me see: </b> {\"a\"?\n</think>\n\n{\"a\": 1}"));
  EXPECT_TRUE(Completes(thinking, "{\"a\": 1}"));
  EXPECT_FALSE(Completes(thinking, "<think>\nno end {\"a\": 1}"));
  EXPECT_FALSE(Completes(thinking, "<think></think>{\"b\": 1}"));
  EXPECT_FALSE(Completes(thinking, "Sure: {\"a\": 1}"));
  // enable_thinking false: the prompt closed the block; the format holds from the start.
  const std::string off =
      body.substr(0, body.size() - 1) + R"(, "chat_template_kwargs": {"enable_thinking": false}})";
  ASSERT_FALSE(MakeSpec({Tok(), &qwen3, "", 512}, Parse(off, Endpoint::kChat), 0, 1, &direct));
  EXPECT_TRUE(Completes(direct, "{\"a\": 1}"));
  EXPECT_FALSE(Completes(direct, "<think></think>{\"a\": 1}"));
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
  ASSERT_FALSE(MakeSpec(target,
                        Parse(chat + kTools + R"(, "tool_choice": "none"})", Endpoint::kChat), 0,
                        99, &offered));
  EXPECT_EQ(offered.prompt, plain.prompt);  // none: the tools stay out of the prompt
  EXPECT_EQ(offered.sampling.seed, 99u);    // no seed in the request: the fresh one
  ASSERT_FALSE(MakeSpec(target,
                        Parse(chat + kTools + R"(, "tool_choice": "required"})", Endpoint::kChat),
                        0, 99, &required));
  EXPECT_NE(Tok().Decode(required.prompt).find("<tools>\n{\"type\": \"function\""),
            std::string::npos);
  ASSERT_NE(required.grammar, nullptr);
  EXPECT_TRUE(required.grammar_start.trigger.empty());  // calls from the first token
  grammar::Matcher m(required.grammar);
  EXPECT_TRUE(m.Accept("<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>") &&
              m.IsComplete());
  ASSERT_FALSE(MakeSpec(target, Parse(chat + kTools + "}", Endpoint::kChat), 0, 99, &automatic));
  ASSERT_NE(automatic.grammar, nullptr);
  EXPECT_EQ(automatic.grammar_start.trigger, "<tool_call>");  // auto: lazy, from the model's call
}

TEST(MakeSpec, RefusesWhatTheModelCannotDo) {
  const ChatTemplate tulu(ChatTemplate::Kind::kTulu, "</s>", "name");
  const std::string chat = R"({"model": "m", "messages": [{"role": "user", "content": "Hi"}], )";
  GenerationSpec spec;
  std::optional<ApiError> e =
      MakeSpec({Tok(), &tulu, "", 512}, Parse(chat + kTools + "}", Endpoint::kChat), 0, 1, &spec);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->param, "tools");
  EXPECT_NE(e->message.find("tulu"), std::string::npos);
  e = MakeSpec({Tok(), nullptr, "no template here", 512},
               Parse(chat + R"("n": 1})", Endpoint::kChat), 0, 1, &spec);
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

// The events' JSON objects, in order ("data: {...}\n\n" each).
std::vector<nlohmann::json> Events(const std::string& sse) {
  std::vector<nlohmann::json> out;
  for (size_t at = 0; (at = sse.find("data: ", at)) != std::string::npos;) {
    const size_t end = sse.find("\n\n", at);
    out.push_back(nlohmann::json::parse(sse.substr(at + 6, end - at - 6)));
    at = end;
  }
  return out;
}

// A streamed choice, cut in pieces of every size, adds up to the whole response's choice:
// reasoning apart, content, the calls held back to the end, finish_reason "tool_calls".
TEST(ChoiceStream, AddsUpToTheWholeChoiceAtEveryCut) {
  const std::string text =
      "<think>\nLet me call.\n</think>\n\nSure.<tool_call>\n{\"name\": \"now\", \"arguments\": "
      "{}}\n</tool_call>";
  const ChoiceOptions options{Endpoint::kChat, /*split_reasoning=*/true, false, /*tools=*/true,
                              false};
  int ids = 0;
  auto next_id = [&] { return "call_" + std::to_string(ids++); };
  const Choice whole = WholeChoice(Tok(), options, "", text, {}, FinishReason::kStop, next_id);
  EXPECT_EQ(whole.reasoning, "Let me call.");
  EXPECT_EQ(whole.text, "Sure.");
  ASSERT_EQ(whole.tool_calls.size(), 1u);
  EXPECT_EQ(whole.finish_reason, "tool_calls");
  const ResponseMeta meta{"chatcmpl-1", 0, "m"};
  for (size_t piece = 1; piece <= text.size(); ++piece) {
    ChoiceStream stream(Tok(), options, meta, 0, "", next_id);
    std::string sse = stream.Opening();
    for (size_t at = 0; at < text.size(); at += piece) {
      JobUpdate u;
      u.text = text.substr(at, piece);
      ASSERT_FALSE(stream.Take(u, &sse));
    }
    JobUpdate end;
    end.finished = true;
    end.reason = FinishReason::kStop;
    end.completion_tokens = 9;
    ASSERT_FALSE(stream.Take(end, &sse));
    EXPECT_TRUE(stream.finished());
    EXPECT_EQ(stream.completion_tokens(), 9);
    std::string reasoning, content, finish;
    std::vector<std::string> calls;
    for (const nlohmann::json& e : Events(sse)) {
      const nlohmann::json& c = e["choices"][0];
      const nlohmann::json& d = c["delta"];
      if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
      if (d.contains("content") && d["content"].is_string()) content += d["content"];
      if (d.contains("tool_calls")) calls.push_back(d["tool_calls"][0]["function"]["name"]);
      if (c["finish_reason"].is_string()) finish = c["finish_reason"];
    }
    EXPECT_EQ(reasoning, *whole.reasoning) << "piece " << piece;
    EXPECT_EQ(content, whole.text) << "piece " << piece;
    EXPECT_EQ(calls, std::vector<std::string>{"now"}) << "piece " << piece;
    EXPECT_EQ(finish, whole.finish_reason) << "piece " << piece;
  }
}

// What a streamed choice sent, added up: reasoning, content, the calls and the finish reason.
struct Streamed {
  std::string reasoning, content, finish;
  std::vector<std::pair<std::string, std::string>> calls;  // (name, arguments)
};
Streamed Stream(const ChoiceOptions& options, std::string_view text, size_t piece) {
  const ResponseMeta meta{"chatcmpl-1", 0, "m"};
  ChoiceStream stream(Tok(), options, meta, 0, "", [] { return std::string("call_x"); });
  std::string sse = stream.Opening();
  for (size_t at = 0; at < text.size(); at += piece) {
    JobUpdate u;
    u.text = std::string(text.substr(at, piece));
    EXPECT_FALSE(stream.Take(u, &sse));
  }
  JobUpdate end;
  end.finished = true;
  end.reason = FinishReason::kStop;
  EXPECT_FALSE(stream.Take(end, &sse));
  Streamed out;
  for (const nlohmann::json& e : Events(sse)) {
    const nlohmann::json& c = e["choices"][0];
    const nlohmann::json& d = c["delta"];
    if (d.contains("reasoning_content")) out.reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("content") && d["content"].is_string()) out.content += d["content"];
    if (d.contains("tool_calls")) {
      for (const nlohmann::json& call : d["tool_calls"]) {
        out.calls.emplace_back(call["function"]["name"], call["function"]["arguments"]);
      }
    }
    if (c["finish_reason"].is_string()) out.finish = c["finish_reason"];
  }
  return out;
}

// gpt-oss's output: the analysis channel is the reasoning, the call on the commentary channel
// a tool call, whole or streamed in pieces of every size.
TEST(ChoiceStream, HarmonyAddsUpToTheWholeChoiceAtEveryCut) {
  const std::string text =
      "<|channel|>analysis<|message|>Let me call.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.now <|constrain|>json<|message|>{\"tz\": \"UTC\"}";
  ChoiceOptions options{Endpoint::kChat, /*split_reasoning=*/true,    false, /*tools=*/true,
                        false,           ChatTemplate::Kind::kHarmony};
  const Choice whole =
      WholeChoice(Tok(), options, "", text, {}, FinishReason::kStop, [] { return "call_x"; });
  EXPECT_EQ(whole.reasoning, "Let me call.");
  EXPECT_EQ(whole.text, "");
  ASSERT_EQ(whole.tool_calls.size(), 1u);
  EXPECT_EQ(whole.tool_calls[0].name, "now");
  EXPECT_EQ(whole.tool_calls[0].arguments, R"({"tz":"UTC"})");
  EXPECT_EQ(whole.finish_reason, "tool_calls");
  for (size_t piece = 1; piece <= text.size(); ++piece) {
    const Streamed s = Stream(options, text, piece);
    EXPECT_EQ(s.reasoning, *whole.reasoning) << "piece " << piece;
    EXPECT_EQ(s.content, "") << "piece " << piece;
    ASSERT_EQ(s.calls.size(), 1u) << "piece " << piece;
    EXPECT_EQ(s.calls[0].second, R"({"tz":"UTC"})");
    EXPECT_EQ(s.finish, "tool_calls");
  }
  // An answer; without tools offered, no calls; with --reasoning-format none the analysis
  // stays in the content.
  const std::string answer =
      "<|channel|>analysis<|message|>Hm.<|end|><|start|>assistant<|channel|>final<|message|>Hi";
  options.tools = false;
  Choice c = WholeChoice(Tok(), options, "", answer, {}, FinishReason::kStop, [] { return ""; });
  EXPECT_EQ(c.reasoning, "Hm.");
  EXPECT_EQ(c.text, "Hi");
  EXPECT_EQ(c.finish_reason, "stop");
  EXPECT_EQ(Stream(options, answer, 3).content, "Hi");
  options.split_reasoning = false;
  c = WholeChoice(Tok(), options, "", answer, {}, FinishReason::kStop, [] { return ""; });
  EXPECT_FALSE(c.reasoning.has_value());
  EXPECT_EQ(c.text, "<|channel|>analysis<|message|>Hm.<|end|>Hi");
}

// GLM-4.5's output: a <think> block, then content and its call blocks.
TEST(ChoiceStream, Glm45AddsUpToTheWholeChoiceAtEveryCut) {
  const std::string text =
      "<think>Need the time.</think>\nSure.\n<tool_call>now\n<arg_key>tz</arg_key>\n"
      "<arg_value>UTC</arg_value>\n</tool_call>";
  const ChoiceOptions options{Endpoint::kChat, /*split_reasoning=*/true,  false, /*tools=*/true,
                              false,           ChatTemplate::Kind::kGlm45};
  const Choice whole =
      WholeChoice(Tok(), options, "", text, {}, FinishReason::kStop, [] { return "call_x"; });
  EXPECT_EQ(whole.reasoning, "Need the time.");
  EXPECT_EQ(whole.text, "Sure.\n");
  ASSERT_EQ(whole.tool_calls.size(), 1u);
  EXPECT_EQ(whole.tool_calls[0].arguments, R"({"tz":"UTC"})");
  EXPECT_EQ(whole.finish_reason, "tool_calls");
  for (size_t piece = 1; piece <= text.size(); ++piece) {
    const Streamed s = Stream(options, text, piece);
    EXPECT_EQ(s.reasoning, *whole.reasoning) << "piece " << piece;
    EXPECT_EQ(s.content, whole.text) << "piece " << piece;
    ASSERT_EQ(s.calls.size(), 1u) << "piece " << piece;
    EXPECT_EQ(s.calls[0].first, "now");
    EXPECT_EQ(s.calls[0].second, R"({"tz":"UTC"})");
    EXPECT_EQ(s.finish, "tool_calls");
  }
}

// Tools with harmony and GLM-4.5: auto (read back, unconstrained) or none; required and
// named calls are refused, as is a JSON answer for harmony.
TEST(MakeSpec, HarmonyAndGlmTakeAutoToolsOnly) {
  ChatTemplate harmony(ChatTemplate::Kind::kHarmony, "", "name");
  harmony.set_date("2026-01-02");
  const ChatTemplate glm(ChatTemplate::Kind::kGlm45, "", "name");
  const std::string head = R"({"model": "m", "messages": [{"role": "user", "content": "Hi"}], )";
  for (const ChatTemplate* t : std::initializer_list<const ChatTemplate*>{&harmony, &glm}) {
    const GenerationTarget target{Tok(), t, "", 4096};
    GenerationSpec spec;
    EXPECT_FALSE(MakeSpec(target, Parse(head + kTools + "}", Endpoint::kChat), 0, 1, &spec));
    EXPECT_EQ(spec.grammar, nullptr);
    std::optional<ApiError> e =
        MakeSpec(target, Parse(head + kTools + R"(, "tool_choice": "required"})", Endpoint::kChat),
                 0, 1, &spec);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->param, "tool_choice");
  }
  const GenerationTarget target{Tok(), &harmony, "", 4096, true, "high"};
  GenerationSpec spec;
  std::optional<ApiError> e = MakeSpec(
      target, Parse(head + R"("response_format": {"type": "json_object"}})", Endpoint::kChat), 0, 1,
      &spec);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->param, "response_format");
  // reasoning_effort: the request's (chat_template_kwargs, then the top-level field), else
  // the server's.
  auto effort = [&](const std::string& fields) {
    const Result<ChatPrompt> p =
        RenderChat(harmony, Parse(head + fields + "}", Endpoint::kChat), true, "high");
    const size_t at = p.value().text.find("Reasoning: ");
    return p.value().text.substr(at + 11, p.value().text.find('\n', at) - at - 11);
  };
  EXPECT_EQ(effort(R"("seed": 1)"), "high");
  EXPECT_EQ(effort(R"("reasoning_effort": "low")"), "low");
  EXPECT_EQ(effort(R"("reasoning_effort": "low", "chat_template_kwargs": {"reasoning_effort":
                   "medium"})"),
            "medium");
  ApiRequest r;
  EXPECT_TRUE(ParseRequest(head + R"("reasoning_effort": "max"})", Endpoint::kChat, "m", &r));
}

// A job that failed ends its choice with the error and no finish chunk.
TEST(ChoiceStream, AFailedJobReturnsItsError) {
  const ResponseMeta meta{"cmpl-1", 0, "m"};
  ChoiceStream stream(Tok(), ChoiceOptions{}, meta, 0, "", [] { return std::string("x"); });
  JobUpdate u;
  u.text = "partial";
  u.finished = true;
  u.reason = FinishReason::kError;
  u.error = IoError("model.gguf: layer 3 expert 7: read failed");
  std::string sse;
  const std::optional<ApiError> e = stream.Take(u, &sse);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->http_status, 500);
  EXPECT_EQ(e->message, "model.gguf: layer 3 expert 7: read failed");
  const std::vector<nlohmann::json> events = Events(sse);
  ASSERT_EQ(events.size(), 1u);  // the text that came before, and no finish
  EXPECT_EQ(events[0]["choices"][0]["text"], "partial");
  EXPECT_TRUE(events[0]["choices"][0]["finish_reason"].is_null());
}

// A thinking model calling tools reasons first: "required" calls may follow a think block,
// and an auto call's trigger does not fire on "<tool_call>" written inside the reasoning.
TEST(MakeSpec, ToolCallsAfterTheReasoning) {
  const ChatTemplate qwen3(ChatTemplate::Kind::kChatml, "", "name",
                           ChatThinking{.history = true, .switchable = true});
  const ChatTemplate thinker(ChatTemplate::Kind::kChatml, "", "name",
                             ChatThinking{.history = true, .forced_open = true});
  const std::string chat = R"({"model": "m", "messages": [{"role": "user", "content": "Hi"}], )";
  const std::string call = "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
  GenerationSpec required, required_off, forced;
  ASSERT_FALSE(MakeSpec({Tok(), &qwen3, "", 512},
                        Parse(chat + kTools + R"(, "tool_choice": "required"})", Endpoint::kChat),
                        0, 1, &required));
  EXPECT_TRUE(required.grammar_start.trigger.empty());
  EXPECT_TRUE(Completes(required, "<think>\nThe time: <tool_call> now.\n</think>\n\n" + call));
  EXPECT_TRUE(Completes(required, call));
  EXPECT_FALSE(Completes(required, "<think>\nno call\n</think>\n\nIt is noon."));
  EXPECT_FALSE(Completes(required, "<think>\nno call\n</think>\n\n"));
  ASSERT_FALSE(MakeSpec({Tok(), &qwen3, "", 512},
                        Parse(chat + kTools + R"(, "tool_choice": "required",
                              "chat_template_kwargs": {"enable_thinking": false}})",
                              Endpoint::kChat),
                        0, 1, &required_off));
  EXPECT_FALSE(Completes(required_off, "<think>\n</think>\n\n" + call));
  EXPECT_TRUE(Completes(required_off, call));
  ASSERT_FALSE(MakeSpec({Tok(), &thinker, "", 512},
                        Parse(chat + kTools + R"(, "tool_choice": "required"})", Endpoint::kChat),
                        0, 1, &forced));
  EXPECT_TRUE(forced.grammar_start.in_block);  // inside the block already
  EXPECT_TRUE(Completes(forced, "Call it.\n</think>\n\n" + call));
  EXPECT_FALSE(Completes(forced, "Call it.\n</think>\n\nNo."));

  // Auto: free text, calls after "<tool_call>" outside the reasoning.
  GenerationSpec automatic, automatic_forced;
  ASSERT_FALSE(MakeSpec({Tok(), &qwen3, "", 512}, Parse(chat + kTools + "}", Endpoint::kChat), 0, 1,
                        &automatic));
  EXPECT_FALSE(After(automatic, "<think>\nI could write <tool_call> now")->active());
  EXPECT_TRUE(After(automatic, "<think>\nmaybe <tool_call>\n</think>\n\n<tool_call>")->active());
  EXPECT_TRUE(After(automatic, "<tool_call>")->active());  // no reasoning
  EXPECT_TRUE(Completes(automatic, "<think>\nno call needed\n</think>\n\nIt is noon."));
  ASSERT_FALSE(MakeSpec({Tok(), &thinker, "", 512}, Parse(chat + kTools + "}", Endpoint::kChat), 0,
                        1, &automatic_forced));
  EXPECT_FALSE(After(automatic_forced, "a <tool_call> b")->active());
  EXPECT_TRUE(After(automatic_forced, "a\n</think>\n\n<tool_call>")->active());
}

// OpenAI's suffix: the prompt becomes <prefix token> prompt <suffix token> suffix <middle
// token>; a model without FIM tokens refuses it, naming the field.
TEST(MakeSpec, SuffixFillsInTheMiddle) {
  static const Tokenizer coder = [] {
    VocabSpec spec =
        BuiltinBpeVocab(1000, "qwen2", {"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"});
    return std::move(Tokenizer::Create(std::move(spec))).value();
  }();
  const Tokenizer::Fim fim = coder.fim().value();
  GenerationSpec spec;
  const ApiRequest r = Parse(R"({"model": "m", "prompt": "def f(", "suffix": "\n  return x"})",
                             Endpoint::kCompletions);
  ASSERT_FALSE(MakeSpec({coder, nullptr, "", 512}, r, 0, 1, &spec));
  const std::vector<int32_t> prefix = coder.Encode("def f(", false, true).value();
  const std::vector<int32_t> suffix = coder.Encode("\n  return x", false, true).value();
  std::vector<int32_t> want = {fim.prefix};
  want.insert(want.end(), prefix.begin(), prefix.end());
  want.push_back(fim.suffix);
  want.insert(want.end(), suffix.begin(), suffix.end());
  want.push_back(fim.middle);
  EXPECT_EQ(spec.prompt, want);
  // Token prompts are the prefix as given.
  GenerationSpec tokens;
  ASSERT_FALSE(MakeSpec(
      {coder, nullptr, "", 512},
      Parse(R"({"model": "m", "prompt": [100, 101], "suffix": ""})", Endpoint::kCompletions), 0, 1,
      &tokens));
  EXPECT_EQ(tokens.prompt, (std::vector<int32_t>{fim.prefix, 100, 101, fim.suffix, fim.middle}));
  GenerationSpec plain;
  const std::optional<ApiError> e = MakeSpec({Tok(), nullptr, "", 512}, r, 0, 1, &plain);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->param, "suffix");
  EXPECT_EQ(e->http_status, 400);
}

// /infill's prompt as llama-server builds it: the extra files after the repo name (each after
// a file separator and its name), the current file's separator, then <prefix> prefix prompt
// <suffix> suffix <middle>; inputs' special-token text is plain text; the prefix keeps its
// end and the suffix its start within the batch; without separators the files go after a
// snippet line; without FIM tokens a 501.
TEST(InfillPrompt, RepoLevelFillInTheMiddle) {
  auto make = [](std::vector<std::string> specials) {
    VocabSpec spec = BuiltinBpeVocab(1000, "qwen2", std::move(specials));
    return std::move(Tokenizer::Create(std::move(spec))).value();
  };
  static const Tokenizer coder = make({"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>",
                                       "<|repo_name|>", "<|file_sep|>", "<|im_end|>"});
  const Tokenizer::Fim fim = coder.fim().value();
  auto enc = [&](const Tokenizer& t, const std::string& text) {
    return t.Encode(text, false, /*parse_special=*/false).value();
  };
  auto cat = [](std::vector<int32_t>& to, const std::vector<int32_t>& ids) {
    to.insert(to.end(), ids.begin(), ids.end());
  };
  InfillRequest r;
  ASSERT_FALSE(ParseInfillRequest(R"({"input_prefix": "def f(x):\n    ",
      "input_suffix": "\n<|im_end|>", "prompt": "ret",
      "input_extra": [{"filename": "a.py", "text": "A = 1\n"}, {"text": "B"}]})",
                                  "m", &r));
  std::vector<int32_t> got;
  ASSERT_FALSE(InfillPrompt(coder, r, 4096, &got));
  std::vector<int32_t> want = {*fim.repo};
  cat(want, enc(coder, "myproject\n"));
  want.push_back(*fim.file_sep);
  cat(want, enc(coder, "a.py\n"));
  cat(want, enc(coder, "A = 1\n"));
  want.push_back(*fim.file_sep);
  cat(want, enc(coder, "tmp\n"));  // a chunk without a filename
  cat(want, enc(coder, "B"));
  want.push_back(*fim.file_sep);
  cat(want, enc(coder, "filename\n"));
  want.push_back(fim.prefix);
  cat(want, enc(coder, "def f(x):\n    "));
  cat(want, enc(coder, "ret"));
  want.push_back(fim.suffix);
  const std::vector<int32_t> suffix = enc(coder, "\n<|im_end|>");
  const int32_t im_end = coder.Encode("<|im_end|>", false, true).value().at(0);
  EXPECT_EQ(std::count(suffix.begin(), suffix.end(), im_end), 0);  // plain text, not the token
  cat(want, suffix);
  want.push_back(fim.middle);
  EXPECT_EQ(got, want);

  // A context of 64: batch 32, so the prefix keeps its last 24 tokens, the suffix its first
  // 8 - 2 - |prompt|, and the files their last 32 tokens.
  std::string long_prefix, long_suffix;
  for (int i = 0; i < 100; ++i) long_prefix += " p" + std::to_string(i);
  for (int i = 0; i < 100; ++i) long_suffix += " s" + std::to_string(i);
  InfillRequest cut = r;
  cut.prefix = long_prefix;
  cut.suffix = long_suffix;
  cut.extra.assign(8, InfillChunk{"f.py", long_prefix});
  ASSERT_FALSE(InfillPrompt(coder, cut, 64, &got));
  const std::vector<int32_t> p = enc(coder, long_prefix), sfx = enc(coder, long_suffix);
  const std::vector<int32_t> prompt = enc(coder, "ret");
  std::vector<int32_t> files = enc(coder, long_prefix);  // the last file's text, and after it:
  files.push_back(*fim.file_sep);
  cat(files, enc(coder, "filename\n"));
  want.assign(files.end() - 32, files.end());
  want.push_back(fim.prefix);
  want.insert(want.end(), p.end() - 24, p.end());
  cat(want, prompt);
  want.push_back(fim.suffix);
  want.insert(want.end(), sfx.begin(), sfx.begin() + (8 - 2 - prompt.size()));
  want.push_back(fim.middle);
  EXPECT_EQ(got, want);

  // Without repo and file-separator tokens the files follow a snippet line each.
  static const Tokenizer plain_coder = make({"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"});
  ASSERT_FALSE(InfillPrompt(plain_coder, r, 4096, &got));
  const std::vector<int32_t> snippet = enc(plain_coder, "\n\n--- snippet ---\n\n");
  want = snippet;
  cat(want, enc(plain_coder, "A = 1\n"));
  cat(want, snippet);
  cat(want, enc(plain_coder, "B"));
  EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin()));
  EXPECT_EQ(got[want.size()], plain_coder.fim()->prefix);

  const std::optional<ApiError> e = InfillPrompt(Tok(), r, 4096, &got);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->http_status, 501);
  EXPECT_NE(e->message.find("Infill is not supported"), std::string::npos);
}

}  // namespace
}  // namespace mt::server
