// The request parser accepts what OpenAI clients send and refuses everything else with a 400
// whose error object names the field; the response builders produce the documented shapes.
#include "server/api.h"

#include <gtest/gtest.h>

#include "base/json_depth.h"

namespace mt::server {
namespace {

using json = nlohmann::json;

constexpr std::string_view kModel = "olmoe";

std::optional<ApiError> Parse(const std::string& body, Endpoint e, ApiRequest* out) {
  return ParseRequest(body, e, kModel, out);
}

// The error for `body`, which must be refused.
ApiError Refused(const std::string& body, Endpoint e = Endpoint::kCompletions) {
  ApiRequest r;
  std::optional<ApiError> err = Parse(body, e, &r);
  EXPECT_TRUE(err.has_value()) << body;
  return err.value_or(ApiError{});
}

ApiRequest Accepted(const std::string& body, Endpoint e = Endpoint::kCompletions) {
  ApiRequest r;
  std::optional<ApiError> err = Parse(body, e, &r);
  EXPECT_FALSE(err.has_value()) << body << ": " << (err ? err->message : "");
  return r;
}

TEST(ApiTest, CompletionWithEveryOption) {
  ApiRequest r = Accepted(R"({"model": "olmoe", "prompt": "Hello", "max_tokens": 7,
      "temperature": 0.5, "top_p": 0.9, "top_k": 12, "min_p": 0.1, "repeat_penalty": 1.1,
      "stop": ["\n", "END"], "seed": 42, "stream": true,
      "stream_options": {"include_usage": true}, "ignore_eos": true, "user": "u",
      "n": 1, "logprobs": null, "echo": false, "presence_penalty": 0.5, "frequency_penalty": -1.5,
      "unknown_field": [1]})");
  EXPECT_EQ(r.endpoint, Endpoint::kCompletions);
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].text, "Hello");
  EXPECT_FALSE(r.prompts[0].is_tokens);
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 12);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.1f);
  EXPECT_FLOAT_EQ(r.sampling.repeat_penalty, 1.1f);
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, -1.5f);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.ignore_eos);
  // top_k 0 or less turns it off (vLLM's clients send -1).
  EXPECT_EQ(Accepted(R"({"model": "olmoe", "prompt": "x", "top_k": -1})").sampling.top_k, 0);
}

TEST(ApiTest, Defaults) {
  ApiRequest r = Accepted(R"({"model": "olmoe", "prompt": "x"})");
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.8f);
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, 0.0f);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, 0.0f);
  EXPECT_FALSE(r.sampling.seed.has_value());
  EXPECT_TRUE(r.stop.empty());
  EXPECT_FALSE(r.stream);
  // null means absent
  r = Accepted(R"({"model": "olmoe", "prompt": "x", "max_tokens": null, "stop": null,
                   "seed": null, "temperature": null})");
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.8f);
}

