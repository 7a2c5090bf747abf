#include "server/reasoning.h"

#include <gtest/gtest.h>

#include "tokenizer/chat_template.h"

namespace mt::server {
namespace {

TEST(Reasoning, SplitsThinkingFromTheAnswer) {
  ReasoningOutput r = SplitReasoning("<think>\nLet me see.\nIt is  Paris.\n</think>\n\nParis.");
  EXPECT_TRUE(r.thought);
  EXPECT_EQ(r.reasoning, "Let me see.\nIt is  Paris.");
  EXPECT_EQ(r.content, "Paris.");
  r = SplitReasoning("\n <think></think>Hi");
  EXPECT_TRUE(r.thought);
  EXPECT_EQ(r.reasoning, "");
  EXPECT_EQ(r.content, "Hi");
  r = SplitReasoning("<think>\nstill thinking when max_tokens came ");
  EXPECT_TRUE(r.thought);
  EXPECT_EQ(r.reasoning, "still thinking when max_tokens came");
  EXPECT_EQ(r.content, "");
  // The prompt opened the block (a template that always thinks): no <think> of its own.
  r = SplitReasoning("\nLet me see.\n</think>\n\nParis.", /*open=*/true);
  EXPECT_TRUE(r.thought);
  EXPECT_EQ(r.reasoning, "Let me see.");
  EXPECT_EQ(r.content, "Paris.");
  EXPECT_EQ(SplitReasoning("cut short", /*open=*/true).reasoning, "cut short");
  for (const char* plain : {"Paris.", " no <think> here", "<thin", ""}) {
    r = SplitReasoning(plain);
    EXPECT_FALSE(r.thought) << plain;
    EXPECT_EQ(r.reasoning, "") << plain;
    EXPECT_EQ(r.content, plain);
  }
}

// DeepSeek-R1's template opens the block in the prompt, so its answer is split as an open
// one; DeepSeek-V3's (the deepseek2 default) does not.
TEST(Reasoning, DeepseekR1AnswersStartInsideTheBlock) {
  const ChatMessage hi[] = {{"user", "\u4f60\u597d"}};
  const ChatTemplate r1 = ChatTemplate::ForModel(DeepseekR1ChatTemplate(), "deepseek2", "").value();
  const ChatPrompt p = r1.Render(hi, true).value();
  ASSERT_TRUE(p.thinking_open);
  ReasoningOutput r =
      SplitReasoning("\u55ef\uff0c\u7528\u6237\u3002\n</think>\n\nHello!", p.thinking_open);
  EXPECT_EQ(r.reasoning, "\u55ef\uff0c\u7528\u6237\u3002");
  EXPECT_EQ(r.content, "Hello!");
  const ChatTemplate v3 = ChatTemplate::ForModel("", "deepseek2", "").value();
  const ChatPrompt q = v3.Render(hi, true).value();
  EXPECT_FALSE(q.thinking_open);
  r = SplitReasoning("Hello!", q.thinking_open);
  EXPECT_FALSE(r.thought);
  EXPECT_EQ(r.content, "Hello!");
}

// Streamed in pieces of every size, the deltas add up to the whole split.
TEST(Reasoning, SplitterMatchesTheWholeSplitAtEveryCut) {
  for (std::string_view text :
       {std::string_view("<think>\nLet me see. </thin no.\n\n</think>\n\n  Paris. <think>x"),
        std::string_view("  \n<think>  a  b  "), std::string_view("Plain  text </think>"),
        std::string_view("<thinking>x"), std::string_view("<think>"), std::string_view("   "),
        std::string_view("\n still </think>\n answer")}) {
    for (bool open : {false, true}) {
      const ReasoningOutput whole = SplitReasoning(text, open);
      for (size_t piece = 1; piece <= text.size(); ++piece) {
        ReasoningSplitter s(open);
        ReasoningOutput sum;
        auto add = [&](const ReasoningOutput& d) {
          sum.reasoning += d.reasoning;
          sum.content += d.content;
          sum.thought = d.thought;
        };
        for (size_t at = 0; at < text.size(); at += piece) add(s.Push(text.substr(at, piece)));
        add(s.Finish());
        EXPECT_EQ(sum.reasoning, whole.reasoning) << text << " / piece " << piece;
        EXPECT_EQ(sum.content, whole.content) << text << " / piece " << piece;
        EXPECT_EQ(sum.thought, whole.thought) << text << " / piece " << piece;
      }
    }
  }
  ReasoningSplitter s;
  EXPECT_EQ(s.Push("<thi").reasoning, "");          // undecided
  EXPECT_EQ(s.Push("nk>\nOne ").reasoning, "One");  // the space may precede </think>: held
  EXPECT_EQ(s.Push("two</th").reasoning, " two");
  const ReasoningOutput end = s.Push("ink>\n\nAnswer");
  EXPECT_EQ(end.reasoning, "");
  EXPECT_EQ(end.content, "Answer");
}

}  // namespace
}  // namespace mt::server
