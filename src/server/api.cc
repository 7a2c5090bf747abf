#include "server/api.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/json_depth.h"
#include "grammar/json_schema.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/utf8.h"

namespace mt::server {
namespace {

using json = nlohmann::json;
using Error = std::optional<ApiError>;

constexpr size_t kMaxStops = 16;
constexpr size_t kMaxPrompts = 64;   // prompts in one completions request
constexpr int64_t kMaxChoices = 64;  // prompts x n
constexpr int64_t kMaxTokensLimit = int64_t{1} << 31;
constexpr int64_t kMaxLogprobs = 20;  // alternatives per token, as vLLM's default limit

ApiError Invalid(std::string param, std::string message, std::string code = "") {
  ApiError e;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

const char* TypeName(const json& v) { return v.type_name(); }

// The field, or null when absent (null and absent mean the same to OpenAI).
const json& Field(const json& body, const char* key) {
  static const json kNull;
  auto it = body.find(key);
  return it == body.end() ? kNull : *it;
}

Error GetBool(const json& body, const char* key, bool* out) {
  const json& v = Field(body, key);
  if (v.is_null()) return std::nullopt;
  if (!v.is_boolean())
    return Invalid(key, fmt::format("{} must be a boolean, not {}", key, TypeName(v)));
  *out = v.get<bool>();
  return std::nullopt;
}

Error GetNumber(const json& body, const char* key, double lo, double hi, float* out) {
  const json& v = Field(body, key);
  if (v.is_null()) return std::nullopt;
  if (!v.is_number())
    return Invalid(key, fmt::format("{} must be a number, not {}", key, TypeName(v)));
  const double d = v.get<double>();
  if (!(d >= lo && d <= hi)) {
    return Invalid(key, fmt::format("{} must be in [{}, {}], not {}", key, lo, hi, d));
  }
  *out = static_cast<float>(d);
  return std::nullopt;
}

// An integer in [lo, hi]. Floats with an integral value (5.0) count as integers.
Error GetInteger(const json& v, const std::string& name, int64_t lo, int64_t hi, int64_t* out) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) {
      return Invalid(name, fmt::format("{} must be in [{}, {}], not {}", name, lo, hi, u));
    }
    *out = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    *out = v.get<int64_t>();
  } else if (v.is_number_float() && std::trunc(v.get<double>()) == v.get<double>() &&
             std::fabs(v.get<double>()) < 9e15) {
    *out = static_cast<int64_t>(v.get<double>());
  } else {
    return Invalid(name, fmt::format("{} must be an integer, not {}", name,
                                     v.is_number() ? fmt::format("{}", v.get<double>())
                                                   : std::string(TypeName(v))));
  }
  if (*out < lo || *out > hi) {
    return Invalid(name, fmt::format("{} must be in [{}, {}], not {}", name, lo, hi, *out));
  }
  return std::nullopt;
}

Error Unsupported(const char* key, std::string_view what) {
  return Invalid(key, fmt::format("{} is not supported by this server", what), "unsupported");
}

// One prompt: a string, or an array of token ids (`name` for messages).
Error ParseOnePrompt(const json& p, const std::string& name, ApiPrompt* out) {
  if (p.is_string()) {
    out->text = p.get<std::string>();
    return std::nullopt;
  }
  if (p.empty()) return Invalid("prompt", name + " must not be an empty array");
  out->is_tokens = true;
  out->tokens.reserve(p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    int64_t id = 0;
    if (Error e = GetInteger(p[i], fmt::format("{}[{}]", name, i), 0,
                             std::numeric_limits<int32_t>::max(), &id)) {
      e->param = "prompt";
      return e;
    }
    out->tokens.push_back(id);
  }
  return std::nullopt;
}

// OpenAI's suffix: the text after the completion (fill in the middle).
Error ParseSuffix(const json& body, ApiRequest* out) {
  const json& suffix = Field(body, "suffix");
  if (suffix.is_null()) return std::nullopt;
  if (!suffix.is_string()) {
    return Invalid("suffix", fmt::format("suffix must be a string, not {}", TypeName(suffix)));
  }
  out->suffix = suffix.get<std::string>();
  return std::nullopt;
}

// A string, an array of token ids, or a batch: an array of strings or of token-id arrays.
Error ParsePrompt(const json& body, ApiRequest* out) {
  const json& p = Field(body, "prompt");
  if (p.is_null()) return Invalid("prompt", "you must provide a prompt");
  if (!p.is_string() && !p.is_array()) {
    return Invalid("prompt",
                   fmt::format("prompt must be a string or an array, not {}", TypeName(p)));
  }
  if (p.is_array() && p.empty()) return Invalid("prompt", "prompt must not be an empty array");
  if (p.is_string() || !(p[0].is_string() || p[0].is_array())) {
    if (Error e = ParseOnePrompt(p, "prompt", &out->prompts.emplace_back())) return e;
    return ParseSuffix(body, out);
  }
  if (p.size() > kMaxPrompts) {
    return Invalid("prompt", fmt::format("prompt holds {} prompts; at most {} are allowed in one "
                                         "request",
                                         p.size(), kMaxPrompts));
  }
  for (size_t i = 0; i < p.size(); ++i) {
    const std::string name = fmt::format("prompt[{}]", i);
    if (!p[i].is_string() && !p[i].is_array()) {
      return Invalid("prompt", fmt::format("{} must be a string or an array of token ids, not {}",
                                           name, TypeName(p[i])));
    }
    if (Error e = ParseOnePrompt(p[i], name, &out->prompts.emplace_back())) return e;
  }
  return ParseSuffix(body, out);
}

Error ParseMessageToolCalls(const json& msg, size_t i, ApiMessage* out);

