#include "server/tool_calls.h"

#include <gtest/gtest.h>

#include "grammar/grammar.h"

namespace mt::server {
namespace {

constexpr std::string_view kTwoCalls =
    "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
    "\"Paris\", \"unit\": \"c\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", "
    "\"arguments\": {}}\n</tool_call>";

TEST(ToolCalls, ParsesContentAndCalls) {
  const ToolCallOutput out = ParseToolCalls(kTwoCalls);
  EXPECT_EQ(out.content, "Let me look.\n");
  ASSERT_EQ(out.calls.size(), 2u);
  EXPECT_EQ(out.calls[0].name, "get_weather");
  EXPECT_EQ(out.calls[0].arguments, R"({"city":"Paris","unit":"c"})");  // key order kept
  EXPECT_EQ(out.calls[1].name, "get_time");
  EXPECT_EQ(out.calls[1].arguments, "{}");
  // No block: all content. An unterminated last block (max_tokens mid-call) still parses
  // when its JSON is whole.
  EXPECT_EQ(ParseToolCalls("just text").content, "just text");
  EXPECT_TRUE(ParseToolCalls("just text").calls.empty());
  const ToolCallOutput open =
      ParseToolCalls("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n");
  ASSERT_EQ(open.calls.size(), 1u);
  EXPECT_EQ(open.calls[0].arguments, R"({"x":1})");
  // Cut short inside the second call: the first stays, the rest is dropped.
  const ToolCallOutput cut = ParseToolCalls(
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"na");
  ASSERT_EQ(cut.calls.size(), 1u);
  EXPECT_EQ(cut.content, "");
}

TEST(ToolCalls, ABlockThatDoesNotParseLeavesAllContent) {
  for (std::string_view bad : {
           "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1\n</tool_call>",  // cut JSON
           "<tool_call>{\"arguments\": {}}</tool_call>",                             // no name
           "<tool_call>{\"name\": 3, \"arguments\": {}}</tool_call>",
           "<tool_call>{\"name\": \"f\", \"arguments\": \"x=1\"}</tool_call>",  // not an object
           "<tool_call>[1]</tool_call>",
       }) {
    const ToolCallOutput out = ParseToolCalls(bad);
    EXPECT_TRUE(out.calls.empty()) << bad;
    EXPECT_EQ(out.content, bad);
  }
  // Arguments nested past kMaxJsonDepth (dumping them would recurse that deep): content too.
  const std::string deep =
      "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": " + std::string(100000, '[') +
      std::string(100000, ']') + "}}</tool_call>";
  const ToolCallOutput out = ParseToolCalls(deep);
  EXPECT_TRUE(out.calls.empty());
  EXPECT_EQ(out.content, deep);
}

// Streaming the text in pieces of every size gives what parsing it whole gives, and content
// goes out as soon as it cannot start a call block.
TEST(ToolCalls, SplitterMatchesTheWholeParseAtEveryCut) {
  for (std::string_view text : {kTwoCalls, std::string_view("plain <tool text < done <"),
                                std::string_view("<tool_call>{broken")}) {
    const ToolCallOutput whole = ParseToolCalls(text);
    for (size_t piece = 1; piece <= text.size(); ++piece) {
      ToolCallSplitter s;
      std::string content;
      for (size_t at = 0; at < text.size(); at += piece) content += s.Push(text.substr(at, piece));
      const ToolCallOutput rest = s.Finish();
      content += rest.content;
      EXPECT_EQ(content, whole.content) << "piece " << piece;
      ASSERT_EQ(rest.calls.size(), whole.calls.size()) << "piece " << piece;
      for (size_t i = 0; i < whole.calls.size(); ++i) {
        EXPECT_EQ(rest.calls[i].arguments, whole.calls[i].arguments);
      }
    }
  }
  ToolCallSplitter s;
  EXPECT_EQ(s.Push("Hello <"), "Hello ");  // '<' may begin a block: held
  EXPECT_EQ(s.Push("b>"), "<b>");          // it did not
  EXPECT_EQ(s.Push(" <tool_"), " ");
  EXPECT_EQ(s.Push("call>{"), "");  // a block: everything waits for Finish
  EXPECT_EQ(s.Push("more"), "");
}

TEST(ToolCalls, GrammarForcesCallsOfTheGivenTools) {
  std::vector<ApiTool> tools(2);
  tools[0].name = "get_weather";
  tools[0].parameters = nlohmann::ordered_json::parse(
      R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})");
  tools[1].name = "get_time";
  tools[1].parameters = nlohmann::ordered_json{{"type", "object"}};
  auto accepts = [](const Result<std::string>& gbnf, std::string_view text) {
    EXPECT_TRUE(gbnf.ok()) << gbnf.status().message();
    auto g = grammar::Grammar::Parse(gbnf.value());
    EXPECT_TRUE(g.ok()) << g.status().message();
    grammar::Matcher m(*g);
    return m.Accept(text) && m.IsComplete();
  };
  const std::string weather =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n"
      "</tool_call>";
  const std::string time = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
  const Result<std::string> any = ToolCallGbnf(tools, "", /*parallel=*/true);
  EXPECT_TRUE(accepts(any, weather));
  EXPECT_TRUE(accepts(any, time));
  EXPECT_TRUE(accepts(any, weather + "\n" + time));
  EXPECT_FALSE(accepts(any, "Sure. " + weather));  // only calls
  EXPECT_FALSE(accepts(any,
                       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n"
                       "</tool_call>"));  // city is required
  EXPECT_FALSE(accepts(any,
                       "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n"
                       "</tool_call>"));
  const Result<std::string> one = ToolCallGbnf(tools, "", /*parallel=*/false);
  EXPECT_TRUE(accepts(one, time));
  EXPECT_FALSE(accepts(one, weather + "\n" + time));
  const Result<std::string> named = ToolCallGbnf(tools, "get_time", /*parallel=*/true);
  EXPECT_TRUE(accepts(named, time));
  EXPECT_FALSE(accepts(named, weather));
  // Lazy (tool_choice auto): the grammar starts after the model's own "<tool_call>".
  const Result<std::string> lazy = ToolCallGbnf(tools, "", true, /*after_open_tag=*/true);
  EXPECT_TRUE(accepts(lazy, weather.substr(kToolCallOpen.size())));
  EXPECT_TRUE(accepts(lazy, weather.substr(kToolCallOpen.size()) + "\n" + time));
  EXPECT_FALSE(accepts(lazy, weather));
  // Auto with a JSON response format: calls, or one document of the format.
  const nlohmann::ordered_json answer =
      nlohmann::ordered_json::parse(R"({"type": "object", "properties": {"ok": {"type":
          "boolean"}}, "required": ["ok"], "additionalProperties": false})");
  const Result<std::string> either = ToolCallGbnf(tools, "", true, false, &answer);
  EXPECT_TRUE(accepts(either, weather + "\n" + time));
  EXPECT_TRUE(accepts(either, R"({"ok": true})"));
  EXPECT_FALSE(accepts(either, R"({"ok": 1})"));
  EXPECT_FALSE(accepts(either, R"({"ok": true})" + weather));
  EXPECT_FALSE(accepts(either, "Sure."));
  const nlohmann::ordered_json any_object = {{"type", "object"}};  // json_object's
  EXPECT_TRUE(accepts(ToolCallGbnf(tools, "", true, false, &any_object), R"({"x": [1, "y"]})"));
  const nlohmann::ordered_json bad_answer = nlohmann::ordered_json::parse(R"({"format": "x"})");
  EXPECT_EQ(ToolCallGbnf(tools, "", true, false, &bad_answer).status().message(),
            "the response format: json_schema: unsupported keyword 'format' at /");
  // What the grammar forces, the parser reads back.
  EXPECT_EQ(ParseToolCalls(weather + "\n" + time).calls.size(), 2u);
  // A schema the grammar cannot express names its tool.
  tools[1].parameters = nlohmann::ordered_json::parse(R"({"type": "string", "format": "uri"})");
  const Result<std::string> bad = ToolCallGbnf(tools, "", true);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "tools[1] (get_time): json_schema: unsupported keyword 'format' at /");
}