TEST(ApiTest, PromptForms) {
  auto prompts = [](const std::string& prompt_json) {
    return Accepted(R"({"model": "olmoe", "prompt": )" + prompt_json + "}").prompts;
  };
  std::vector<ApiPrompt> p = prompts(R"(["one"])");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].text, "one");
  p = prompts("[1, 2, 50000]");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(p[0].is_tokens);
  EXPECT_EQ(p[0].tokens, (std::vector<int64_t>{1, 2, 50000}));
  EXPECT_EQ(prompts("[[7, 8]]").at(0).tokens, (std::vector<int64_t>{7, 8}));
  EXPECT_EQ(prompts("[3.0]").at(0).tokens, (std::vector<int64_t>{3}));
  // A batch: a choice per prompt, in order; strings and token arrays may mix.
  p = prompts(R"(["a", [4, 5], "b"])");
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].text, "a");
  EXPECT_EQ(p[1].tokens, (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(p[2].text, "b");
  std::string many = "[";
  for (int i = 0; i < 65; ++i) many += std::string(i ? "," : "") + "\"x\"";
  EXPECT_EQ(Refused(R"({"model": "olmoe", "prompt": )" + many + "]}").param, "prompt");
  EXPECT_TRUE(Accepted(R"({"model": "olmoe", "prompt": ["a", "b"], "stream": true})").stream);
  EXPECT_EQ(Refused(R"({"model": "olmoe", "prompt": ["a", 5]})").param, "prompt");
  EXPECT_EQ(Refused(R"({"model": "olmoe", "prompt": [[1], []]})").param, "prompt");
  EXPECT_EQ(Refused(R"({"model": "olmoe", "prompt": []})").param, "prompt");
  EXPECT_EQ(Refused(R"({"model": "olmoe", "prompt": [[]]})").param, "prompt");
  EXPECT_EQ(Refused(R"({"model": "olmoe", "prompt": [-1]})").param, "prompt");
  EXPECT_EQ(Refused(R"({"model": "olmoe", "prompt": [1.5]})").param, "prompt");
  EXPECT_EQ(Refused(R"({"model": "olmoe", "prompt": [1, "a"]})").param, "prompt");
  EXPECT_EQ(Refused(R"({"model": "olmoe", "prompt": [4294967296]})").param, "prompt");
  EXPECT_EQ(Refused(R"({"model": "olmoe", "prompt": 5})").param, "prompt");
  EXPECT_EQ(Refused(R"({"model": "olmoe", "prompt": {"a": 1}})").param, "prompt");
}

TEST(ApiTest, ChatMessages) {
  ApiRequest r = Accepted(R"({"model": "olmoe", "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hello, "},
                                   {"type": "text", "text": "world"}]},
      {"role": "assistant", "content": null}],
      "max_completion_tokens": 5, "max_tokens": 9, "logprobs": false})",
                          Endpoint::kChat);
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[0].content, "Be brief.");
  EXPECT_EQ(r.messages[1].content, "Hello, world");
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_EQ(r.max_tokens, 5);  // max_completion_tokens wins
  ApiRequest dev = Accepted(R"({"model": "olmoe", "messages": [
      {"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hi"}]})",
                            Endpoint::kChat);
  ASSERT_EQ(dev.messages.size(), 2u);
  EXPECT_EQ(dev.messages[0].role, "system");  // OpenAI's newer name for it
  for (const char* bad : {
           R"({"model": "olmoe"})",
           R"({"model": "olmoe", "messages": []})",
           R"({"model": "olmoe", "messages": "hi"})",
           R"({"model": "olmoe", "messages": ["hi"]})",
           R"({"model": "olmoe", "messages": [{"content": "hi"}]})",
           R"({"model": "olmoe", "messages": [{"role": 1, "content": "hi"}]})",
           R"({"model": "olmoe", "messages": [{"role": "user", "content": 5}]})",
           R"({"model": "olmoe", "messages": [{"role": "user", "content": [{"text": "a"}]}]})",
           R"({"model": "olmoe", "messages": [{"role": "user",
               "content": [{"type": "image_url", "image_url": {}}]}]})",
           R"({"model": "olmoe", "messages": [{"role": "user",
               "content": [{"type": "text", "text": 3}]}]})",
       }) {
    ApiError e = Refused(bad, Endpoint::kChat);
    EXPECT_EQ(e.http_status, 400) << bad;
    EXPECT_EQ(e.param, "messages") << bad;
    EXPECT_EQ(e.type, "invalid_request_error");
  }
  // Reasoning sent back apart, and the template's enable_thinking.
  ApiRequest thinking = Accepted(R"({"model": "olmoe", "messages": [
      {"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "Hello", "reasoning_content": "Greet back."},
      {"role": "assistant", "content": "Hello", "reasoning_content": null}],
      "chat_template_kwargs": {"enable_thinking": false, "other": [1]}})",
                                 Endpoint::kChat);
  EXPECT_EQ(thinking.messages[1].reasoning_content, "Greet back.");
  EXPECT_EQ(thinking.messages[2].reasoning_content, std::nullopt);
  EXPECT_EQ(thinking.enable_thinking, false);
  EXPECT_EQ(dev.enable_thinking, std::nullopt);  // unset: the server's default
  EXPECT_EQ(Refused(R"({"model": "olmoe", "messages": [{"role": "assistant", "content": "x",
                        "reasoning_content": 3}]})",
                    Endpoint::kChat)
                .param,
            "messages");
  for (const char* bad :
       {R"("chat_template_kwargs": "x")", R"("chat_template_kwargs": {"enable_thinking": "no"})"}) {
    const std::string body =
        std::string(R"({"model": "olmoe", "messages": [{"role": "user", "content": "x"}], )") +
        bad + "}";
    EXPECT_EQ(Refused(body, Endpoint::kChat).param, "chat_template_kwargs") << bad;
  }
  // A chat body on the completions endpoint lacks its prompt.
  EXPECT_EQ(Refused(R"({"model": "olmoe", "messages": [{"role": "user", "content": "x"}]})").param,
            "prompt");
}

TEST(ApiTest, MalformedJsonAndWrongBody) {
  for (const char* bad : {"", "{", "{\"model\": \"olmoe\",}", "nul", "{\"a\" 1}", "\xff\xfe",
                          "{\"model\": \"olmoe\", \"prompt\": \"x\", \"top_k\": 15e615}"}) {
    ApiError e = Refused(bad);
    EXPECT_EQ(e.http_status, 400);
    EXPECT_NE(e.message.find("not valid JSON"), std::string::npos) << e.message;
    EXPECT_EQ(e.param, "");
  }
  // The offending byte, 1-based: 'b' is the second byte.
  EXPECT_NE(Refused("{bad}").message.find("at byte 2"), std::string::npos);
  for (const char* bad : {"[]", "3", "\"s\"", "null"}) {
    EXPECT_NE(Refused(bad).message.find("must be a JSON object"), std::string::npos) << bad;
  }
}