Error ParseMessages(const json& body, ApiRequest* out) {
  const json& m = Field(body, "messages");
  if (m.is_null()) return Invalid("messages", "you must provide messages");
  if (!m.is_array()) {
    return Invalid("messages", fmt::format("messages must be an array, not {}", TypeName(m)));
  }
  if (m.empty()) return Invalid("messages", "messages must not be empty");
  for (size_t i = 0; i < m.size(); ++i) {
    const json& msg = m[i];
    if (!msg.is_object()) {
      return Invalid("messages",
                     fmt::format("messages[{}] must be an object, not {}", i, TypeName(msg)));
    }
    const json& role = Field(msg, "role");
    if (!role.is_string() || role.get_ref<const std::string&>().empty()) {
      return Invalid("messages", fmt::format("messages[{}].role must be a non-empty string", i));
    }
    ApiMessage out_msg{role.get<std::string>(), ""};
    // OpenAI's newer name for the system role (its clients send it for some models); the
    // chat templates know only "system".
    if (out_msg.role == "developer") out_msg.role = "system";
    const json& content = Field(msg, "content");
    if (content.is_string()) {
      out_msg.content = content.get<std::string>();
    } else if (content.is_array()) {
      for (size_t k = 0; k < content.size(); ++k) {
        const json& part = content[k];
        const json& type = part.is_object() ? Field(part, "type") : part;
        if (!part.is_object() || !type.is_string()) {
          return Invalid("messages", fmt::format("messages[{}].content[{}] must be an object "
                                                 "with a type",
                                                 i, k));
        }
        if (type.get_ref<const std::string&>() != "text") {
          return Invalid("messages",
                         fmt::format("messages[{}].content[{}]: only text parts are supported, "
                                     "not '{}'",
                                     i, k, type.get_ref<const std::string&>()),
                         "unsupported");
        }
        const json& text = Field(part, "text");
        if (!text.is_string()) {
          return Invalid("messages",
                         fmt::format("messages[{}].content[{}].text must be a string", i, k));
        }
        out_msg.content += text.get_ref<const std::string&>();
      }
    } else if (!content.is_null()) {
      return Invalid("messages", fmt::format("messages[{}].content must be a string, an array "
                                             "of parts or null, not {}",
                                             i, TypeName(content)));
    }
    if (Error e = ParseMessageToolCalls(msg, i, &out_msg)) return e;
    // An assistant turn's reasoning sent back apart (as this server returns it).
    if (const json& r = Field(msg, "reasoning_content"); r.is_string()) {
      out_msg.reasoning_content = r.get<std::string>();
    } else if (!r.is_null()) {
      return Invalid("messages", fmt::format("messages[{}].reasoning_content must be a string "
                                             "or null, not {}",
                                             i, TypeName(r)));
    }
    out->messages.push_back(std::move(out_msg));
  }
  return std::nullopt;
}

// chat_template_kwargs (vLLM's and llama-server's): variables for the chat template, read as
// `moetier run --chat-template-kwargs` reads them (tokenizer/chat_template.h).
Error ParseTemplateKwargsField(const json& body, ApiRequest* out) {
  const json& kwargs = Field(body, "chat_template_kwargs");
  if (kwargs.is_null()) return std::nullopt;
  Result<ChatTemplateKwargs> k = ChatTemplateKwargsFromJson(kwargs);
  if (!k.ok()) return Invalid("chat_template_kwargs", k.status().message());
  out->enable_thinking = k->enable_thinking;  // unset: the server's default
  out->reasoning_effort = k->reasoning_effort;
  return std::nullopt;
}

// reasoning_effort (OpenAI's, for reasoning models): gpt-oss's template variable, unless
// chat_template_kwargs set it.
Error ParseReasoningEffortField(const json& body, ApiRequest* out) {
  const json& effort = Field(body, "reasoning_effort");
  if (effort.is_null() || out->reasoning_effort) return std::nullopt;
  if (!effort.is_string()) {
    return Invalid("reasoning_effort",
                   "reasoning_effort must be \"low\", \"medium\" or "
                   "\"high\"");
  }
  if (Status s = CheckReasoningEffort(effort.get<std::string>()); !s.ok()) {
    return Invalid("reasoning_effort", s.message());
  }
  out->reasoning_effort = effort.get<std::string>();
  return std::nullopt;
}

// A function name as OpenAI allows them: 1-64 of [a-zA-Z0-9_-].
bool IsFunctionName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

// An assistant message's tool_calls ([{id, type: "function", function: {name, arguments}}],
// arguments a JSON text) and a tool message's tool_call_id.
Error ParseMessageToolCalls(const json& msg, size_t i, ApiMessage* out) {
  const json& calls = Field(msg, "tool_calls");
  if (!calls.is_null()) {
    if (!calls.is_array() || (out->role != "assistant" && !calls.empty())) {
      return Invalid("messages", fmt::format("messages[{}].tool_calls must be an array, on an "
                                             "assistant message",
                                             i));
    }
    for (size_t k = 0; k < calls.size(); ++k) {
      const json& call = calls[k];
      const json& fn = call.is_object() ? Field(call, "function") : call;
      const json& name = fn.is_object() ? Field(fn, "name") : fn;
      const json& arguments = fn.is_object() ? Field(fn, "arguments") : fn;
      const json& id = call.is_object() ? Field(call, "id") : call;
      if (!fn.is_object() || !name.is_string() || !arguments.is_string() ||
          !(id.is_null() || id.is_string())) {
        return Invalid("messages", fmt::format("messages[{}].tool_calls[{}] must be {{id, type, "
                                               "function: {{name, arguments (a string)}}}}",
                                               i, k));
      }
      out->tool_calls.push_back({id.is_string() ? id.get<std::string>() : "",
                                 name.get<std::string>(), arguments.get<std::string>()});
    }
  }
  const json& id = Field(msg, "tool_call_id");
  if (!id.is_null() && !id.is_string()) {
    return Invalid("messages", fmt::format("messages[{}].tool_call_id must be a string", i));
  }
  return std::nullopt;
}