// GLM-4.5's blocks: a name, then <arg_key>/<arg_value> pairs; values that parse as JSON
// are that JSON, others strings.
constexpr std::string_view kGlmCalls =
    "Let me look.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>New York"
    "</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n<arg_key>opts</arg_key>\n"
    "<arg_value>{\"units\": \"c\", \"x\": [true, null]}</arg_value>\n<arg_key>q</arg_key>\n"
    "<arg_value>\"quoted\"</arg_value>\n</tool_call>\n<tool_call>now\n</tool_call>";

TEST(ToolCalls, ParsesGlm45Blocks) {
  const ToolCallOutput out = ParseToolCalls(kGlmCalls, ToolCallSyntax::kGlm45);
  EXPECT_EQ(out.content, "Let me look.\n");
  ASSERT_EQ(out.calls.size(), 2u);
  EXPECT_EQ(out.calls[0].name, "get_weather");
  EXPECT_EQ(out.calls[0].arguments,
            R"({"city":"New York","days":3,"opts":{"units":"c","x":[true,null]},"q":"quoted"})");
  EXPECT_EQ(out.calls[1].name, "now");
  EXPECT_EQ(out.calls[1].arguments, "{}");
  // The Hermes reader does not take them (not JSON): all content.
  EXPECT_TRUE(ParseToolCalls(kGlmCalls).calls.empty());
  for (std::string_view bad : {
           "<tool_call>\n<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>",  // no name
           "<tool_call>f\n<arg_key>a</arg_key>\n</tool_call>",                       // no value
           "<tool_call>f\n<arg_key>a</arg_key><arg_value>1</arg_value>junk</tool_call>",
           "<tool_call>f\n<arg_key>a</arg_key><arg_value>1</arg_va",  // cut short
       }) {
    const ToolCallOutput o = ParseToolCalls(bad, ToolCallSyntax::kGlm45);
    EXPECT_TRUE(o.calls.empty()) << bad;
    EXPECT_EQ(o.content, bad);
  }
}

TEST(ToolCalls, Glm45SplitterMatchesTheWholeParseAtEveryCut) {
  const ToolCallOutput whole = ParseToolCalls(kGlmCalls, ToolCallSyntax::kGlm45);
  for (size_t piece = 1; piece <= kGlmCalls.size(); ++piece) {
    ToolCallSplitter s(ToolCallSyntax::kGlm45);
    std::string content;
    for (size_t at = 0; at < kGlmCalls.size(); at += piece) {
      content += s.Push(kGlmCalls.substr(at, piece));
    }
    ToolCallOutput rest = s.Finish();
    content += rest.content;
    EXPECT_EQ(content, whole.content) << "piece " << piece;
    ASSERT_EQ(rest.calls.size(), 2u) << "piece " << piece;
    EXPECT_EQ(rest.calls[0].arguments, whole.calls[0].arguments);
  }
}

}  // namespace
}  // namespace mt::server