// Copying or dumping a parsed value recurses once per level, so a body like a tool whose
// parameters nest 100000 deep (200 KB) would overflow the stack: it is refused unparsed.
TEST(ApiTest, NestingPastTheLimitIsRefused) {
  const auto nested = [](size_t depth) {
    return std::string(depth, '[') + std::string(depth, ']');
  };
  const std::string chat = R"({"model": "olmoe", "messages": [{"role": "user", "content": "x"}], )";
  const ApiError e = Refused(chat + R"("tools": [{"type": "function", "function": {"name": "f",
      "parameters": {"x": )" + nested(100000) +
                                 "}}}]}",
                             Endpoint::kChat);
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.param, "");
  EXPECT_EQ(
      e.message,
      "the request body nests arrays and objects 100005 levels deep; at most 256 are allowed");
  // At the limit the body is parsed: the error is about the prompt's type, not the depth.
  const std::string prompt = R"({"model": "olmoe", "prompt": )" + nested(kMaxJsonDepth - 1) + "}";
  EXPECT_EQ(Refused(prompt).param, "prompt");
  EXPECT_EQ(Refused(R"({"model": "olmoe", "prompt": )" + nested(kMaxJsonDepth) + "}").param, "");
}

TEST(ApiTest, ModelIsRequiredAndMustMatch) {
  EXPECT_EQ(Refused(R"({"prompt": "x"})").param, "model");
  EXPECT_EQ(Refused(R"({"model": 3, "prompt": "x"})").param, "model");
  ApiError e = Refused(R"({"model": "gpt-4", "prompt": "x"})");
  EXPECT_EQ(e.param, "model");
  EXPECT_EQ(e.code, "model_not_found");
  EXPECT_NE(e.message.find("'gpt-4'"), std::string::npos);
  EXPECT_NE(e.message.find("'olmoe'"), std::string::npos);
}

TEST(ApiTest, WrongTypesAndRangesNameTheField) {
  struct Case {
    const char* field_json;
    const char* param;
  };
  for (
      const Case& c : std::initializer_list<Case>{
          {R"("max_tokens": "5")", "max_tokens"},
          {R"("max_tokens": -3)", "max_tokens"},
          {R"("max_tokens": 2.5)", "max_tokens"},
          {R"("max_tokens": 99999999999999)", "max_tokens"},
          {R"("temperature": "hot")", "temperature"},
          {R"("temperature": 2.5)", "temperature"},
          {R"("temperature": -0.1)", "temperature"},
          {R"("top_p": 1.5)", "top_p"},
          {R"("top_k": true)", "top_k"},
          {R"("min_p": [0])", "min_p"},
          {R"("repeat_penalty": 0)", "repeat_penalty"},
          {R"("stop": 5)", "stop"},
          {R"("stop": ["a", 1])", "stop"},
          {R"("stop": ["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16","17"])",
           "stop"},
          {R"("seed": "1")", "seed"},
          {R"("seed": 1.5)", "seed"},
          {R"("stream": "yes")", "stream"},
          {R"("stream": 1)", "stream"},
          {R"("stream_options": true)", "stream_options"},
          {R"("stream_options": {"include_usage": "yes"})", "stream_options"},
          {R"("ignore_eos": 0)", "ignore_eos"},
          {R"("user": 5)", "user"},
          {R"("n": 0)", "n"},
          {R"("n": 65)", "n"},
          {R"("n": "1")", "n"},
          {R"("best_of": 3)", "best_of"},
          {R"("n": 3, "best_of": 2)", "best_of"},
          {R"("presence_penalty": -2.5)", "presence_penalty"},
          {R"("presence_penalty": "0")", "presence_penalty"},
          {R"("frequency_penalty": 3)", "frequency_penalty"},
          {R"("logprobs": true)", "logprobs"},
          {R"("logprobs": -1)", "logprobs"},
          {R"("logprobs": 21)", "logprobs"},
          {R"("logprobs": 1.5)", "logprobs"},
          {R"("top_logprobs": 2)", "top_logprobs"},
          {R"("echo": 1)", "echo"},
          {R"("suffix": 1)", "suffix"},
          {R"("suffix": ["x"])", "suffix"},
          {R"("suffix": "x", "echo": true)", "suffix"},
          {R"("logit_bias": [1])", "logit_bias"},
          {R"("logit_bias": {"x": 1})", "logit_bias"},
          {R"("logit_bias": {"-1": 1})", "logit_bias"},
          {R"("logit_bias": {"99999999999": 1})", "logit_bias"},
          {R"("logit_bias": {"5": 101})", "logit_bias"},
          {R"("logit_bias": {"5": "1"})", "logit_bias"},
          {R"("tools": [{}])", "tools"},
          {R"("response_format": {"type": "xml"})", "response_format"},
          {R"("response_format": "text")", "response_format"},
          {R"("response_format": {"type": "json_schema"})", "response_format"},
          {R"("response_format": {"type": "json_schema", "json_schema": {"schema": 5}})",
           "response_format"},
          {R"("response_format": {"type": "json_schema", "json_schema": {"schema":
               {"type": "string", "pattern": "a+"}}})",
           "response_format"},
          {R"("grammar": 5)", "grammar"},
          {R"("grammar": "root ::= item")", "grammar"},
          {R"("json_schema": "{}")", "json_schema"},
          {R"("json_schema": {"type": "integer", "minimum": 3})", "json_schema"},
          {R"("guided_json": [1])", "guided_json"},
          {R"("response_format": {"type": "json_object"}, "grammar": "root ::= \"a\"")", "grammar"},
      }) {
    const std::string body =
        std::string(R"({"model": "olmoe", "prompt": "x", )") + c.field_json + "}";
    ApiError e = Refused(body);
    EXPECT_EQ(e.http_status, 400) << body;
    EXPECT_EQ(e.param, c.param) << body << ": " << e.message;
    EXPECT_FALSE(e.message.empty());
  }
  // Negative and huge seeds are fine (any 64-bit value).
  EXPECT_EQ(Accepted(R"({"model": "olmoe", "prompt": "x", "seed": -1})").sampling.seed,
            ~uint64_t{0});
  EXPECT_EQ(
      Accepted(R"({"model": "olmoe", "prompt": "x", "seed": 18446744073709551615})").sampling.seed,
      ~uint64_t{0});
  // Chat's logprobs is a boolean, top_logprobs needs it; chat has no echo and its
  // max_tokens is at least 1.
  for (const auto& [field_json, param] : std::vector<std::pair<std::string, std::string>>{
           {R"("logprobs": 0)", "logprobs"},
           {R"("top_logprobs": 2)", "top_logprobs"},
           {R"("logprobs": false, "top_logprobs": 2)", "top_logprobs"},
           {R"("logprobs": true, "top_logprobs": 21)", "top_logprobs"},
           {R"("echo": true)", "echo"},
           {R"("max_tokens": 0)", "max_tokens"},
       }) {
    const std::string body =
        R"({"model": "olmoe", "messages": [{"role": "user", "content": "x"}], )" + field_json + "}";
    EXPECT_EQ(Refused(body, Endpoint::kChat).param, param) << body;
  }
}