// tools ([{type: "function", function: {name, description, parameters}}]), tool_choice
// ("none", "auto", "required", {type: "function", function: {name}}) and
// parallel_tool_calls. The tools are read again from `raw` in key order: they are rendered
// into the prompt as the client wrote them.
Error ParseTools(const json& body, std::string_view raw, Endpoint endpoint, ApiRequest* out) {
  if (const json& f = Field(body, "functions"); !f.is_null() && !(f.is_array() && f.empty())) {
    return Unsupported("functions", "functions (the deprecated form; send tools)");
  }
  const json& tools = Field(body, "tools");
  const json& choice = Field(body, "tool_choice");
  if (Error e = GetBool(body, "parallel_tool_calls", &out->parallel_tool_calls)) return e;
  const bool any = tools.is_array() && !tools.empty();
  if (!tools.is_null() && !tools.is_array()) {
    return Invalid("tools", fmt::format("tools must be an array, not {}", TypeName(tools)));
  }
  if (any && endpoint != Endpoint::kChat) return Unsupported("tools", "tools in completions");
  out->tool_choice = any ? ToolChoice::kAuto : ToolChoice::kNone;
  if (choice.is_string()) {
    const std::string& c = choice.get_ref<const std::string&>();
    if (c == "none") {
      out->tool_choice = ToolChoice::kNone;
    } else if (c == "auto" || c == "required") {
      if (!any) return Invalid("tool_choice", fmt::format("tool_choice '{}' needs tools", c));
      out->tool_choice = c == "auto" ? ToolChoice::kAuto : ToolChoice::kRequired;
    } else {
      return Invalid("tool_choice", fmt::format("tool_choice must be none, auto, required or "
                                                "{{\"type\": \"function\", ...}}, not '{}'",
                                                c));
    }
  } else if (choice.is_object()) {
    const json& fn = Field(choice, "function");
    const json& name = fn.is_object() ? Field(fn, "name") : fn;
    if (Field(choice, "type") != "function" || !name.is_string()) {
      return Invalid("tool_choice",
                     "tool_choice must be {\"type\": \"function\", "
                     "\"function\": {\"name\": ...}}");
    }
    if (!any) {
      return Invalid("tool_choice", "tool_choice names a function, but there are no tools");
    }
    out->tool_choice = ToolChoice::kNamed;
    out->tool_choice_name = name.get<std::string>();
  } else if (!choice.is_null()) {
    return Invalid("tool_choice", fmt::format("tool_choice must be a string or an object, not {}",
                                              TypeName(choice)));
  }
  if (!any) return std::nullopt;
  const auto ordered = nlohmann::ordered_json::parse(raw, nullptr, /*allow_exceptions=*/false);
  const auto it = ordered.is_object() ? ordered.find("tools") : ordered.end();
  if (it == ordered.end() || !it->is_array() || it->size() != tools.size()) {
    return Invalid("tools", "tools appears twice in the body");
  }
  out->tools_json = *it;
  for (size_t i = 0; i < it->size(); ++i) {
    const nlohmann::ordered_json& tool = (*it)[i];
    const auto type = tool.is_object() ? tool.find("type") : tool.end();
    const auto fn = tool.is_object() ? tool.find("function") : tool.end();
    if (type == tool.end() || *type != "function" || fn == tool.end() || !fn->is_object()) {
      return Invalid("tools", fmt::format("tools[{}] must be {{\"type\": \"function\", "
                                          "\"function\": {{...}}}}",
                                          i));
    }
    const auto name = fn->find("name");
    if (name == fn->end() || !name->is_string() || !IsFunctionName(name->get<std::string>())) {
      return Invalid("tools", fmt::format("tools[{}].function.name must be 1-64 letters, digits, "
                                          "'_' or '-'",
                                          i));
    }
    ApiTool t;
    t.name = name->get<std::string>();
    for (const ApiTool& other : out->tools) {
      if (other.name == t.name) {
        return Invalid("tools", fmt::format("tools[{}]: a second function '{}'", i, t.name));
      }
    }
    // Arguments are a JSON object; no schema: any object.
    const auto params = fn->find("parameters");
    if (params != fn->end() && !params->is_object()) {
      return Invalid("tools", fmt::format("tools[{}].function.parameters must be an object "
                                          "(a JSON schema)",
                                          i));
    }
    t.parameters = params != fn->end() ? *params : nlohmann::ordered_json{{"type", "object"}};
    out->tools.push_back(std::move(t));
  }
  if (out->tool_choice == ToolChoice::kNamed) {
    const bool known = std::any_of(out->tools.begin(), out->tools.end(), [&](const ApiTool& t) {
      return t.name == out->tool_choice_name;
    });
    if (!known) {
      return Invalid("tool_choice", fmt::format("tool_choice names '{}', which is not among the "
                                                "tools",
                                                out->tool_choice_name));
    }
  }
  return std::nullopt;
}

Error ParseStop(const json& body, ApiRequest* out) {
  const json& s = Field(body, "stop");
  if (s.is_null()) return std::nullopt;
  if (s.is_string()) {
    if (!s.get_ref<const std::string&>().empty()) out->stop.push_back(s.get<std::string>());
    return std::nullopt;
  }
  if (!s.is_array()) {
    return Invalid(
        "stop", fmt::format("stop must be a string or an array of strings, not {}", TypeName(s)));
  }
  if (s.size() > kMaxStops) {
    return Invalid("stop",
                   fmt::format("stop has {} strings; at most {} are allowed", s.size(), kMaxStops));
  }
  for (size_t i = 0; i < s.size(); ++i) {
    if (!s[i].is_string()) {
      return Invalid("stop", fmt::format("stop[{}] must be a string, not {}", i, TypeName(s[i])));
    }
    if (!s[i].get_ref<const std::string&>().empty()) out->stop.push_back(s[i].get<std::string>());
  }
  return std::nullopt;
}

