// Thinking models (Qwen3, DeepSeek-R1) write their reasoning first, between <think> and
// </think>. As llama-server (--reasoning-format deepseek, its default) and vLLM's reasoning
// parsers do, the server returns it apart from the answer, as message.reasoning_content:
//   "<think>\nLet me see.\n</think>\n\nParis." -> reasoning "Let me see.", content "Paris."
// Whitespace around the reasoning and before the content is dropped. A text that does not
// start with <think> (after whitespace) is all content; one whose </think> never comes (cut
// short) is all reasoning. `open`: the prompt already opened the block (ChatPrompt::
// thinking_open), so the text starts as reasoning, without a <think> of its own.
#pragma once

#include <string>
#include <string_view>

namespace mt::server {

struct ReasoningOutput {
  std::string reasoning;
  std::string content;
  bool thought = false;  // the text started with <think>
};
ReasoningOutput SplitReasoning(std::string_view text, bool open = false);

// The same for a stream: Push hands back what can go out now, as reasoning or content; text
// that may still turn out to be a tag, or whitespace that may turn out to be dropped, is
// held. The pieces add up to SplitReasoning's. Not thread-safe.
class ReasoningSplitter {
 public:
  explicit ReasoningSplitter(bool open = false)
      : state_(open ? State::kReasoning : State::kStart), thought_(open) {}
  ReasoningOutput Push(std::string_view text);
  ReasoningOutput Finish();

 private:
  enum class State { kStart, kReasoning, kContentStart, kContent };
  ReasoningOutput Drain(bool final);
  State state_;
  std::string held_;
  bool thought_;
  bool sent_reasoning_ = false;  // some reasoning went out (its leading whitespace is gone)
};

}  // namespace mt::server