TEST(ApiTest, LogitBias) {
  EXPECT_TRUE(Accepted(R"({"model": "olmoe", "prompt": "x", "logit_bias": {}})")
                  .sampling.logit_bias.empty());
  const auto bias = Accepted(R"({"model": "olmoe", "prompt": "x",
                                 "logit_bias": {"5": -100, "2147483647": 2.5}})")
                        .sampling.logit_bias;
  ASSERT_EQ(bias.size(), 2u);
  EXPECT_EQ(bias[0], (std::pair<int64_t, float>{2147483647, 2.5f}));  // JSON objects sort keys
  EXPECT_EQ(bias[1], (std::pair<int64_t, float>{5, -100.0f}));
}

TEST(ApiTest, ChoicesPerPrompt) {
  EXPECT_EQ(Accepted(R"({"model": "olmoe", "prompt": "x"})").n, 1);
  EXPECT_EQ(Accepted(R"({"model": "olmoe", "prompt": "x", "n": 64, "best_of": 64})").n, 64);
  EXPECT_EQ(Accepted(R"({"model": "olmoe", "prompt": ["x", "y"], "n": 32})").n, 32);
  EXPECT_EQ(Refused(R"({"model": "olmoe", "prompt": ["x", "y"], "n": 33})").param, "n");
  EXPECT_EQ(Accepted(R"({"model": "olmoe", "messages": [{"role": "user", "content": "x"}],
                         "n": 4})",
                     Endpoint::kChat)
                .n,
            4);
}

TEST(ApiTest, LogprobsAndEcho) {
  ApiRequest r = Accepted(R"({"model": "olmoe", "prompt": "x"})");
  EXPECT_EQ(r.logprobs, -1);
  EXPECT_FALSE(r.echo);
  r = Accepted(R"({"model": "olmoe", "prompt": "x", "logprobs": 0, "echo": true,
                   "max_tokens": 0})");
  EXPECT_EQ(r.logprobs, 0);  // the token's own log-probability, no alternatives
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.max_tokens, 0);
  EXPECT_EQ(Accepted(R"({"model": "olmoe", "prompt": "x", "logprobs": 20})").logprobs, 20);
  const std::string chat = R"({"model": "olmoe", "messages": [{"role": "user", "content": "x"}])";
  EXPECT_EQ(Accepted(chat + R"(, "logprobs": false})", Endpoint::kChat).logprobs, -1);
  EXPECT_EQ(Accepted(chat + R"(, "logprobs": true})", Endpoint::kChat).logprobs, 0);
  EXPECT_EQ(Accepted(chat + R"(, "logprobs": true, "top_logprobs": 5})", Endpoint::kChat).logprobs,
            5);
  EXPECT_EQ(Accepted(chat + R"(, "top_logprobs": 0})", Endpoint::kChat).logprobs, -1);
}

TEST(ApiTest, ErrorJsonShape) {
  ApiError e;
  e.message = "bad";
  e.param = "prompt";
  json j = ErrorJson(e);
  EXPECT_EQ(j, json::parse(R"({"error": {"message": "bad", "type": "invalid_request_error",
                                         "param": "prompt", "code": null}})"));
  e.param.clear();
  e.code = "x";
  EXPECT_EQ(ErrorJson(e)["error"]["param"], nullptr);
  EXPECT_EQ(ErrorJson(e)["error"]["code"], "x");
}