// logit_bias: {"<token id>": bias in [-100, 100]}, as OpenAI's API takes it.
Error ParseLogitBias(const json& body, SamplingRequest* out) {
  const json& bias = Field(body, "logit_bias");
  if (bias.is_null()) return std::nullopt;
  if (!bias.is_object()) {
    return Invalid("logit_bias", fmt::format("logit_bias must be an object of token id -> bias, "
                                             "not {}",
                                             TypeName(bias)));
  }
  for (const auto& [key, value] : bias.items()) {
    int64_t id = -1;
    const bool digits =
        !key.empty() && key.size() <= 10 &&
        std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (digits) id = std::stoll(key);
    if (!digits || id > std::numeric_limits<int32_t>::max()) {
      return Invalid("logit_bias",
                     fmt::format("logit_bias: key {} is not a token id", Dump(json(key))));
    }
    if (!value.is_number()) {
      return Invalid("logit_bias",
                     fmt::format("logit_bias[{}] must be a number, not {}", key, TypeName(value)));
    }
    const double v = value.get<double>();
    if (!(v >= -100 && v <= 100)) {
      return Invalid("logit_bias",
                     fmt::format("logit_bias[{}] must be in [-100, 100], not {}", key, v));
    }
    out->logit_bias.emplace_back(id, static_cast<float>(v));
  }
  return std::nullopt;
}

// n: choices per prompt. best_of (completions) may only repeat it: choosing the best of more
// is not done.
Error ParseChoiceCount(const json& body, ApiRequest* out) {
  if (const json& v = Field(body, "n"); !v.is_null()) {
    int64_t n = 0;
    if (Error e = GetInteger(v, "n", 1, kMaxChoices, &n)) return e;
    out->n = static_cast<int32_t>(n);
  }
  if (const json& v = Field(body, "best_of"); !v.is_null()) {
    int64_t best_of = 0;
    if (Error e = GetInteger(v, "best_of", 1, std::numeric_limits<int32_t>::max(), &best_of)) {
      return e;
    }
    if (best_of < out->n) return Invalid("best_of", "best_of must be at least n");
    if (best_of > out->n) return Unsupported("best_of", "best_of > n");
  }
  const size_t n_choices = std::max<size_t>(out->prompts.size(), 1) * out->n;
  if (n_choices > kMaxChoices) {
    return Invalid("n", fmt::format("{} prompts x n = {} choices; at most {} are allowed in one "
                                    "request",
                                    out->prompts.size(), n_choices, kMaxChoices));
  }
  return std::nullopt;
}

// Completions: logprobs (alternatives per token) and echo. Chat: logprobs (bool) and
// top_logprobs, which needs logprobs, as OpenAI's API says; no echo.
Error ParseLogprobs(const json& body, Endpoint endpoint, ApiRequest* out) {
  bool echo = false;
  if (Error e = GetBool(body, "echo", &echo)) return e;
  const json& logprobs = Field(body, "logprobs");
  const json& top_logprobs = Field(body, "top_logprobs");
  if (endpoint == Endpoint::kCompletions) {
    out->echo = echo;
    if (!top_logprobs.is_null() && top_logprobs != 0) {  // a chat field
      return Unsupported("top_logprobs", "top_logprobs in completions (use logprobs)");
    }
    if (logprobs.is_null()) return std::nullopt;
    if (!logprobs.is_number()) {
      return Invalid("logprobs",
                     fmt::format("logprobs must be an integer, not {}", TypeName(logprobs)));
    }
    int64_t n = 0;
    if (Error e = GetInteger(logprobs, "logprobs", 0, kMaxLogprobs, &n)) return e;
    out->logprobs = static_cast<int32_t>(n);
    return std::nullopt;
  }
  if (echo) return Unsupported("echo", "echo in chat");
  bool wanted = false;
  if (Error e = GetBool(body, "logprobs", &wanted)) return e;
  int64_t top = 0;
  if (!top_logprobs.is_null()) {
    if (Error e = GetInteger(top_logprobs, "top_logprobs", 0, kMaxLogprobs, &top)) return e;
    if (!wanted && top > 0) return Invalid("top_logprobs", "top_logprobs needs logprobs: true");
  }
  if (wanted) out->logprobs = static_cast<int32_t>(top);
  return std::nullopt;
}

// The grammar the output must follow: OpenAI's response_format (json_object, json_schema),
// llama-server's `grammar` (GBNF) and `json_schema`, vLLM's `guided_json`; at most one.
// Schemas are read again from `raw` in key order, so properties come out in the order the
// client declared them (a json object keeps its keys sorted).
Error ParseConstraint(const json& body, std::string_view raw, ApiRequest* out) {
  std::string gbnf;
  const char* source = nullptr;
  std::vector<std::string> schema_path;  // where the schema is in the body, when one is
  const json& format = Field(body, "response_format");
  if (!format.is_null()) {
    const json& type = format.is_object() ? Field(format, "type") : format;
    if (!format.is_object() || !type.is_string()) {
      return Invalid("response_format", "response_format must be an object with a type");
    }
    const std::string& name = type.get_ref<const std::string&>();
    if (name == "json_object") {
      gbnf = grammar::JsonGbnf();
      out->format_schema = nlohmann::ordered_json{{"type", "object"}};
      source = "response_format";
    } else if (name == "json_schema") {
      const json& spec = Field(format, "json_schema");
      if (!spec.is_object() ||
          !(Field(spec, "schema").is_object() || Field(spec, "schema").is_boolean())) {
        return Invalid("response_format",
                       "response_format json_schema needs json_schema.schema, an object");
      }
      schema_path = {"response_format", "json_schema", "schema"};
      source = "response_format";
    } else if (name != "text") {
      return Unsupported("response_format", fmt::format("response_format '{}'", name));
    }
  }
  for (const char* key : {"grammar", "json_schema", "guided_json"}) {
    const json& v = Field(body, key);
    if (v.is_null()) continue;
    if (source != nullptr) {
      return Invalid(key,
                     fmt::format("{} and {} both constrain the output; give one", source, key));
    }
    source = key;
    if (std::string_view(key) == "grammar") {
      if (!v.is_string()) {
        return Invalid(key, fmt::format("grammar must be a string (GBNF), not {}", TypeName(v)));
      }
      gbnf = v.get<std::string>();
    } else if (v.is_object() || v.is_boolean()) {
      schema_path = {key};
    } else {
      return Invalid(key,
                     fmt::format("{} must be a JSON schema (an object), not {}", key, TypeName(v)));
    }
  }
  if (source == nullptr) return std::nullopt;
  if (!schema_path.empty()) {
    const auto ordered = nlohmann::ordered_json::parse(raw, nullptr, /*allow_exceptions=*/false);
    const nlohmann::ordered_json* schema = &ordered;
    for (const std::string& key : schema_path) {
      // Found above in the sorted parse; only duplicate keys can make the ordered one differ.
      auto it = schema->is_object() ? schema->find(key) : schema->end();
      if (it == schema->end()) return Invalid(source, "the schema appears twice in the body");
      schema = &*it;
    }
    Result<std::string> converted = grammar::JsonSchemaToGbnf(*schema);
    if (!converted.ok()) return Invalid(source, converted.status().message());
    gbnf = std::move(converted).value();
    out->format_schema = *schema;
  }
  Result<std::shared_ptr<const grammar::Grammar>> compiled = grammar::Grammar::Parse(gbnf);
  if (!compiled.ok()) return Invalid(source, compiled.status().message());
  out->grammar = std::move(compiled).value();
  out->grammar_gbnf = std::move(gbnf);
  return std::nullopt;
}

