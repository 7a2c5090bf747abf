// gpt-oss's chat template (OpenAI's harmony format), rendered as jinja2 renders the template
// with Hugging Face's settings (trim_blocks, lstrip_blocks). The template is the model
// publisher's: tests/fixtures/chat_templates/openai-gpt-oss-120b.jinja; the comments below
// quote what of it each rule comes from.
#include <string>
#include <vector>

#include "tokenizer/chat_template_internal.h"

namespace mt::chat_internal {
namespace {

using OrderedJson = nlohmann::ordered_json;

bool Contains(std::string_view s, std::string_view needle) {
  return s.find(needle) != std::string_view::npos;
}

// `value[key]` when `value` is an object that has it; null (Jinja's undefined) otherwise.
const OrderedJson* Get(const OrderedJson* value, std::string_view key) {
  if (value == nullptr || !value->is_object()) return nullptr;
  const auto it = value->find(key);
  return it == value->end() ? nullptr : &*it;
}

// Jinja's truth of a value (undefined, null, false, 0, "", [] and {} are false).
bool Truthy(const OrderedJson* v) {
  if (v == nullptr) return false;
  switch (v->type()) {
    case OrderedJson::value_t::null:
      return false;
    case OrderedJson::value_t::boolean:
      return v->get<bool>();
    case OrderedJson::value_t::number_integer:
    case OrderedJson::value_t::number_unsigned:
    case OrderedJson::value_t::number_float:
      return v->get<double>() != 0.0;
    case OrderedJson::value_t::string:  // (json::empty() is false for every string)
      return !v->get_ref<const std::string&>().empty();
    case OrderedJson::value_t::array:
    case OrderedJson::value_t::object:
      return !v->empty();
    default:
      return true;
  }
}

bool IsString(const OrderedJson* v, std::string_view s) {
  return v != nullptr && v->is_string() && v->get_ref<const std::string&>() == s;
}

// Python's `name in (required or [])`: an element of a list, a substring of a string, a key
// of a mapping.
bool Required(const OrderedJson* required, const std::string& name) {
  if (!Truthy(required)) return false;
  if (required->is_array()) {
    for (const OrderedJson& r : *required) {
      if (IsString(&r, name)) return true;
    }
    return false;
  }
  if (required->is_string()) return Contains(required->get_ref<const std::string&>(), name);
  if (required->is_object()) return required->contains(name);
  return false;
}

// The elements Jinja iterates: those of a list; nothing for other values.
std::span<const OrderedJson> Elements(const OrderedJson* v) {
  if (v == nullptr || !v->is_array()) return {};
  const auto& a = v->get_ref<const OrderedJson::array_t&>();
  return {a.data(), a.size()};
}

// The macro render_typescript_type(param_spec). Whitespace the template leaves in its output
// (a "{{ }}" without "-" keeps the indentation before it) is reproduced.
std::string TypeScript(const OrderedJson* spec) {
  const OrderedJson* type = Get(spec, "type");
  const bool nullable = Truthy(Get(spec, "nullable"));
  if (IsString(type, "array")) {
    std::string out;
    const OrderedJson* items = Get(spec, "items");
    if (Truthy(items)) {
      const OrderedJson* item_type = Get(items, "type");
      if (IsString(item_type, "string")) {
        out = "string[]";
      } else if (IsString(item_type, "number") || IsString(item_type, "integer")) {
        out = "number[]";
      } else if (IsString(item_type, "boolean")) {
        out = "boolean[]";
      } else {
        const std::string inner = TypeScript(items);
        out = inner == "object | object" || PyLen(inner) > 50 ? "any[]" : inner + "[]";
      }
    } else {
      out = "any[]";
    }
    if (nullable) out += " | null";
    return out;
  }
  // A list of types: "string | number".
  if (type != nullptr && type->is_array() && !type->empty()) {
    std::string out;
    for (const OrderedJson& t : *type) {
      if (!out.empty()) out += " | ";
      out += PyStr(t);
    }
    return type->size() > 1 ? out : PyStr((*type)[0]);
  }
  if (const OrderedJson* one_of = Get(spec, "oneOf"); Truthy(one_of)) {
    // The template's has_object_variants is set inside a for loop, where Jinja's `set` does
    // not reach the outer scope: it stays false, and every variant is rendered.
    std::string out;
    const std::span<const OrderedJson> variants = Elements(one_of);
    for (size_t i = 0; i < variants.size(); ++i) {
      const OrderedJson* v = &variants[i];
      out += TypeScript(v);
      if (const OrderedJson* d = Get(v, "description"); Truthy(d)) out += "// " + PyStr(*d);
      if (const OrderedJson* d = Get(v, "default"); d != nullptr) {
        out += std::string(20, ' ') + "// default: " + HfToJson(*d);
      }
      if (i + 1 < variants.size()) out += " | \n";
    }
    return out;
  }
  if (IsString(type, "string")) {
    if (const OrderedJson* e = Get(spec, "enum"); Truthy(e)) {
      std::string out = "\"";
      const std::span<const OrderedJson> values = Elements(e);
      for (size_t i = 0; i < values.size(); ++i) {
        if (i > 0) out += "\" | \"";
        out += PyStr(values[i]);
      }
      return out + "\"";
    }
    return nullable ? "string | null" : "string";
  }
  if (IsString(type, "number") || IsString(type, "integer")) return "number";
  if (IsString(type, "boolean")) return "boolean";
  if (IsString(type, "object")) {
    const OrderedJson* properties = Get(spec, "properties");
    if (!Truthy(properties) || !properties->is_object()) return "object";
    const OrderedJson* required = Get(spec, "required");
    std::string out = "{\n";
    size_t i = 0;
    for (const auto& [name, prop] : properties->items()) {
      if (i++ > 0) out += ", ";
      out += name;
      if (!Required(required, name)) out += "?";
      // "{{- ": " }}" then a line break and 16 spaces before "{{ render_typescript_type(...) }}".
      out += ": \n" + std::string(16, ' ') + TypeScript(&prop);
    }
    return out + "}";
  }
  return "any";
}

// The macro render_tool_namespace("functions", tools).
std::string ToolNamespace(const OrderedJson& tools) {
  std::string out = "## functions\n\nnamespace functions {\n\n";
  for (const OrderedJson& entry : tools) {
    const OrderedJson* tool = Get(&entry, "function");
    const OrderedJson* description = Get(tool, "description");
    const OrderedJson* name = Get(tool, "name");
    // (Jinja fails on a missing description or name; they render empty here.)
    out += "// " + (description != nullptr ? PyStr(*description) : "") + "\n";
    out += "type " + (name != nullptr ? PyStr(*name) : "") + " = ";
    const OrderedJson* parameters = Get(tool, "parameters");
    const OrderedJson* properties = Get(parameters, "properties");
    if (!Truthy(parameters) || !Truthy(properties) || !properties->is_object()) {
      out += "() => any;\n\n";
      continue;
    }
    out += "(_: {\n";
    const OrderedJson* required = Get(parameters, "required");
    for (const auto& [param, spec] : properties->items()) {
      if (const OrderedJson* d = Get(&spec, "description"); Truthy(d)) {
        out += "// " + PyStr(*d) + "\n";
      }
      out += param;
      if (!Required(required, param)) out += "?";
      out += ": " + TypeScript(&spec);
      if (const OrderedJson* d = Get(&spec, "default"); d != nullptr) {
        if (Truthy(Get(&spec, "enum"))) {
          out += ", // default: " + PyStr(*d);
        } else if (Truthy(Get(&spec, "oneOf"))) {
          out += "// default: " + PyStr(*d);
        } else {
          out += ", // default: " + HfToJson(*d);
        }
      }
      out += ",\n";
    }
    out += "}) => any;\n\n";
  }
  return out + "} // namespace functions";
}

constexpr std::string_view kAnalysisTag = "<|channel|>analysis<|message|>";
constexpr std::string_view kFinalTag = "<|channel|>final<|message|>";

}  // namespace

Result<ChatPrompt> RenderHarmony(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                 const OrderedJson& tools, const ChatTemplateKwargs& kwargs,
                                 std::string_view date) {
  ChatPrompt p;
  std::string& text = p.text;
  const bool has_tools = !tools.empty();
  // build_system_message() (model_identity and builtin_tools are not variables here).
  text += "<|start|>system<|message|>";
  text += "You are ChatGPT, a large language model trained by OpenAI.\n";
  text += "Knowledge cutoff: 2024-06\n";
  text += "Current date: " + std::string(date) + "\n\n";
  text += "Reasoning: " + kwargs.reasoning_effort.value_or("medium") + "\n\n";
  text +=
      "# Valid channels: analysis, commentary, final. Channel must be included for every "
      "message.";
  if (has_tools) text += "\nCalls to these tools must go to the commentary channel: 'functions'.";
  text += "<|end|>";
  // The first message, when it is the system's (moetier reads "developer" as "system"), is the
  // developer message's instructions.
  size_t first = 0;
  std::string_view developer;
  if (messages[0].role == "system" || messages[0].role == "developer") {
    developer = messages[0].content;
    first = 1;
  }
  if (!developer.empty() || has_tools) {
    text += "<|start|>developer<|message|>";
    if (!developer.empty()) text += "# Instructions\n\n" + std::string(developer) + "\n\n";
    if (has_tools) text += "# Tools\n\n" + ToolNamespace(tools);
    text += "<|end|>";
  }
  std::optional<std::string> last_call;  // the name tool results answer (last_tool_call.name)
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "assistant") {
      // The template's "thinking" is the message's reasoning_content.
      const std::optional<std::string>& thinking = m.reasoning_content;
      if (Contains(m.content, kAnalysisTag) || Contains(m.content, kFinalTag)) {
        return InvalidArgument(
            "chat: message {} (assistant) holds <|channel|> tags in its content; "
            "send the analysis as reasoning_content and the final answer as "
            "content",
            i);
      }
      if (thinking && (Contains(*thinking, kAnalysisTag) || Contains(*thinking, kFinalTag))) {
        return InvalidArgument(
            "chat: message {} (assistant) holds <|channel|> tags in its "
            "reasoning_content",
            i);
      }
      if (!m.tool_calls.empty()) {
        // The analysis before a call is kept only while no later answer (an assistant message
        // without tool calls) ends the run; one call per message (the first) is rendered.
        bool later_answer = false;
        for (size_t j = i + 1; j < messages.size(); ++j) {
          later_answer |= messages[j].role == "assistant" && messages[j].tool_calls.empty();
        }
        const bool has_thinking = thinking && !thinking->empty();
        if (!m.content.empty() && has_thinking) {
          return InvalidArgument(
              "chat: message {} (assistant) has tool calls with both content "
              "and reasoning_content; gpt-oss's template takes one of them",
              i);
        }
        if (!later_answer && (!m.content.empty() || has_thinking)) {
          text += "<|start|>assistant<|channel|>analysis<|message|>";
          text += m.content.empty() ? *thinking : m.content;
          text += "<|end|>";
        }
        const ChatToolCall& call = m.tool_calls[0];
        text += "<|start|>assistant to=functions." + call.name + "<|channel|>commentary json";
        text += "<|message|>";
        // `tool_call.arguments|tojson`: the arguments as a mapping (as Hugging Face clients
        // give them); text that is not JSON stays a string.
        const std::optional<OrderedJson> args = ParseArguments(call.arguments);
        text += HfToJson(args ? *args : OrderedJson(call.arguments));
        text += "<|call|>";
        last_call = call.name;
      } else if (i + 1 == messages.size() && !add_generation_prompt) {
        // A conversation that ends with the answer (training): its reasoning, and <|return|>.
        if (thinking)
          text += "<|start|>assistant<|channel|>analysis<|message|>" + *thinking + "<|end|>";
        text += "<|start|>assistant<|channel|>final<|message|>" + m.content + "<|return|>";
      } else {
        // Past reasoning is dropped.
        text += "<|start|>assistant<|channel|>final<|message|>" + m.content + "<|end|>";
        last_call.reset();
      }
    } else if (m.role == "tool") {
      if (!last_call) {
        return InvalidArgument(
            "chat: message {} has role 'tool', but no assistant message with "
            "a tool call comes before it",
            i);
      }
      text += "<|start|>functions." + *last_call + " to=assistant<|channel|>commentary<|message|>";
      text += HfToJson(OrderedJson(m.content));  // `message.content|tojson`
      text += "<|end|>";
    } else if (m.role == "user") {
      text += "<|start|>user<|message|>" + m.content + "<|end|>";
    }
    // Other roles (a later system message) are not rendered.
  }
  if (add_generation_prompt) text += "<|start|>assistant";
  return p;
}

}  // namespace mt::chat_internal