TEST(ApiTest, ResponsesAndChunks) {
  ResponseMeta meta{"chatcmpl-1", 1700000000, "olmoe"};
  const Choice hi{"Hi!", "stop", nullptr};
  json full = CompletionJson(Endpoint::kChat, meta, std::span(&hi, 1), Usage{5, 3, 2});
  EXPECT_EQ(full, json::parse(R"({"id": "chatcmpl-1", "object": "chat.completion",
      "created": 1700000000, "model": "olmoe",
      "choices": [{"index": 0, "logprobs": null, "finish_reason": "stop",
                   "message": {"role": "assistant", "content": "Hi!"}}],
      "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8,
                "prompt_tokens_details": {"cached_tokens": 2}}})"));
  const json logprobs = {{"tokens", json::array()}};
  const std::vector<Choice> two = {{"abc", "length", nullptr}, {"de", "stop", logprobs}};
  json text = CompletionJson(Endpoint::kCompletions, meta, two, Usage{1, 2});
  EXPECT_EQ(text["object"], "text_completion");
  ASSERT_EQ(text["choices"].size(), 2u);
  EXPECT_EQ(text["choices"][0]["text"], "abc");
  EXPECT_EQ(text["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(text["choices"][0]["logprobs"], nullptr);
  EXPECT_EQ(text["choices"][1]["index"], 1);
  EXPECT_EQ(text["choices"][1]["text"], "de");
  EXPECT_EQ(text["choices"][1]["logprobs"], logprobs);

  json first = ChunkJson(Endpoint::kChat, meta, "", "", /*first=*/true);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"], json::parse(R"({"role": "assistant", "content": ""})"));
  EXPECT_EQ(first["choices"][0]["finish_reason"], nullptr);
  json last = ChunkJson(Endpoint::kChat, meta, "", "stop", false);
  EXPECT_EQ(last["choices"][0]["delta"], json::object());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  json usage = UsageChunkJson(Endpoint::kChat, meta, Usage{2, 2});
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 4);

  EXPECT_EQ(SseEvent(json{{"a", 1}}), "data: {\"a\":1}\n\n");
  // Bytes that are not UTF-8 (a model can emit any) become U+FFFD instead of throwing.
  EXPECT_EQ(Dump(json("a\xff"
                      "b")),
            "\"a\xef\xbf\xbd"
            "b\"");
}

// The shapes of OpenAI's two logprobs objects.
TEST(ApiTest, LogprobsJsonShapes) {
  std::vector<LogprobEntry> entries(2);
  entries[0] = {"Hi", std::nullopt, {}, 0};  // an echoed prompt's first token
  entries[1] = {"\xe2", -0.5f, {{"a", -0.25f}, {"\xe2", -0.5f}}, 2};
  json c = LogprobsJson(Endpoint::kCompletions, entries);
  // Part of a UTF-8 character is spelled out as its bytes, as OpenAI does.
  EXPECT_EQ(c["tokens"], json::array({"Hi", "bytes:\\xe2"}));
  EXPECT_EQ(c["token_logprobs"], json::parse("[null, -0.5]"));
  EXPECT_EQ(c["top_logprobs"][0], nullptr);
  EXPECT_EQ(c["top_logprobs"][1].size(), 2u);
  EXPECT_EQ(c["top_logprobs"][1]["a"], -0.25);
  EXPECT_EQ(c["text_offset"], json::parse("[0, 2]"));
  // The token itself joins its alternatives when it is not among them (logprobs: 0).
  entries[1].top = {{"a", -0.25f}};
  c = LogprobsJson(Endpoint::kCompletions, entries);
  EXPECT_EQ(c["top_logprobs"][1].size(), 2u);
  EXPECT_EQ(c["top_logprobs"][1]["bytes:\\xe2"], -0.5);

  json chat = LogprobsJson(Endpoint::kChat, std::span(entries).subspan(1));
  EXPECT_EQ(chat["refusal"], nullptr);
  ASSERT_EQ(chat["content"].size(), 1u);
  const json& e = chat["content"][0];
  EXPECT_EQ(e["logprob"], -0.5);
  EXPECT_EQ(e["bytes"], json::array({0xe2}));  // a partial UTF-8 character, exactly
  EXPECT_EQ(e["top_logprobs"], json::parse(R"([{"token": "a", "logprob": -0.25,
                                                "bytes": [97]}])"));
  EXPECT_EQ(e["token"], "bytes:\\xe2");
}

