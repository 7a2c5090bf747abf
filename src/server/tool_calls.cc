#include "server/tool_calls.h"

#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "grammar/json_schema.h"
#include "server/tag_scan.h"

namespace mt::server {
namespace {

constexpr std::string_view kOpen = kToolCallOpen;
constexpr std::string_view kClose = "</tool_call>";

// One block's JSON: {"name": "...", "arguments": {...}}; false when it is anything else.
bool ParseCall(std::string_view body, ApiToolCall* out) {
  const auto j = nlohmann::ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return false;
  const auto name = j.find("name");
  const auto arguments = j.find("arguments");
  if (name == j.end() || !name->is_string() || arguments == j.end() ||
      !arguments->is_object()) {
    return false;
  }
  out->name = name->get<std::string>();
  // The arguments as compact JSON text, in the model's key order; bytes that are not UTF-8
  // become U+FFFD rather than throwing.
  out->arguments = arguments->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return true;
}

}  // namespace

ToolCallOutput ParseToolCalls(std::string_view text) {
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
    if (!ParseCall(text.substr(body, end == std::string_view::npos ? end : end - body), &call)) {
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
  ToolCallOutput parsed = ParseToolCalls(calls_);
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