// The sampling fields both APIs share (OpenAI's and llama-server's extensions), the stop
// strings, ignore_eos and cache_prompt.
Error ParseSampling(const json& body, ApiRequest* out) {
  SamplingRequest& s = out->sampling;
  if (Error e = GetNumber(body, "temperature", 0, 2, &s.temperature)) return e;
  if (Error e = GetNumber(body, "top_p", 0, 1, &s.top_p)) return e;
  if (Error e = GetNumber(body, "min_p", 0, 1, &s.min_p)) return e;
  if (Error e = GetNumber(body, "repeat_penalty", 1e-6, 1e6, &s.repeat_penalty)) return e;
  if (Error e = GetNumber(body, "presence_penalty", -2, 2, &s.presence_penalty)) return e;
  if (Error e = GetNumber(body, "frequency_penalty", -2, 2, &s.frequency_penalty)) return e;
  if (const json& v = Field(body, "top_k"); !v.is_null()) {
    int64_t k = 0;
    // 0 or less: off (vLLM's clients send -1, llama-server takes <= 0).
    if (Error e = GetInteger(v, "top_k", std::numeric_limits<int32_t>::min(),
                             std::numeric_limits<int32_t>::max(), &k)) {
      return e;
    }
    s.top_k = static_cast<int32_t>(std::max<int64_t>(k, 0));
  }
  if (const json& v = Field(body, "seed"); !v.is_null()) {
    if (v.is_number_unsigned()) {
      s.seed = v.get<uint64_t>();
    } else {
      int64_t seed = 0;
      if (Error e = GetInteger(v, "seed", std::numeric_limits<int64_t>::min(),
                               std::numeric_limits<int64_t>::max(), &seed)) {
        return e;
      }
      s.seed = static_cast<uint64_t>(seed);
    }
  }
  if (Error e = ParseLogitBias(body, &s)) return e;
  if (Error e = ParseStop(body, out)) return e;
  if (Error e = GetBool(body, "ignore_eos", &out->ignore_eos)) return e;
  if (Error e = GetBool(body, "cache_prompt", &out->cache_prompt)) return e;
  return std::nullopt;
}

// ParseSampling for llama-server's native endpoints, where seed -1 asks for a random seed
// (SillyTavern sends it by default; read as a fixed seed, every regeneration would repeat).
Error ParseNativeSampling(const json& body, ApiRequest* out) {
  if (Error e = ParseSampling(body, out)) return e;
  if (Field(body, "seed") == -1) out->sampling.seed.reset();
  if (const json& v = Field(body, "t_max_predict_ms"); !v.is_null()) {
    if (Error e = GetInteger(v, "t_max_predict_ms", std::numeric_limits<int32_t>::min(),
                             std::numeric_limits<int32_t>::max(), &out->max_predict_ms)) {
      return e;
    }
    out->max_predict_ms = std::max<int64_t>(out->max_predict_ms, 0);  // <= 0: none
  }
  return std::nullopt;
}

