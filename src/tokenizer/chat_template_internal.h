// The renderers of chat_template.cc that live in files of their own (one format per file),
// and the Python string behaviour they share. Not part of the tokenizer's interface.
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"
#include "tokenizer/chat_template.h"

namespace mt::chat_internal {

// gpt-oss's chat template (chat_template_harmony.cc). `date` is "YYYY-MM-DD". Errors are the
// template's raise_exception cases, as InvalidArgument.
Result<ChatPrompt> RenderHarmony(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                 const nlohmann::ordered_json& tools,
                                 const ChatTemplateKwargs& kwargs, std::string_view date);

// GLM-4.5/4.6's chat template (chat_template_glm45.cc).
Result<ChatPrompt> RenderGlm45(std::span<const ChatMessage> messages, bool add_generation_prompt,
                               const nlohmann::ordered_json& tools,
                               const ChatTemplateKwargs& kwargs);

// Python's str() of a JSON value as Jinja prints it in "+" and join: a string as is, an
// integer in decimal, a float as repr, True/False/None; arrays and objects as HfToJson (Python
// would print its repr, with single quotes: a difference, for schemas no model ships).
std::string PyStr(const nlohmann::ordered_json& value);

// Python's str.strip() with no argument: the code points str.isspace() takes (ASCII
// whitespace, U+001C-U+001F, U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F,
// U+205F, U+3000) removed from both ends.
std::string_view PyStrip(std::string_view s);

// Python's len() of a str: code points (a byte that is not valid UTF-8 counts as one).
size_t PyLen(std::string_view s);

// A tool call's arguments as the template gets them: the JSON value of `arguments`, or
// nullopt when it is not JSON.
std::optional<nlohmann::ordered_json> ParseArguments(std::string_view arguments);

}  // namespace mt::chat_internal
