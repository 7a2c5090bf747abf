#include "server/harmony.h"

#include <gtest/gtest.h>

namespace mt::server {
namespace {

// What gpt-oss writes after the prompt's "<|start|>assistant" (generation stops at <|return|>
// or <|call|>, whose text is not part of the output).
constexpr std::string_view kAnswer =
    "<|channel|>analysis<|message|>The user says hi.<|end|><|start|>assistant<|channel|>final"
    "<|message|>Hello!";
constexpr std::string_view kCall =
    "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>"
    "commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}";

TEST(Harmony, SplitsReasoningAndAnswer) {
  const HarmonyOutput out = ParseHarmony(kAnswer);
  EXPECT_EQ(out.reasoning, "The user says hi.");
  EXPECT_EQ(out.content, "Hello!");
  EXPECT_TRUE(out.thought);
  EXPECT_TRUE(out.calls.empty());
  // An answer without reasoning.
  const HarmonyOutput direct = ParseHarmony("<|channel|>final<|message|>Hi");
  EXPECT_EQ(direct.content, "Hi");
  EXPECT_FALSE(direct.thought);
  // Text that is not harmony is content, all of it.
  EXPECT_EQ(ParseHarmony("plain <|end|> text").content, "plain <|end|> text");
  EXPECT_EQ(ParseHarmony("").content, "");
}

TEST(Harmony, ReadsToolCalls) {
  HarmonyOutput out = ParseHarmony(kCall);
  EXPECT_EQ(out.reasoning, "Need the weather.");
  EXPECT_EQ(out.content, "");
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].name, "get_weather");
  EXPECT_EQ(out.calls[0].arguments, R"({"city":"Paris"})");
  // The recipient in the role's header (as the template renders calls), "json" without
  // <|constrain|>; arguments that are not JSON stay as written; a preamble on the
  // commentary channel is content.
  out = ParseHarmony(
      "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant to=functions.f"
      "<|channel|>commentary json<|message|>{\"a\": [1, 2]}<|end|><|start|>assistant to="
      "browser.search<|channel|>commentary <|constrain|>json<|message|>not json");
  EXPECT_EQ(out.content, "Checking.");
  ASSERT_EQ(out.calls.size(), 2u);
  EXPECT_EQ(out.calls[0].name, "f");
  EXPECT_EQ(out.calls[0].arguments, R"({"a":[1,2]})");
  EXPECT_EQ(out.calls[1].name, "browser.search");
  EXPECT_EQ(out.calls[1].arguments, "not json");
  // Arguments nested past kMaxJsonDepth stay as written too (dumping them would recurse).
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  out =
      ParseHarmony("<|start|>assistant to=functions.f<|channel|>commentary json<|message|>" + deep);
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].arguments, deep);
}

TEST(Harmony, ReasoningInContentKeepsTheAnalysisAsWritten) {
  const HarmonyOutput out = ParseHarmony(kAnswer, /*reasoning_in_content=*/true);
  EXPECT_EQ(out.reasoning, "");
  EXPECT_EQ(out.content, "<|channel|>analysis<|message|>The user says hi.<|end|>Hello!");
}

TEST(Harmony, CutShort) {
  // Inside the reasoning: all of it is reasoning; inside a header: nothing of it is said.
  HarmonyOutput out = ParseHarmony("<|channel|>analysis<|message|>Thinking");
  EXPECT_EQ(out.reasoning, "Thinking");
  EXPECT_EQ(out.content, "");
  out = ParseHarmony("<|channel|>analysis<|message|>T<|end|><|start|>assistant<|chan");
  EXPECT_EQ(out.reasoning, "T");
  EXPECT_EQ(out.content, "");
}

// Streaming in pieces of every size (tags cut anywhere) adds up to the whole parse, and the
// reasoning goes out before the message ends.
TEST(Harmony, SplitterMatchesTheWholeParseAtEveryCut) {
  // A header as long as one may be (its <|message|> at byte 1020 of at most 1024), then one
  // byte longer: a piece that ends inside that <|message|> must not decide for plain text.
  const std::string longest =
      "<|channel|>analysis" + std::string(1001, ' ') + "<|message|>x<|end|>";
  const std::string too_long = "<|channel|>analysis" + std::string(1006, ' ') + "<|message|>x";
  for (std::string_view text : {kAnswer, kCall, std::string_view("plain text <|end|>"),
                                std::string_view("<|channel|>final<|message|>a <|en b<|end|>"),
                                std::string_view(longest), std::string_view(too_long)}) {
    for (const bool in_content : {false, true}) {
      const HarmonyOutput whole = ParseHarmony(text, in_content);
      for (size_t piece = 1; piece <= text.size(); ++piece) {
        HarmonySplitter s(in_content);
        std::string reasoning, content;
        for (size_t at = 0; at < text.size(); at += piece) {
          const ReasoningOutput o = s.Push(text.substr(at, piece));
          reasoning += o.reasoning;
          content += o.content;
        }
        const HarmonyOutput rest = s.Finish();
        reasoning += rest.reasoning;
        content += rest.content;
        EXPECT_EQ(reasoning, whole.reasoning) << text << " piece " << piece;
        EXPECT_EQ(content, whole.content) << text << " piece " << piece;
        ASSERT_EQ(rest.calls.size(), whole.calls.size()) << text << " piece " << piece;
        for (size_t i = 0; i < rest.calls.size(); ++i) {
          EXPECT_EQ(rest.calls[i].name, whole.calls[i].name);
          EXPECT_EQ(rest.calls[i].arguments, whole.calls[i].arguments);
        }
      }
    }
  }
  EXPECT_EQ(ParseHarmony(longest).reasoning, "x");
  EXPECT_EQ(ParseHarmony(too_long).content, too_long);
  // Reasoning streams: a token's text goes out at once, but a possible "<|end|>" waits.
  HarmonySplitter s;
  EXPECT_EQ(s.Push("<|channel|>analysis<|message|>").reasoning, "");
  EXPECT_EQ(s.Push("Think").reasoning, "Think");
  EXPECT_EQ(s.Push("ing<|e").reasoning, "ing");
  const ReasoningOutput o = s.Push("nd|><|start|>assistant<|channel|>final<|message|>Hi");
  EXPECT_EQ(o.reasoning, "");
  EXPECT_EQ(o.content, "Hi");
}

}  // namespace
}  // namespace mt::server