Error Parse(const json& body, std::string_view raw, Endpoint endpoint, std::string_view model_id,
            ApiRequest* out) {
  if (!body.is_object()) {
    return Invalid("",
                   fmt::format("the request body must be a JSON object, not {}", TypeName(body)));
  }
  out->endpoint = endpoint;
  const json& model = Field(body, "model");
  if (model.is_null()) return Invalid("model", "you must provide a model parameter");
  if (!model.is_string()) {
    return Invalid("model", fmt::format("model must be a string, not {}", TypeName(model)));
  }
  out->model = model.get<std::string>();
  if (out->model != model_id) {
    return Invalid(
        "model",
        fmt::format("the model '{}' does not exist; this server serves '{}'", out->model, model_id),
        "model_not_found");
  }
  if (endpoint == Endpoint::kCompletions) {
    if (Error e = ParsePrompt(body, out)) return e;
  } else {
    if (Error e = ParseMessages(body, out)) return e;
    if (Error e = ParseTemplateKwargsField(body, out)) return e;
    if (Error e = ParseReasoningEffortField(body, out)) return e;
  }
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (endpoint == Endpoint::kCompletions && std::string_view(key) != "max_tokens") continue;
    const json& v = Field(body, key);
    if (v.is_null()) continue;
    int64_t n = 0;
    // Completions may ask for none (with echo: score the prompt only).
    const int64_t lo = endpoint == Endpoint::kCompletions ? 0 : 1;
    if (Error e = GetInteger(v, key, lo, kMaxTokensLimit, &n)) return e;
    out->max_tokens = n;  // max_completion_tokens, checked second, wins
  }
  if (Error e = ParseSampling(body, out)) return e;
  if (Error e = GetBool(body, "stream", &out->stream)) return e;
  if (const json& so = Field(body, "stream_options"); !so.is_null()) {
    if (!so.is_object()) {
      return Invalid("stream_options",
                     fmt::format("stream_options must be an object, not {}", TypeName(so)));
    }
    if (const json& iu = Field(so, "include_usage"); !iu.is_null()) {
      if (!iu.is_boolean()) {
        return Invalid("stream_options", "stream_options.include_usage must be a boolean");
      }
      out->include_usage = iu.get<bool>();
    }
  }
  if (Error e = ParseLogprobs(body, endpoint, out)) return e;
  // The echoed prompt would be the text around the FIM tokens, which no client expects.
  if (out->suffix && out->echo) return Unsupported("suffix", "suffix with echo");
  if (Error e = ParseChoiceCount(body, out)) return e;
  const json& user = Field(body, "user");
  if (!user.is_null() && !user.is_string()) {
    return Invalid("user", fmt::format("user must be a string, not {}", TypeName(user)));
  }
  if (Error e = ParseConstraint(body, raw, out)) return e;
  if (Error e = ParseTools(body, raw, endpoint, out)) return e;
  if (out->grammar != nullptr &&
      (out->tool_choice == ToolChoice::kRequired || out->tool_choice == ToolChoice::kNamed)) {
    return Invalid("tool_choice",
                   "a required tool call and a constrained output format "
                   "cannot both hold");
  }
  // Auto: calls, or an answer in the format; one grammar of both needs the format's schema.
  if (out->tool_choice == ToolChoice::kAuto && out->grammar != nullptr && !out->format_schema) {
    return Invalid("grammar",
                   "a GBNF grammar cannot be combined with tools; send a JSON "
                   "schema (response_format, json_schema) or tool_choice \"none\"");
  }
  return std::nullopt;
}

}  // namespace

namespace {

// The body as JSON, or the 400 naming where its syntax breaks.
Error ParseJson(std::string_view body, json* out) {
  if (const size_t depth = JsonDepth(body); depth > kMaxJsonDepth) {
    return Invalid("", fmt::format("the request body nests arrays and objects {} levels deep; at "
                                   "most {} are allowed",
                                   depth, kMaxJsonDepth));
  }
  // No exceptions: a parse error gives a discarded value.
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    // Find where the syntax error is, for the message (the non-throwing parse does not say).
    json::parser_callback_t none = nullptr;
    std::string where;
    try {
      (void)json::parse(body.begin(), body.end(), none, true);
    } catch (const json::parse_error& e) {
      where = fmt::format(" at byte {}", e.byte);
    } catch (const json::exception& e) {
      where = " (a number out of range)";  // out_of_range.406: e.g. 1e999
    }
    return Invalid("", fmt::format("the request body is not valid JSON{}", where));
  }
  *out = std::move(j);
  return std::nullopt;
}

