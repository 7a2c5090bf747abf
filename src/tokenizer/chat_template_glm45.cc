// GLM-4.5/4.6's chat template, rendered as jinja2 renders it with Hugging Face's settings
// (trim_blocks, lstrip_blocks). The template is the model publisher's:
// tests/fixtures/chat_templates/GLM-4.6.jinja (GLM-4.5's renders the same for the messages
// moetier takes: string contents, arguments that are JSON objects).
#include <string>

#include "tokenizer/chat_template_internal.h"

namespace mt::chat_internal {
namespace {

using OrderedJson = nlohmann::ordered_json;

std::string_view LStripNewlines(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  return s;
}

std::string_view RStripNewlines(std::string_view s) {
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

// Jinja's falsy values: null, false, 0, "", [] and {}.
bool IsFalsy(const OrderedJson& v) {
  if (v.is_null()) return true;
  if (v.is_boolean()) return !v.get<bool>();
  if (v.is_number()) return v.get<double>() == 0.0;
  if (v.is_string()) return v.get_ref<const std::string&>().empty();
  if (v.is_array() || v.is_object()) return v.empty();
  return false;
}

bool EndsWith(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

constexpr std::string_view kToolsIntro =
    "<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query."
    "\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n";
constexpr std::string_view kToolsOutro =
    "</tools>\n\nFor each function call, output the function name and arguments within the "
    "following XML format:\n<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n"
    "<arg_value>{arg-value-1}</arg_value>\n<arg_key>{arg-key-2}</arg_key>\n"
    "<arg_value>{arg-value-2}</arg_value>\n...\n</tool_call>";

}  // namespace

Result<ChatPrompt> RenderGlm45(std::span<const ChatMessage> messages, bool add_generation_prompt,
                               const OrderedJson& tools, const ChatTemplateKwargs& kwargs) {
  ChatPrompt p;
  std::string& text = p.text;
  // `enable_thinking is defined and not enable_thinking`.
  const bool no_think = kwargs.enable_thinking.has_value() && !*kwargs.enable_thinking;
  text += "[gMASK]<sop>";
  if (!tools.empty()) {
    text += kToolsIntro;
    for (const OrderedJson& tool : tools) text += HfToJson(tool) + "\n";
    text += kToolsOutro;
  }
  size_t last_user = messages.size();  // ns.last_user_index; none: -1
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role == "user") last_user = i;
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user") {
      text += "<|user|>\n" + m.content;
      if (no_think && !EndsWith(m.content, "/nothink")) text += "/nothink";
    } else if (m.role == "assistant") {
      text += "<|assistant|>";
      std::string_view content = m.content;
      std::string_view reasoning;
      if (m.reasoning_content) {
        reasoning = *m.reasoning_content;
      } else if (const size_t close = content.find("</think>"); close != std::string_view::npos) {
        // content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n'), and
        // content.split('</think>')[-1].lstrip('\n').
        reasoning = RStripNewlines(content.substr(0, close));
        if (const size_t open = reasoning.rfind("<think>"); open != std::string_view::npos) {
          reasoning.remove_prefix(open + 7);
        }
        reasoning = LStripNewlines(reasoning);
        content = LStripNewlines(content.substr(content.rfind("</think>") + 8));
      }
      // Reasoning only for turns after the last user message.
      const bool after_last_user = last_user == messages.size() || i > last_user;
      if (after_last_user && !reasoning.empty()) {
        text += "\n<think>" + std::string(PyStrip(reasoning)) + "</think>";
      } else {
        text += "\n<think></think>";
      }
      if (const std::string_view c = PyStrip(content); !c.empty()) text += "\n" + std::string(c);
      for (const ChatToolCall& call : m.tool_calls) {
        text += "\n<tool_call>" + call.name;
        // `tc.arguments or {}`, which must be a mapping; string values are printed as they
        // are, others as JSON.
        std::optional<OrderedJson> args = call.arguments.empty()
                                              ? std::optional<OrderedJson>(OrderedJson::object())
                                              : ParseArguments(call.arguments);
        if (args && IsFalsy(*args)) args = OrderedJson::object();  // `or {}`
        if (!args || !args->is_object()) {
          return InvalidArgument(
              "chat: message {} calls {} with arguments that are not a JSON "
              "object (GLM's template takes a mapping)",
              i, call.name);
        }
        for (const auto& [key, value] : args->items()) {
          text += "\n<arg_key>" + key + "</arg_key>\n<arg_value>";
          text += value.is_string() ? value.get_ref<const std::string&>() : HfToJson(value);
          text += "</arg_value>";
        }
        text += "\n</tool_call>";
      }
    } else if (m.role == "tool") {
      // A run of results shares one <|observation|>.
      if (i == 0 || messages[i - 1].role != "tool") text += "<|observation|>";
      text += "\n<tool_response>\n" + m.content + "\n</tool_response>";
    } else if (m.role == "system") {
      text += "<|system|>\n" + m.content;
    }
    // Other roles are not rendered.
  }
  if (add_generation_prompt) {
    text += "<|assistant|>";
    if (no_think) {
      text += "\n<think></think>";
    } else {
      p.may_think = true;  // GLM-4.5 is a hybrid: it opens <think> itself
    }
  }
  return p;
}

}  // namespace mt::chat_internal