TEST(ApiTest, TokenizeAndDetokenizeBodies) {
  TokenizeRequest t;
  // vLLM's form: add_special_tokens defaults to true; llama.cpp's: add_special to false.
  ASSERT_FALSE(ParseTokenizeRequest(R"({"prompt": "Hi"})", kModel, &t));
  EXPECT_EQ(t.text, "Hi");
  EXPECT_TRUE(t.add_special);
  ASSERT_FALSE(ParseTokenizeRequest(R"({"model": "olmoe", "prompt": "a", "add_special_tokens":
                                        false})",
                                    kModel, &t));
  EXPECT_FALSE(t.add_special);
  ASSERT_FALSE(ParseTokenizeRequest(R"({"content": "b"})", kModel, &t));
  EXPECT_EQ(t.text, "b");
  EXPECT_FALSE(t.add_special);
  ASSERT_FALSE(ParseTokenizeRequest(R"({"content": "c", "add_special": true})", kModel, &t));
  EXPECT_TRUE(t.add_special);
  for (const auto& [body, param] : std::vector<std::pair<std::string, std::string>>{
           {R"({})", "content"},
           {R"({"prompt": 5})", "prompt"},
           {R"({"prompt": "x", "add_special_tokens": 1})", "add_special_tokens"},
           {R"({"model": "other", "prompt": "x"})", "model"},
           {R"(["x"])", ""},
           {R"({"prompt": )", ""},
       }) {
    std::optional<ApiError> e = ParseTokenizeRequest(body, kModel, &t);
    ASSERT_TRUE(e.has_value()) << body;
    EXPECT_EQ(e->param, param) << body;
    EXPECT_EQ(e->http_status, 400);
  }
  DetokenizeRequest d;
  ASSERT_FALSE(ParseDetokenizeRequest(R"({"tokens": [1, 2, 3.0]})", kModel, &d));
  EXPECT_EQ(d.tokens, (std::vector<int64_t>{1, 2, 3}));
  ASSERT_FALSE(ParseDetokenizeRequest(R"({"tokens": []})", kModel, &d));
  EXPECT_TRUE(d.tokens.empty());
  for (const char* body : {R"({})", R"({"tokens": "1"})", R"({"tokens": [-1]})",
                           R"({"tokens": [1.5]})", R"({"tokens": [4294967296]})"}) {
    std::optional<ApiError> e = ParseDetokenizeRequest(body, kModel, &d);
    ASSERT_TRUE(e.has_value()) << body;
    EXPECT_EQ(e->param, "tokens") << body;
  }
}

// llama-server's /infill body: the texts, the extra files, n_predict and the sampling fields
// of /v1/completions; its own machinery's fields are ignored; a stream is refused.
TEST(ApiTest, InfillBodies) {
  InfillRequest r;
  ASSERT_FALSE(ParseInfillRequest(R"({"input_prefix": "a", "input_suffix": "b", "prompt": "c",
      "input_extra": [{"filename": "f.py", "text": "x"}, {"text": "y"}], "n_predict": 7,
      "temperature": 0.2, "top_k": 5, "top_p": 0.5, "stop": ["\n\n"], "cache_prompt": false,
      "seed": 3, "samplers": ["top_k"], "t_max_predict_ms": 500, "id_slot": -1,
      "response_fields": ["content"], "n_indent": 4, "stream": false})",
                                  kModel, &r));
  EXPECT_EQ(r.prefix, "a");
  EXPECT_EQ(r.suffix, "b");
  EXPECT_EQ(r.prompt, "c");
  ASSERT_EQ(r.extra.size(), 2u);
  EXPECT_EQ(r.extra[0].filename, "f.py");
  EXPECT_EQ(r.extra[0].text, "x");
  EXPECT_EQ(r.extra[1].filename, "tmp");
  EXPECT_EQ(r.api.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.api.sampling.temperature, 0.2f);
  EXPECT_EQ(r.api.sampling.top_k, 5);
  EXPECT_FLOAT_EQ(r.api.sampling.top_p, 0.5f);
  EXPECT_EQ(r.api.stop, std::vector<std::string>{"\n\n"});
  EXPECT_FALSE(r.api.cache_prompt);
  EXPECT_EQ(r.api.sampling.seed, 3u);
  EXPECT_TRUE(r.api.prompts.empty());  // InfillPrompt builds it
  ASSERT_FALSE(ParseInfillRequest(R"({"input_prefix": "", "input_suffix": "", "n_predict": -1})",
                                  kModel, &r));
  EXPECT_FALSE(r.api.max_tokens.has_value());
  EXPECT_TRUE(r.extra.empty());
  for (const auto& [body, param] : std::vector<std::pair<std::string, std::string>>{
           {R"({"input_suffix": "b"})", "input_prefix"},
           {R"({"input_prefix": "a"})", "input_suffix"},
           {R"({"input_prefix": 1, "input_suffix": "b"})", "input_prefix"},
           {R"({"input_prefix": "a", "input_suffix": "b", "prompt": ["x"]})", "prompt"},
           {R"({"input_prefix": "a", "input_suffix": "b", "input_extra": "x"})", "input_extra"},
           {R"({"input_prefix": "a", "input_suffix": "b", "input_extra": [{"filename": "f"}]})",
            "input_extra"},
           {R"({"input_prefix": "a", "input_suffix": "b", "input_extra": [{"text": "t",
                "filename": 2}]})",
            "input_extra"},
           {R"({"input_prefix": "a", "input_suffix": "b", "n_predict": -2})", "n_predict"},
           {R"({"input_prefix": "a", "input_suffix": "b", "temperature": "hot"})", "temperature"},
           {R"({"input_prefix": "a", "input_suffix": "b", "stream": true})", "stream"},
           {R"({"input_prefix": "a", "input_suffix": "b", "model": "other"})", "model"},
           {R"(["a"])", ""},
       }) {
    std::optional<ApiError> e = ParseInfillRequest(body, kModel, &r);
    ASSERT_TRUE(e.has_value()) << body;
    EXPECT_EQ(e->param, param) << body;
    EXPECT_EQ(e->http_status, 400);
  }
}

