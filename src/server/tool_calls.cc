#include "server/tool_calls.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "base/json_depth.h"
#include "grammar/json_schema.h"
#include "server/tag_scan.h"

namespace mt::server {
namespace {

constexpr std::string_view kOpen = kToolCallOpen;
constexpr std::string_view kClose = "</tool_call>";

// One block's JSON: {"name": "...", "arguments": {...}}; false when it is anything else.
bool ParseCall(std::string_view body, ApiToolCall* out) {
  const auto j = ParseJsonWithinDepth<nlohmann::ordered_json>(body);
  if (!j.is_object()) return false;
  const auto name = j.find("name");
  const auto arguments = j.find("arguments");
  if (name == j.end() || !name->is_string() || arguments == j.end() || !arguments->is_object()) {
    return false;
  }
  out->name = name->get<std::string>();
  // The arguments as compact JSON text, in the model's key order; bytes that are not UTF-8
  // become U+FFFD rather than throwing.
  out->arguments = arguments->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return true;
}

// The text of `s` between `open` at `*pos` (after whitespace) and the next `close`; moves
// *pos past it. False when `open` does not come next or `close` never comes.
bool TakeTagged(std::string_view s, size_t* pos, std::string_view open, std::string_view close,
                std::string_view* inside) {
  size_t p = *pos;
  while (p < s.size() && IsAsciiSpace(s[p])) ++p;
  if (s.substr(p, open.size()) != open) return false;
  const size_t end = s.find(close, p + open.size());
  if (end == std::string_view::npos) return false;
  *inside = s.substr(p + open.size(), end - p - open.size());
  *pos = end + close.size();
  return true;
}

// One GLM block: "NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>..." ; false when it is
// anything else.
bool ParseGlmCall(std::string_view body, ApiToolCall* out) {
  const size_t name_end = std::min(body.find('\n'), body.find("<arg_key>"));
  std::string_view name = body.substr(0, name_end);
  while (!name.empty() && IsAsciiSpace(name.front())) name.remove_prefix(1);
  while (!name.empty() && IsAsciiSpace(name.back())) name.remove_suffix(1);
  if (name.empty() || name.find('<') != std::string_view::npos) return false;
  nlohmann::ordered_json args = nlohmann::ordered_json::object();
  size_t pos = name_end == std::string_view::npos ? body.size() : name_end;
  std::string_view key, value;
  while (TakeTagged(body, &pos, "<arg_key>", "</arg_key>", &key)) {
    if (!TakeTagged(body, &pos, "<arg_value>", "</arg_value>", &value)) return false;
    auto parsed = ParseJsonWithinDepth<nlohmann::ordered_json>(value);
    args[std::string(key)] = parsed.is_discarded() ? nlohmann::ordered_json(value) : parsed;
  }
  while (pos < body.size() && IsAsciiSpace(body[pos])) ++pos;
  if (pos != body.size()) return false;  // something that is not an argument
  out->name = std::string(name);
  out->arguments = args.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return true;
}

}  // namespace

ToolCallOutput ParseToolCalls(std::string_view text, ToolCallSyntax syntax) {
  const size_t first = text.find(kOpen);
  if (first == std::string_view::npos) return {std::string(text), {}};
  ToolCallOutput out;
  out.content = std::string(text.substr(0, first));
  size_t pos = first;
  while (pos < text.size()) {
    if (IsAsciiSpace(text[pos])) {
      ++pos;
      continue;
    }
    if (text.substr(pos, kOpen.size()) != kOpen) break;  // text after the calls: dropped
    const size_t body = pos + kOpen.size();
    const size_t end = text.find(kClose, body);
    ApiToolCall call;
    const std::string_view block =
        text.substr(body, end == std::string_view::npos ? end : end - body);
    // (A GLM block must be closed: its name alone would parse.)
    const bool ok = syntax == ToolCallSyntax::kGlm45
                        ? end != std::string_view::npos && ParseGlmCall(block, &call)
                        : ParseCall(block, &call);
    if (!ok) {
      // A last block cut short (max_tokens) after whole calls: those calls, the rest dropped
      // (finish_reason "length" says so).
      if (end == std::string_view::npos && !out.calls.empty()) break;
      return {std::string(text), {}};
    }
    out.calls.push_back(std::move(call));
    pos = end == std::string_view::npos ? text.size() : end + kClose.size();
  }
  return out;
}

std::string ToolCallSplitter::Push(std::string_view text) {
  if (!calls_.empty()) {
    calls_ += text;
    return "";
  }
  held_ += text;
  if (const size_t open = held_.find(kOpen); open != std::string::npos) {
    calls_ = held_.substr(open);
    held_.resize(open);
    return std::exchange(held_, "");
  }
  // Hold the longest tail that "<tool_call>" could still begin with.
  const size_t keep = PartialTagLength(held_, kOpen);
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

ToolCallOutput ToolCallSplitter::Finish() {
  if (calls_.empty()) return {std::exchange(held_, ""), {}};
  ToolCallOutput parsed = ParseToolCalls(calls_, syntax_);
  if (parsed.calls.empty()) return {std::exchange(calls_, ""), {}};
  calls_.clear();
  return {"", std::move(parsed.calls)};
}

Result<std::string> ToolCallGbnf(std::span<const ApiTool> tools, std::string_view only,
                                 bool parallel, bool after_open_tag,
                                 const nlohmann::ordered_json* answer_schema) {
  std::vector<nlohmann::ordered_json> schemas;
  std::vector<std::string> names;
  std::string alternatives;
  for (size_t i = 0; i < tools.size(); ++i) {
    const ApiTool& t = tools[i];
    if (!only.empty() && t.name != only) continue;
    // Each schema alone first, so that an error names its tool.
    if (Result<std::string> one = grammar::JsonSchemaToGbnf(t.parameters); !one.ok()) {
      return one.status().WithContext(fmt::format("tools[{}] ({})", i, t.name));
    }
    schemas.push_back(t.parameters);
    names.push_back(fmt::format("args-{}", i));
    if (!alternatives.empty()) alternatives += " | ";
    // The call exactly as the chat template renders one (names are [a-zA-Z0-9_-]), less
    // its opening tag.
    alternatives += fmt::format(R"("\n{{\"name\": \"{}\", \"arguments\": " {} "}}\n</tool_call>")",
                                t.name, names.back());
  }
  const std::string call = R"("<tool_call>" ( )" + alternatives + " )";
  const std::string first = after_open_tag ? "( " + alternatives + " )" : call;
  std::string root = parallel ? fmt::format(R"({} ( "\n" {} )*)", first, call) : first;
  if (answer_schema != nullptr && !after_open_tag) {
    if (Result<std::string> one = grammar::JsonSchemaToGbnf(*answer_schema); !one.ok()) {
      return one.status().WithContext("the response format");
    }
    schemas.push_back(*answer_schema);
    names.push_back("answer");
    root = fmt::format("( {} ) | answer", root);
  }
  return grammar::JsonSchemasToGbnf(schemas, names, root);
}

}  // namespace mt::server
