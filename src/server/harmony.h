// What a gpt-oss model writes (OpenAI's harmony format), read back as OpenAI's message
// fields. After the prompt's "<|start|>assistant" the model writes messages
//   [header]<|message|>{body}<|end|><|start|>assistant[header]<|message|>{body}...
// and stops at <|return|> (an answer) or <|call|> (a tool call), end-of-generation tokens
// whose text is not part of the output. A header names the channel, "<|channel|>analysis",
// "<|channel|>final" or "<|channel|>commentary", and for a tool call its recipient,
// " to=functions.NAME", before or after the channel, then the content type (" json" or
// " <|constrain|>json"). The bodies become:
//   analysis                      -> reasoning_content (bodies of several joined as written)
//   final, commentary (no "to=")  -> content
//   commentary to=functions.NAME  -> a tool call NAME with the body as its arguments (compact
//                                    JSON when the body is JSON, else the body as written);
//                                    another recipient ("browser.search") is the call's name.
// Text that does not start as a header ("<|channel|>", "<|start|>", " to=") is content,
// all of it. With `reasoning_in_content` (--reasoning-format none) an analysis message stays
// in the content as the model wrote it, tags included.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "server/api.h"
#include "server/reasoning.h"

namespace mt::server {

struct HarmonyOutput {
  std::string reasoning;
  std::string content;
  std::vector<ApiToolCall> calls;  // ids left empty
  bool thought = false;            // an analysis message came
};
HarmonyOutput ParseHarmony(std::string_view text, bool reasoning_in_content = false);

// The same for a stream: Push hands back the reasoning and content that can go out now (a
// header waits for its "<|message|>"; text that may be the start of "<|end|>" is held); tool
// calls wait for Finish. The pieces add up to ParseHarmony's. Not thread-safe.
class HarmonySplitter {
 public:
  explicit HarmonySplitter(bool reasoning_in_content = false)
      : reasoning_in_content_(reasoning_in_content) {}
  ReasoningOutput Push(std::string_view text);
  // What is still held, and every tool call.
  HarmonyOutput Finish();

 private:
  enum class State { kHeader, kBody, kPlain };
  // The message whose body is being read.
  enum class Channel { kAnalysis, kContent, kCall };
  ReasoningOutput Drain(bool final);
  void EndBody();  // the message whose body was read ends (a call is complete)

  const bool reasoning_in_content_;
  State state_ = State::kHeader;
  Channel channel_ = Channel::kContent;
  std::string held_;       // text not yet handed out
  std::string call_name_;  // kCall: the recipient
  std::string call_body_;  // kCall: the arguments so far
  std::vector<ApiToolCall> calls_;
  bool thought_ = false;
};

}  // namespace mt::server