// llama-server's /completion body: one prompt (text or ids), n_predict, llama-server's
// logit_bias pairs (false: banned), a JSON schema; n_probs and several prompts are refused.
TEST(ApiTest, NativeCompletionBodies) {
  ApiRequest r;
  ASSERT_FALSE(ParseNativeCompletionRequest(R"({"prompt": "Hi", "n_predict": 9, "stream": true,
      "logit_bias": [[5, -2.5], [7, false]], "top_k": 0, "n_probs": 0, "cache_prompt": false,
      "json_schema": {"type": "integer"}, "samplers": ["top_k"], "id_slot": -1})",
                                            kModel, &r));
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].text, "Hi");
  EXPECT_EQ(r.endpoint, Endpoint::kCompletions);
  EXPECT_EQ(r.model, kModel);
  EXPECT_EQ(r.max_tokens, 9);
  EXPECT_TRUE(r.stream);
  EXPECT_EQ(r.sampling.logit_bias,
            (std::vector<std::pair<int64_t, float>>{{5, -2.5f}, {7, -100.0f}}));
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_FALSE(r.cache_prompt);
  EXPECT_NE(r.grammar, nullptr);
  ASSERT_FALSE(ParseNativeCompletionRequest(R"({"prompt": [1, 2], "n_predict": -1,
                                                "logit_bias": {"3": 1}})",
                                            kModel, &r));
  EXPECT_TRUE(r.prompts[0].is_tokens);
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_EQ(r.sampling.logit_bias.size(), 1u);
  ASSERT_FALSE(
      ParseNativeCompletionRequest(R"({"prompt": "a", "t_max_predict_ms": 250})", kModel, &r));
  EXPECT_EQ(r.max_predict_ms, 250);
  ASSERT_FALSE(ParseNativeCompletionRequest(R"({"prompt": "a", "seed": -1})", kModel, &r));
  EXPECT_FALSE(r.sampling.seed.has_value());  // llama-server's "random"
  ASSERT_FALSE(ParseNativeCompletionRequest(R"({"prompt": "a", "seed": 5})", kModel, &r));
  EXPECT_EQ(r.sampling.seed, 5u);
  for (const auto& [body, param] : std::vector<std::pair<std::string, std::string>>{
           {R"({})", "prompt"},
           {R"({"prompt": 3})", "prompt"},
           {R"({"prompt": ["a", "b"]})", "prompt"},
           {R"({"prompt": "a", "n_probs": 5})", "n_probs"},
           {R"({"prompt": "a", "logit_bias": [[1]]})", "logit_bias"},
           {R"({"prompt": "a", "logit_bias": [["x", 1]]})", "logit_bias"},
           {R"({"prompt": "a", "n_predict": "5"})", "n_predict"},
           {R"({"prompt": "a", "grammar": "root ::= ("})", "grammar"},
           {R"({"prompt": "a", "model": "other"})", "model"},
       }) {
    std::optional<ApiError> e = ParseNativeCompletionRequest(body, kModel, &r);
    ASSERT_TRUE(e.has_value()) << body;
    EXPECT_EQ(e->param, param) << body;
    EXPECT_EQ(e->http_status, 400);
  }
}

TEST(ApiTest, ConstraintsCompileToGrammars) {
  auto whole = [](const ApiRequest& r, std::string_view text) {
    EXPECT_NE(r.grammar, nullptr);
    if (r.grammar == nullptr) return false;
    grammar::Matcher m(r.grammar);
    return m.Accept(text) && m.IsComplete();
  };
  EXPECT_EQ(Accepted(R"({"model": "olmoe", "prompt": "x"})").grammar, nullptr);
  EXPECT_EQ(
      Accepted(R"({"model": "olmoe", "prompt": "x", "response_format": {"type": "text"}})").grammar,
      nullptr);
  const ApiRequest object =
      Accepted(R"({"model": "olmoe", "prompt": "x", "response_format": {"type": "json_object"}})");
  EXPECT_TRUE(whole(object, R"({"a": [1, {"b": null}]})"));
  EXPECT_FALSE(whole(object, "[1]"));
  const ApiRequest gbnf =
      Accepted(R"({"model": "olmoe", "prompt": "x", "grammar": "root ::= \"yes\" | \"no\""})");
  EXPECT_TRUE(whole(gbnf, "no"));
  EXPECT_FALSE(whole(gbnf, "maybe"));
  // Properties come in the order the client wrote them, not sorted.
  const char* schema = R"({"type": "object", "properties": {"zeta": {"type": "integer"},
      "alpha": {"type": "boolean"}}, "required": ["zeta", "alpha"]})";
  for (const std::string& field :
       {std::string(R"("response_format": {"type": "json_schema", "json_schema":
            {"name": "t", "strict": true, "schema": )") +
            schema + "}}",
        std::string(R"("json_schema": )") + schema, std::string(R"("guided_json": )") + schema}) {
    const ApiRequest r =
        Accepted(std::string(R"({"model": "olmoe", "prompt": "x", )") + field + "}");
    EXPECT_TRUE(whole(r, R"({"zeta": 3, "alpha": true})")) << field;
    EXPECT_FALSE(whole(r, R"({"alpha": true, "zeta": 3})")) << field;
    EXPECT_FALSE(whole(r, R"({"zeta": 3})")) << field;
  }
  // A compile error is a 400 naming the field, with the grammar's message.
  const ApiError e = Refused(R"({"model": "olmoe", "prompt": "x", "grammar": "root ::= [z-a]"})");
  EXPECT_EQ(e.param, "grammar");
  EXPECT_EQ(e.message, "grammar: line 1, column 14: character range with its end before its start");
}

