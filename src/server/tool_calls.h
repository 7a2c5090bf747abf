// Function calling in the format of Qwen's chat template (Hermes style): after optional
// content, the model writes each call as
//   <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>
// and several calls follow each other, one per line. GLM-4.5's template (kGlm45) has the same
// blocks with another body:
//   <tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>
// whose arguments become a JSON object: a value that parses as JSON is that value, any
// other the string as written (as llama.cpp reads them). The chat template renders the tools
// into the prompt (tokenizer/chat_template.h); this file reads the calls back out of the
// generated text, and writes the grammar that forces them (tool_choice required or named;
// Hermes blocks only).
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "server/api.h"

namespace mt::server {

// What a finished output holds: the content before the first call block and the calls
// (ids left empty). Like vLLM's hermes parser, a block that is not a JSON object with a
// string "name" and an object "arguments" makes the whole text content, with no calls;
// except a last block left open (generation cut short) after whole calls: it is dropped.
// A GLM block is malformed when it has no name or its <arg_key>/<arg_value> pairs are not
// whole.
enum class ToolCallSyntax { kHermes, kGlm45 };
struct ToolCallOutput {
  std::string content;
  std::vector<ApiToolCall> calls;
};
ToolCallOutput ParseToolCalls(std::string_view text,
                              ToolCallSyntax syntax = ToolCallSyntax::kHermes);

// The same for a stream: Push hands back the content that can go out now (text that may
// be the start of "<tool_call>" is held until it is clear); from the first call block on,
// everything waits for Finish, which parses it. Not thread-safe.
class ToolCallSplitter {
 public:
  explicit ToolCallSplitter(ToolCallSyntax syntax = ToolCallSyntax::kHermes) : syntax_(syntax) {}
  std::string Push(std::string_view text);
  // The content still held (when the blocks do not parse, all of them) and the calls.
  ToolCallOutput Finish();

 private:
  ToolCallSyntax syntax_;
  std::string held_;   // content that may begin a call block
  std::string calls_;  // from the first "<tool_call>" on
};

// GBNF for outputs that are only calls: of `only` (empty: any of `tools`), one call, or
// with `parallel` one or more, each call's arguments a document of its function's
// parameters schema. `after_open_tag`: for what follows the first "<tool_call>" (a lazy
// grammar, triggered by it when tool_choice is auto). `answer_schema` (not with
// after_open_tag): the output may instead be one document of it (tool_choice auto with a
// JSON response format). Errors: a schema the grammar cannot express (InvalidArgument naming
// the tool, e.g. "tools[1] (get_weather): json_schema: unsupported keyword ...").
inline constexpr std::string_view kToolCallOpen = "<tool_call>";
Result<std::string> ToolCallGbnf(std::span<const ApiTool> tools, std::string_view only,
                                 bool parallel, bool after_open_tag = false,
                                 const nlohmann::ordered_json* answer_schema = nullptr);

}  // namespace mt::server