// A JSON object body whose optional `model` names the served model.
Error ParseObject(std::string_view body, std::string_view model_id, json* out) {
  if (Error e = ParseJson(body, out)) return e;
  if (!out->is_object()) {
    return Invalid("",
                   fmt::format("the request body must be a JSON object, not {}", TypeName(*out)));
  }
  const json& model = Field(*out, "model");
  if (!model.is_null() && model != model_id) {
    return Invalid(
        "model",
        fmt::format("the model {} does not exist; this server serves '{}'", Dump(model), model_id),
        "model_not_found");
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseRequest(std::string_view body, Endpoint endpoint,
                                     std::string_view model_id, ApiRequest* out) {
  *out = ApiRequest{};
  json j;
  if (Error e = ParseJson(body, &j)) return e;
  Error e = Parse(j, body, endpoint, model_id, out);
  if (e) *out = ApiRequest{};
  return e;
}

std::optional<ApiError> ParseTokenizeRequest(std::string_view body, std::string_view model_id,
                                             TokenizeRequest* out) {
  *out = TokenizeRequest{};
  json j;
  if (Error e = ParseObject(body, model_id, &j)) return e;
  // vLLM's fields, else llama.cpp's (with their defaults).
  const bool vllm = j.contains("prompt");
  const char* text_key = vllm ? "prompt" : "content";
  const json& text = Field(j, text_key);
  if (!text.is_string()) {
    return Invalid(text_key, fmt::format("{} must be a string (the text to tokenize), not {}",
                                         text_key, TypeName(text)));
  }
  out->text = text.get<std::string>();
  out->add_special = vllm;
  if (Error e = GetBool(j, vllm ? "add_special_tokens" : "add_special", &out->add_special)) {
    return e;
  }
  return std::nullopt;
}

std::optional<ApiError> ParseDetokenizeRequest(std::string_view body, std::string_view model_id,
                                               DetokenizeRequest* out) {
  *out = DetokenizeRequest{};
  json j;
  if (Error e = ParseObject(body, model_id, &j)) return e;
  const json& tokens = Field(j, "tokens");
  if (!tokens.is_array()) {
    return Invalid("tokens",
                   fmt::format("tokens must be an array of token ids, not {}", TypeName(tokens)));
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    int64_t id = 0;
    if (Error e = GetInteger(tokens[i], fmt::format("tokens[{}]", i), 0,
                             std::numeric_limits<int32_t>::max(), &id)) {
      e->param = "tokens";
      return e;
    }
    out->tokens.push_back(id);
  }
  return std::nullopt;
}

std::optional<ApiError> ParseInfillRequest(std::string_view body, std::string_view model_id,
                                           InfillRequest* out) {
  *out = InfillRequest{};
  json j;
  if (Error e = ParseObject(body, model_id, &j)) return e;
  auto text = [&](const char* key, bool required, std::string* field) -> Error {
    const json& v = Field(j, key);
    if (v.is_null()) {
      if (required) return Invalid(key, fmt::format("\"{}\" is required", key));
      return std::nullopt;
    }
    if (!v.is_string()) {
      return Invalid(key, fmt::format("{} must be a string, not {}", key, TypeName(v)));
    }
    *field = v.get<std::string>();
    return std::nullopt;
  };
  if (Error e = text("input_prefix", true, &out->prefix)) return e;
  if (Error e = text("input_suffix", true, &out->suffix)) return e;
  if (Error e = text("prompt", false, &out->prompt)) return e;
  if (const json& extra = Field(j, "input_extra"); !extra.is_null()) {
    if (!extra.is_array()) {
      return Invalid("input_extra",
                     "input_extra must be an array of {\"filename\": string, "
                     "\"text\": string}");
    }
    for (size_t i = 0; i < extra.size(); ++i) {
      const json& chunk = extra[i];
      const json& t = chunk.is_object() ? Field(chunk, "text") : chunk;
      const json& f = chunk.is_object() ? Field(chunk, "filename") : json("tmp");
      if (!chunk.is_object() || !t.is_string() || !(f.is_null() || f.is_string())) {
        return Invalid("input_extra",
                       fmt::format("input_extra[{}] must be {{\"text\": string, \"filename\": "
                                   "string (optional)}}",
                                   i));
      }
      out->extra.push_back({f.is_null() ? "tmp" : f.get<std::string>(), t.get<std::string>()});
    }
  }
  ApiRequest& r = out->api;
  r.model = std::string(model_id);
  if (const json& v = Field(j, "n_predict"); !v.is_null()) {
    int64_t n = 0;
    if (Error e = GetInteger(v, "n_predict", -1, kMaxTokensLimit, &n)) return e;
    if (n >= 0) r.max_tokens = n;  // -1: no limit but the context's, as llama-server
  }
  if (Error e = ParseNativeSampling(j, &r)) {
    out->api = ApiRequest{};
    return e;
  }
  bool stream = false;
  if (Error e = GetBool(j, "stream", &stream)) return e;
  if (stream) {
    return Unsupported("stream",
                       "streaming from /infill (send stream: false, or use "
                       "/v1/completions with a suffix)");
  }
  return std::nullopt;
}

std::optional<ApiError> ParseNativeCompletionRequest(std::string_view body,
                                                     std::string_view model_id, ApiRequest* out) {
  *out = ApiRequest{};
  json j;
  if (Error e = ParseObject(body, model_id, &j)) return e;
  ApiRequest& r = *out;
  r.model = std::string(model_id);
  const json& prompt = Field(j, "prompt");
  if (!prompt.is_string() && !prompt.is_array()) {
    return Invalid("prompt", prompt.is_null() ? "\"prompt\" is required"
                                              : "prompt must be a string or an array of token "
                                                "ids (several prompts: /v1/completions)");
  }
  if (Error e = ParseOnePrompt(prompt, "prompt", &r.prompts.emplace_back())) return e;
  if (const json& v = Field(j, "n_predict"); !v.is_null()) {
    int64_t n = 0;
    if (Error e = GetInteger(v, "n_predict", -1, kMaxTokensLimit, &n)) return e;
    if (n >= 0) r.max_tokens = n;  // -1: no limit but the context's
  }
  // llama-server's logit_bias may also be [[token id, bias or false (banned)], ...].
  if (auto it = j.find("logit_bias"); it != j.end() && it->is_array()) {
    json& bias = *it;
    json as_object = json::object();
    for (const json& pair : bias) {
      if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer() ||
          !(pair[1].is_number() || pair[1] == false)) {
        return Invalid("logit_bias",
                       "logit_bias must be an object of token id -> bias, or an "
                       "array of [token id, bias or false]");
      }
      as_object[std::to_string(pair[0].get<int64_t>())] = pair[1] == false ? json(-100) : pair[1];
    }
    bias = std::move(as_object);
  }
  if (Error e = ParseNativeSampling(j, &r)) return e;
  if (Error e = GetBool(j, "stream", &r.stream)) return e;
  if (const json& v = Field(j, "n_probs"); !v.is_null()) {
    int64_t n = 0;
    if (Error e = GetInteger(v, "n_probs", 0, kMaxLogprobs, &n)) return e;
    if (n > 0) {
      return Unsupported("n_probs", "n_probs on /completion (use /v1/completions' logprobs)");
    }
  }
  if (Error e = ParseConstraint(j, body, &r)) return e;
  return std::nullopt;
}

json ErrorJson(const ApiError& e) {
  json err = {{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return {{"error", std::move(err)}};
}

std::string Dump(const json& j) {
  return j.dump(-1, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace);
}

json UsageJson(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

namespace {

json Envelope(const ResponseMeta& meta, const char* object) {
  return {{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
}

json FinishReason(std::string_view reason) {
  return reason.empty() ? json(nullptr) : json(std::string(reason));
}

}  // namespace

namespace {

// A token as OpenAI shows it: the piece when it is valid UTF-8, else its bytes spelled out,
// "bytes:\xe2\x80" (a piece may hold part of a character): lossless, and no two pieces
// collide as keys of a completions top_logprobs object.
std::string TokenText(const std::string& piece) {
  if (utf8::IsValid(piece)) return piece;
  std::string out = "bytes:";
  for (unsigned char c : piece) out += fmt::format("\\x{:02x}", c);
  return out;
}

}  // namespace

json LogprobsJson(Endpoint endpoint, std::span<const LogprobEntry> entries) {
  auto value = [](const std::optional<float>& lp) { return lp ? json(*lp) : json(nullptr); };
  if (endpoint == Endpoint::kChat) {
    auto bytes = [](const std::string& s) {
      json b = json::array();
      for (unsigned char c : s) b.push_back(c);
      return b;
    };
    json content = json::array();
    for (const LogprobEntry& e : entries) {
      json top = json::array();
      for (const auto& [token, lp] : e.top) {
        top.push_back({{"token", TokenText(token)}, {"logprob", lp}, {"bytes", bytes(token)}});
      }
      content.push_back({{"token", TokenText(e.token)},
                         {"logprob", value(e.logprob)},
                         {"bytes", bytes(e.token)},
                         {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}, {"refusal", nullptr}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
       offsets = json::array();
  for (const LogprobEntry& e : entries) {
    const std::string text = TokenText(e.token);
    tokens.push_back(text);
    token_logprobs.push_back(value(e.logprob));
    offsets.push_back(e.text_offset);
    if (!e.logprob) {
      top_logprobs.push_back(nullptr);
      continue;
    }
    // The alternatives and the token itself, as OpenAI's (up to logprobs + 1 entries).
    json top = json::object();
    for (const auto& [token, lp] : e.top) top[TokenText(token)] = lp;
    top[text] = *e.logprob;
    top_logprobs.push_back(std::move(top));
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top_logprobs)},
          {"text_offset", std::move(offsets)}};
}

namespace {

// OpenAI's tool_calls array; stream deltas also number the calls (index).
json ToolCallsJson(std::span<const ApiToolCall> calls, bool with_index) {
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json call = {{"id", calls[i].id},
                 {"type", "function"},
                 {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (with_index) call["index"] = i;
    out.push_back(std::move(call));
  }
  return out;
}

}  // namespace

json CompletionJson(Endpoint endpoint, const ResponseMeta& meta, std::span<const Choice> choices,
                    const Usage& usage) {
  json out = Envelope(meta, endpoint == Endpoint::kChat ? "chat.completion" : "text_completion");
  out["choices"] = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const Choice& c = choices[i];
    json choice = {
        {"index", i}, {"logprobs", c.logprobs}, {"finish_reason", FinishReason(c.finish_reason)}};
    if (endpoint == Endpoint::kChat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
      if (c.reasoning) choice["message"]["reasoning_content"] = *c.reasoning;
      if (!c.tool_calls.empty()) {
        if (c.text.empty()) choice["message"]["content"] = nullptr;
        choice["message"]["tool_calls"] = ToolCallsJson(c.tool_calls, /*with_index=*/false);
      }
    } else {
      choice["text"] = c.text;
    }
    out["choices"].push_back(std::move(choice));
  }
  out["usage"] = UsageJson(usage);
  return out;
}

json ChunkJson(Endpoint endpoint, const ResponseMeta& meta, const std::string& text,
               std::string_view finish_reason, bool first, const json& logprobs, int index) {
  json choice = {
      {"index", index}, {"logprobs", logprobs}, {"finish_reason", FinishReason(finish_reason)}};
  json out;
  if (endpoint == Endpoint::kChat) {
    out = Envelope(meta, "chat.completion.chunk");
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && finish_reason.empty())) delta["content"] = text;
    choice["delta"] = std::move(delta);
  } else {
    out = Envelope(meta, "text_completion");
    choice["text"] = text;
  }
  out["choices"] = json::array({std::move(choice)});
  return out;
}

json NativeCompletionJson(const ResponseMeta& meta, const NativeCompletion& c) {
  const Usage& u = c.usage;
  const int64_t evaluated = u.prompt_tokens - u.cached_tokens;
  // Per token and per second, 0 where nothing was timed (as llama-server prints them).
  auto per_token = [](double ms, int64_t n) { return n > 0 ? ms / n : 0.0; };
  auto per_second = [](double ms, int64_t n) { return ms > 0 ? 1e3 * n / ms : 0.0; };
  return json{{"index", 0},
              {"content", c.content},
              {"tokens", json::array()},
              {"stop", true},
              {"model", meta.model},
              {"tokens_predicted", u.completion_tokens},
              {"tokens_evaluated", u.prompt_tokens},
              {"tokens_cached", std::max<int64_t>(0, u.prompt_tokens + u.completion_tokens - 1)},
              {"truncated", false},
              {"stop_type", c.stop_type},
              {"stopping_word", ""},
              {"has_new_line", c.content.find('\n') != std::string::npos},
              {"prompt", c.prompt},
              {"timings",
               {{"cache_n", u.cached_tokens},
                {"prompt_n", evaluated},
                {"prompt_ms", c.prompt_ms},
                {"prompt_per_token_ms", per_token(c.prompt_ms, evaluated)},
                {"prompt_per_second", per_second(c.prompt_ms, evaluated)},
                {"predicted_n", u.completion_tokens},
                {"predicted_ms", c.predicted_ms},
                {"predicted_per_token_ms", per_token(c.predicted_ms, u.completion_tokens)},
                {"predicted_per_second", per_second(c.predicted_ms, u.completion_tokens)}}}};
}

json ReasoningChunkJson(const ResponseMeta& meta, const std::string& text, int index) {
  json out = Envelope(meta, "chat.completion.chunk");
  json choice = {{"index", index},
                 {"logprobs", nullptr},
                 {"finish_reason", nullptr},
                 {"delta", {{"reasoning_content", text}}}};
  out["choices"] = json::array({std::move(choice)});
  return out;
}

json ToolCallsChunkJson(const ResponseMeta& meta, std::span<const ApiToolCall> calls, int index) {
  json out = Envelope(meta, "chat.completion.chunk");
  json choice = {{"index", index},
                 {"logprobs", nullptr},
                 {"finish_reason", nullptr},
                 {"delta", {{"tool_calls", ToolCallsJson(calls, /*with_index=*/true)}}}};
  out["choices"] = json::array({std::move(choice)});
  return out;
}

json UsageChunkJson(Endpoint endpoint, const ResponseMeta& meta, const Usage& usage) {
  json out =
      Envelope(meta, endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion");
  out["choices"] = json::array();
  out["usage"] = UsageJson(usage);
  return out;
}

std::string SseEvent(const json& j) { return "data: " + Dump(j) + "\n\n"; }

}  // namespace mt::server