TEST(ApiTest, ToolsAndToolChoice) {
  const std::string chat = R"({"model": "olmoe", "messages": [{"role": "user", "content": "x"}], )";
  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"z": {}, "a": {}}}}},
      {"type": "function", "function": {"name": "now"}}])";
  ApiRequest r = Accepted(chat + tools + "}", Endpoint::kChat);
  EXPECT_EQ(r.tool_choice, ToolChoice::kAuto);  // the default with tools
  ASSERT_EQ(r.tools.size(), 2u);
  EXPECT_EQ(r.tools[0].name, "get_weather");
  EXPECT_EQ(r.tools[1].parameters, nlohmann::ordered_json({{"type", "object"}}));
  // The tools as sent, in key order (rendered into the prompt).
  EXPECT_EQ(r.tools_json[0]["function"]["parameters"]["properties"].begin().key(), "z");
  EXPECT_TRUE(r.parallel_tool_calls);
  r = Accepted(chat + tools + R"(, "tool_choice": {"type": "function", "function": {"name":
      "now"}}, "parallel_tool_calls": false})",
               Endpoint::kChat);
  EXPECT_EQ(r.tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(r.tool_choice_name, "now");
  EXPECT_FALSE(r.parallel_tool_calls);
  EXPECT_EQ(Accepted(chat + tools + R"(, "tool_choice": "required"})", Endpoint::kChat).tool_choice,
            ToolChoice::kRequired);
  EXPECT_NE(Accepted(chat + tools + R"(, "tool_choice": "none", "response_format":
                {"type": "json_object"}})",
                     Endpoint::kChat)
                .grammar,
            nullptr);  // the tools hidden, the format holds
  // Auto with a JSON format: calls or an answer in it (the schema is kept for that grammar).
  r = Accepted(chat + tools + R"(, "response_format": {"type": "json_object"}})", Endpoint::kChat);
  EXPECT_EQ(r.tool_choice, ToolChoice::kAuto);
  EXPECT_EQ(r.format_schema, nlohmann::ordered_json({{"type", "object"}}));
  EXPECT_EQ(Accepted(chat + tools + R"(, "tool_choice": "none"})", Endpoint::kChat).tool_choice,
            ToolChoice::kNone);
  EXPECT_EQ(Accepted(chat + R"("tools": [], "tool_choice": "none"})", Endpoint::kChat).tool_choice,
            ToolChoice::kNone);
  // A conversation that went through a call.
  r = Accepted(R"({"model": "olmoe", "messages": [{"role": "user", "content": "x"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
       "function": {"name": "now", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "noon"}]})",
               Endpoint::kChat);
  ASSERT_EQ(r.messages.size(), 3u);
  ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[1].tool_calls[0].name, "now");
  EXPECT_EQ(r.messages[1].tool_calls[0].arguments, "{}");
  EXPECT_EQ(r.messages[2].role, "tool");
  for (const auto& [body, param] : std::vector<std::pair<std::string, std::string>>{
           {chat + R"("tools": {}})", "tools"},
           {chat + R"("tools": [{"type": "function"}]})", "tools"},
           {chat + R"("tools": [{"type": "function", "function": {"name": "a b"}}]})", "tools"},
           {chat + R"("tools": [{"type": "function", "function": {"name": "f"}},
                {"type": "function", "function": {"name": "f"}}]})",
            "tools"},
           {chat + R"("tools": [{"type": "function", "function": {"name": "f",
                "parameters": []}}]})",
            "tools"},
           {chat + R"("tool_choice": "required"})", "tool_choice"},
           {chat + R"("tool_choice": {"type": "function", "function": {"name": "f"}}})",
            "tool_choice"},
           {chat + tools + R"(, "tool_choice": "always"})", "tool_choice"},
           {chat + tools + R"(, "tool_choice": {"type": "function", "function": {"name":
                "nope"}}})",
            "tool_choice"},
           {chat + tools + R"(, "tool_choice": "required", "grammar": "root ::= \"a\""})",
            "tool_choice"},
           // Auto with a GBNF grammar: no schema to build "calls or the format" from.
           {chat + tools + R"(, "grammar": "root ::= \"a\""})", "grammar"},
           {chat + R"("parallel_tool_calls": 1})", "parallel_tool_calls"},
           {chat + R"("functions": [{"name": "f"}]})", "functions"},
           {R"({"model": "olmoe", "messages": [{"role": "user", "content": "x",
                "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}]})",
            "messages"},
           {R"({"model": "olmoe", "messages": [{"role": "assistant", "content": null,
                "tool_calls": [{"function": {"name": "f", "arguments": {}}}]}]})",
            "messages"},
       }) {
    EXPECT_EQ(Refused(body, Endpoint::kChat).param, param) << body;
  }
  EXPECT_EQ(Refused(R"({"model": "olmoe", "prompt": "x", )" + tools + "}").param, "tools");
}

}  // namespace
}  // namespace mt::server
