#include "tokenizer/chat_template.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/json_depth.h"
#include "tokenizer/chat_template_internal.h"
#include "tokenizer/utf8.h"

namespace mt {
namespace {

using OrderedJson = nlohmann::ordered_json;

bool Contains(std::string_view s, std::string_view needle) {
  return s.find(needle) != std::string_view::npos;
}

// Python's json encode_basestring (ensure_ascii=False) of `s`, quotes included.
void AppendPyString(std::string& out, std::string_view s) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const size_t len = utf8::ValidSequenceLength(s, i);
      if (len == 0) {
        utf8::Append(out, utf8::kReplacement);
        ++i;
      } else {
        out.append(s, i, len);
        i += len;
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  out += '"';
}

// Python's float repr (what json.dumps prints for a float): the shortest digits that read
// back as `d`, in fixed notation with at least one fractional digit when the decimal
// exponent is in [-4, 16), else as d[.ddd]e{+|-}XX.
void AppendPyFloat(std::string& out, double d) {
  if (std::isnan(d)) {
    out += "NaN";
    return;
  }
  if (std::isinf(d)) {
    out += d < 0 ? "-Infinity" : "Infinity";
    return;
  }
  // Shortest round-trip scientific form: [-]D[.DDD]e{+|-}XX.
  char buf[64];
  const std::to_chars_result r =
      std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string_view s(buf, static_cast<size_t>(r.ptr - buf));
  if (s.front() == '-') {
    out += '-';
    s.remove_prefix(1);
  }
  const size_t e = s.find('e');
  std::string digits(1, s[0]);
  if (e > 1) digits.append(s.substr(2, e - 2));
  const int exp = std::atoi(std::string(s.substr(e + 1)).c_str());
  const int n = static_cast<int>(digits.size());
  if (exp >= 16 || exp < -4) {
    out += digits[0];
    if (n > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{:02d}", exp < 0 ? '-' : '+', std::abs(exp));
  } else if (exp >= 0) {
    if (n > exp + 1) {
      out += digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
    } else {
      out += digits + std::string(exp + 1 - n, '0') + ".0";
    }
  } else {
    out += "0." + std::string(-exp - 1, '0') + digits;
  }
}

// Appends a value that is not a non-empty object or array.
void AppendPyScalar(std::string& out, const OrderedJson& v) {
  switch (v.type()) {
    case OrderedJson::value_t::null:
      out += "null";
      break;
    case OrderedJson::value_t::boolean:
      out += v.get<bool>() ? "true" : "false";
      break;
    case OrderedJson::value_t::string:
      AppendPyString(out, v.get_ref<const std::string&>());
      break;
    case OrderedJson::value_t::number_integer:
      out += fmt::format("{}", v.get<int64_t>());
      break;
    case OrderedJson::value_t::number_unsigned:
      out += fmt::format("{}", v.get<uint64_t>());
      break;
    case OrderedJson::value_t::number_float:
      AppendPyFloat(out, v.get<double>());
      break;
    case OrderedJson::value_t::object:
      out += "{}";
      break;
    case OrderedJson::value_t::array:
      out += "[]";
      break;
    case OrderedJson::value_t::binary:
    case OrderedJson::value_t::discarded:
      out += v.dump();
      break;
  }
}

std::string_view StripNewlines(std::string_view s, bool left, bool right) {
  while (left && !s.empty() && s.front() == '\n') s.remove_prefix(1);
  while (right && !s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool EndsWith(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

// The last user message that is a query, not a tool result wrapped as one (Qwen3's
// ns.last_query_index); the last message when there is none.
size_t LastQueryIndex(std::span<const ChatMessage> messages) {
  for (size_t i = messages.size(); i-- > 0;) {
    const std::string& c = messages[i].content;
    if (messages[i].role == "user" &&
        !(StartsWith(c, "<tool_response>") && EndsWith(c, "</tool_response>"))) {
      return i;
    }
  }
  return messages.size() - 1;
}

// An assistant turn's (content, reasoning) as Qwen3's template splits them: reasoning_content
// when given, else the text before the first "</think>" (after its last "<think>") and the
// text after the last "</think>".
std::pair<std::string_view, std::string_view> SplitThinking(const ChatMessage& m) {
  std::string_view content = m.content;
  if (m.reasoning_content) return {content, *m.reasoning_content};
  const size_t first_close = content.find("</think>");
  if (first_close == std::string_view::npos) return {content, {}};
  std::string_view reasoning = StripNewlines(content.substr(0, first_close), false, true);
  if (const size_t open = reasoning.rfind("<think>"); open != std::string_view::npos) {
    reasoning.remove_prefix(open + 7);
  }
  reasoning = StripNewlines(reasoning, true, false);
  content = StripNewlines(content.substr(content.rfind("</think>") + 8), true, false);
  return {content, reasoning};
}

// Qwen3's chat_template (tokenizer_config.json); its <think> handling when `thinking` says
// the template has it.
ChatPrompt RenderChatml(std::span<const ChatMessage> messages, bool add_generation_prompt,
                        const OrderedJson& tools, const ChatThinking& thinking,
                        std::string_view default_system, bool enable_thinking) {
  ChatPrompt p{"", false};
  std::string& text = p.text;
  size_t first = 0;  // the first message the loop below renders
  const bool has_system = messages[0].role == "system";
  if (!tools.empty()) {
    text += "<|im_start|>system\n";
    if (has_system) {
      text += messages[0].content + "\n\n";
      first = 1;
    } else if (!default_system.empty()) {
      text += std::string(default_system) + "\n\n";
    }
    text +=
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
    for (const OrderedJson& tool : tools) text += "\n" + HfToJson(tool);
    text +=
        "\n</tools>\n\nFor each function call, return a json object with function name and "
        "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
        "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";
  } else if (!has_system && !default_system.empty()) {
    text += "<|im_start|>system\n" + std::string(default_system) + "<|im_end|>\n";
  }
  const size_t last_query = LastQueryIndex(messages);
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "tool") {
      if (i == 0 || messages[i - 1].role != "tool") text += "<|im_start|>user";
      text += "\n<tool_response>\n" + m.content + "\n</tool_response>";
      if (i + 1 == messages.size() || messages[i + 1].role != "tool") text += "<|im_end|>\n";
      continue;
    }
    if (m.role != "assistant") {
      text += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      continue;
    }
    std::string_view content = m.content;
    text += "<|im_start|>assistant\n";
    if (thinking.history) {
      const auto [answer, reasoning] = SplitThinking(m);
      content = answer;
      if (i > last_query && (i + 1 == messages.size() || !reasoning.empty())) {
        text += "<think>\n";
        text += StripNewlines(reasoning, true, true);
        text += "\n</think>\n\n";
        text += StripNewlines(content, true, false);
      } else {
        text += content;
      }
    } else {
      text += content;
    }
    for (size_t c = 0; c < m.tool_calls.size(); ++c) {
      if (c > 0 || !content.empty()) text += "\n";
      text += "<tool_call>\n{\"name\": \"" + m.tool_calls[c].name +
              "\", \"arguments\": " + m.tool_calls[c].arguments + "}\n</tool_call>";
    }
    text += "<|im_end|>\n";
  }
  if (add_generation_prompt) {
    text += "<|im_start|>assistant\n";
    if (thinking.forced_open) {
      text += "<think>\n";
      p.thinking_open = true;
    } else if (thinking.switchable && !enable_thinking) {
      text += "<think>\n\n</think>\n\n";
    } else if (thinking.switchable) {
      p.may_think = true;
    }
  }
  return p;
}

// DeepSeek's chat markers (fullwidth bars U+FF5C, "▁" U+2581 for spaces).
constexpr std::string_view kDeepseekUser = "<\uFF5CUser\uFF5C>";
constexpr std::string_view kDeepseekAssistant = "<\uFF5CAssistant\uFF5C>";
constexpr std::string_view kDeepseekEos = "<\uFF5Cend\u2581of\u2581sentence\uFF5C>";

// DeepSeek-V3's chat_template (tokenizer_config.json), and R1's <think> handling when
// `thinking` says the template has it. The template reads no reasoning_content.
ChatPrompt RenderDeepseek3(std::span<const ChatMessage> messages, bool add_generation_prompt,
                           const ChatThinking& thinking) {
  ChatPrompt p{"", /*add_bos=*/true};  // "{{ bos_token }}" first
  std::string& text = p.text;
  bool first_system = true;  // the template's ns.is_first_sp
  for (const ChatMessage& m : messages) {
    if (m.role != "system") continue;
    if (!first_system) text += "\n\n";
    text += m.content;
    first_system = false;
  }
  for (const ChatMessage& m : messages) {
    if (m.role == "user") {
      text += kDeepseekUser;
      text += m.content;
    } else if (m.role == "assistant") {
      std::string_view content = m.content;
      // R1: content.split('</think>')[-1], i.e. what follows the last "</think>".
      if (const size_t close = content.rfind(kThinkClose);
          thinking.history && close != std::string_view::npos) {
        content.remove_prefix(close + kThinkClose.size());
      }
      text += kDeepseekAssistant;
      text += content;
      text += kDeepseekEos;
    }
  }
  if (add_generation_prompt) {
    text += kDeepseekAssistant;
    if (thinking.forced_open) {
      text += "<think>\n";
      p.thinking_open = true;
    }
  }
  return p;
}

}  // namespace

std::string HfToJson(const OrderedJson& value) {
  // An explicit stack of open containers, so that nesting depth cannot exhaust the call
  // stack. `next` is the index of the next child to print.
  struct Open {
    const OrderedJson* node;
    size_t next;
  };
  std::vector<Open> open;
  std::string out;
  const OrderedJson* v = &value;
  while (v != nullptr) {
    if ((v->is_object() || v->is_array()) && !v->empty()) {
      out += v->is_object() ? '{' : '[';
      open.push_back({v, 0});
    } else {
      AppendPyScalar(out, *v);
    }
    v = nullptr;
    while (v == nullptr && !open.empty()) {
      Open& top = open.back();
      if (top.next == top.node->size()) {
        out += top.node->is_object() ? '}' : ']';
        open.pop_back();
        continue;
      }
      if (top.next > 0) out += ", ";
      if (top.node->is_object()) {
        const auto& object = top.node->get_ref<const OrderedJson::object_t&>();
        const auto it = object.begin() + static_cast<std::ptrdiff_t>(top.next);
        AppendPyString(out, it->first);
        out += ": ";
        v = &it->second;
      } else {
        v = &top.node->get_ref<const OrderedJson::array_t&>()[top.next];
      }
      ++top.next;
    }
  }
  return out;
}

namespace chat_internal {

std::string PyStr(const OrderedJson& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_boolean()) return value.get<bool>() ? "True" : "False";
  if (value.is_null()) return "None";
  if (value.is_number_float()) {
    std::string out;
    AppendPyFloat(out, value.get<double>());
    if (out == "NaN") return "nan";
    if (out == "Infinity") return "inf";
    if (out == "-Infinity") return "-inf";
    return out;
  }
  return HfToJson(value);
}

namespace {

// str.isspace() of a code point.
bool PyIsSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

}  // namespace

std::string_view PyStrip(std::string_view s) {
  // From the front, whole code points; invalid bytes are not space.
  while (!s.empty()) {
    const size_t len = utf8::ValidSequenceLength(s, 0);
    if (len == 0 || !PyIsSpace(utf8::DecodeAt(s, 0, len))) break;
    s.remove_prefix(len);
  }
  while (!s.empty()) {
    size_t start = s.size() - 1;  // the last code point's first byte
    while (start > 0 && s.size() - start < 4 &&
           (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) {
      --start;
    }
    const size_t len = utf8::ValidSequenceLength(s, start);
    if (len != s.size() - start || !PyIsSpace(utf8::DecodeAt(s, start, len))) break;
    s.remove_suffix(len);
  }
  return s;
}

size_t PyLen(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) {
    const size_t len = utf8::ValidSequenceLength(s, i);
    i += len == 0 ? 1 : len;
  }
  return n;
}

std::optional<OrderedJson> ParseArguments(std::string_view arguments) {
  OrderedJson j = ParseJsonWithinDepth<OrderedJson>(arguments);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

}  // namespace chat_internal

Result<ChatTemplate::Kind> ChatTemplate::Detect(std::string_view t) {
  // Order and markers follow llama.cpp's detection for the formats moetier knows; tulu is
  // recognised before llama.cpp's generic "<|user|>"/"<|assistant|>" families because
  // llama.cpp has no tulu format (it would take OLMoE's template for GLM-Edge).
  // gpt-oss (llama.cpp's LLM_CHAT_TEMPLATE_OPENAI_MOE markers, and its harmony message tag).
  if (Contains(t, "<|start|>") && Contains(t, "<|channel|>") && Contains(t, "<|message|>")) {
    return Kind::kHarmony;
  }
  // GLM-4.5/4.6 (llama.cpp's markers for their chat format): GLM's prefix and the tool
  // call's <arg_key>/<arg_value> (GLM-4's and GLM-Edge's templates have neither).
  if (Contains(t, "[gMASK]<sop>") && Contains(t, "<arg_key>") && Contains(t, "<arg_value>")) {
    return Kind::kGlm45;
  }
  if (Contains(t, "<|im_start|>") && !Contains(t, "<|im_sep|>") &&
      !Contains(t, "<end_of_utterance>")) {
    return Kind::kChatml;
  }
  if ((t.substr(0, 7) == "mistral" || Contains(t, "[INST]")) && !Contains(t, "[SYSTEM_PROMPT]") &&
      !Contains(t, "[AVAILABLE_TOOLS]") && !Contains(t, "' [INST] ' + system_message") &&
      !Contains(t, "<<SYS>>")) {
    return Kind::kLlama2;
  }
  if (Contains(t, "<|user|>") && Contains(t, "<|assistant|>") && !Contains(t, "<|end|>") &&
      Contains(t, "'<|assistant|>\\n'") && Contains(t, "eos_token") && !Contains(t, "</s>") &&
      !Contains(t, "'<|user|>\\n' + message['content'] + eos_token")) {  // that is Zephyr
    return Kind::kTulu;
  }
  // llama.cpp's LLM_CHAT_TEMPLATE_DEEPSEEK_3 markers (V3, R1 and the R1 distills).
  if (Contains(t, kDeepseekAssistant) && Contains(t, kDeepseekUser) && Contains(t, kDeepseekEos)) {
    return Kind::kDeepseek3;
  }
  return Unimplemented(
      "chat template not recognised (known: chatml, tulu, llama2 [INST], deepseek3, harmony, "
      "glm4.5)");
}

Result<ChatTemplate::Kind> ChatTemplate::ForArchitecture(std::string_view arch) {
  if (arch == "qwen2moe" || arch == "qwen3moe" || arch == "qwen2" || arch == "qwen3") {
    return Kind::kChatml;
  }
  if (arch == "olmoe") return Kind::kTulu;
  if (arch == "llama") return Kind::kLlama2;
  if (arch == "deepseek2") return Kind::kDeepseek3;
  if (arch == "gpt-oss") return Kind::kHarmony;
  if (arch == "glm4moe") return Kind::kGlm45;
  return Unimplemented("no built-in chat template for architecture '{}'", arch);
}

Result<ChatTemplate::Kind> ChatTemplate::ByName(std::string_view name) {
  if (name == "chatml") return Kind::kChatml;
  if (name == "tulu") return Kind::kTulu;
  if (name == "llama2" || name == "mistral" || name == "mixtral") return Kind::kLlama2;
  if (name == "deepseek3") return Kind::kDeepseek3;
  if (name == "harmony" || name == "gpt-oss") return Kind::kHarmony;
  if (name == "glm4.5" || name == "glm-4.5" || name == "glm4moe") return Kind::kGlm45;
  return InvalidArgument(
      "unknown chat template '{}' (chatml, tulu, llama2, deepseek3, harmony, glm4.5)", name);
}

Result<ChatTemplate> ChatTemplate::ForModel(std::string_view jinja, std::string_view architecture,
                                            std::string eos_text) {
  if (!jinja.empty()) {
    if (Result<Kind> k = Detect(jinja); k.ok()) {
      const bool chatml = *k == Kind::kChatml;
      return ChatTemplate(*k, std::move(eos_text), "tokenizer.chat_template", DetectThinking(jinja),
                          chatml ? DetectDefaultSystem(jinja) : "");
    }
  }
  Result<Kind> k = ForArchitecture(architecture);
  if (!k.ok()) {
    return Unimplemented("no chat template: tokenizer.chat_template is {} and {}",
                         jinja.empty() ? "absent" : "not a known format", k.status().message());
  }
  // Qwen3's own template (the hybrid models': history and switch).
  const bool qwen3 = architecture == "qwen3moe" || architecture == "qwen3";
  return ChatTemplate(*k, std::move(eos_text), fmt::format("architecture {}", architecture),
                      qwen3 ? ChatThinking{.history = true, .switchable = true} : ChatThinking{});
}

std::string ChatTemplate::DetectDefaultSystem(std::string_view t) {
  // In the Jinja source: a quote, <|im_start|>system, a backslash-n, then literal text up to
  // <|im_end|>, a backslash-n and the same quote. In Qwen3's '<|im_start|>system\n' + ...
  // the quote closes first: no literal text.
  constexpr std::string_view kOpen = "<|im_start|>system\\n", kClose = "<|im_end|>\\n";
  for (size_t at = t.find(kOpen); at != std::string_view::npos; at = t.find(kOpen, at + 1)) {
    if (at == 0 || (t[at - 1] != '\'' && t[at - 1] != '"')) continue;
    const char quote = t[at - 1];
    const size_t begin = at + kOpen.size();
    const size_t end = t.find(kClose, begin);
    if (end == std::string_view::npos || end + kClose.size() >= t.size() ||
        t[end + kClose.size()] != quote) {
      continue;
    }
    const std::string_view literal = t.substr(begin, end - begin);
    // Plain text only: no quote, escape or expression inside.
    if (literal.empty() || literal.find_first_of("'\"\\{}") != std::string_view::npos) continue;
    return std::string(literal);
  }
  return "";
}

ChatThinking ChatTemplate::DetectThinking(std::string_view t) {
  Result<Kind> kind = Detect(t);
  ChatThinking th;
  if (kind.ok() && *kind == Kind::kChatml) {
    th.history = Contains(t, "reasoning_content");
    th.switchable = Contains(t, "enable_thinking");
    // The generation prompt as a Jinja string literal (each "\\n" a backslash and an n).
    th.forced_open = Contains(t, "'<|im_start|>assistant\\n<think>\\n'");
  } else if (kind.ok() && *kind == Kind::kDeepseek3) {
    // R1: "{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}"
    // and "{{'<｜Assistant｜><think>\\n'}}" (as written in Jinja, or with a real newline).
    th.history = Contains(t, "content.split('</think>')[-1]");
    const std::string open = std::string(kDeepseekAssistant) + "<think>";
    th.forced_open = Contains(t, open + "\\n'") || Contains(t, open + "\n'");
  }
  return th;
}

std::string_view ChatTemplate::name() const {
  switch (kind_) {
    case Kind::kChatml:
      return "chatml";
    case Kind::kTulu:
      return "tulu";
    case Kind::kLlama2:
      return "llama2";
    case Kind::kDeepseek3:
      return "deepseek3";
    case Kind::kHarmony:
      return "harmony";
    case Kind::kGlm45:
      return "glm4.5";
  }
  return "";
}

Result<ChatPrompt> ChatTemplate::Render(std::span<const ChatMessage> messages,
                                        bool add_generation_prompt) const {
  return Render(messages, add_generation_prompt, OrderedJson());
}

Result<ChatPrompt> ChatTemplate::Render(std::span<const ChatMessage> messages,
                                        bool add_generation_prompt, const OrderedJson& tools,
                                        bool enable_thinking) const {
  ChatTemplateKwargs kwargs;
  kwargs.enable_thinking = enable_thinking;
  return Render(messages, add_generation_prompt, tools, kwargs);
}

namespace {

// The local date as strftime_now("%Y-%m-%d") prints it.
std::string Today() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[16];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d", &local);
  return buf;
}

}  // namespace

Result<ChatPrompt> ChatTemplate::Render(std::span<const ChatMessage> messages,
                                        bool add_generation_prompt, const OrderedJson& tools,
                                        const ChatTemplateKwargs& kwargs) const {
  const bool enable_thinking = kwargs.enable_thinking.value_or(true);
  if (messages.empty()) return InvalidArgument("chat: no messages");
  if (!tools.is_null() && !tools.is_array()) {
    return InvalidArgument("chat: tools must be an array (got {})", tools.type_name());
  }
  if (kwargs.reasoning_effort) MT_RETURN_IF_ERROR(CheckReasoningEffort(*kwargs.reasoning_effort));
  if (kind_ == Kind::kHarmony) {
    return chat_internal::RenderHarmony(messages, add_generation_prompt, tools, kwargs,
                                        date_.empty() ? Today() : date_);
  }
  if (kind_ == Kind::kGlm45) {
    return chat_internal::RenderGlm45(messages, add_generation_prompt, tools, kwargs);
  }
  if (kind_ != Kind::kChatml) {
    constexpr std::string_view kNeedChatml =
        "tools need a chatml (Qwen), harmony (gpt-oss) or glm4.5 model";
    // (DeepSeek's own tool format, <｜tool▁calls▁begin｜>..., is not rendered.)
    if (!tools.empty()) {
      return InvalidArgument("chat format {} has no tool calls; {}", name(), kNeedChatml);
    }
    for (size_t i = 0; i < messages.size(); ++i) {
      const std::string& r = messages[i].role;
      if (r == "tool") {
        return InvalidArgument("chat format {} has no tool calls (message {} has role 'tool'); {}",
                               name(), i, kNeedChatml);
      }
      if (!messages[i].tool_calls.empty()) {
        return InvalidArgument("chat format {} has no tool calls (message {} has tool_calls); {}",
                               name(), i, kNeedChatml);
      }
      if (r != "system" && r != "user" && r != "assistant") {
        // {:?}: quoted and escaped, so a role with a newline keeps the error on one line.
        return InvalidArgument("chat: message {} has role {:?} ({} knows system, user, assistant)",
                               i, r, name());
      }
    }
  }
  ChatPrompt p{"", false};
  switch (kind_) {
    case Kind::kChatml:
      p = RenderChatml(messages, add_generation_prompt, tools, thinking_, default_system_,
                       enable_thinking);
      break;
    case Kind::kTulu:
      p.add_bos = true;
      for (const ChatMessage& m : messages) {
        if (m.role == "assistant") {
          p.text += "<|assistant|>\n" + m.content + eos_text_ + "\n";
        } else {
          p.text += "<|" + m.role + "|>\n" + m.content + "\n";
        }
      }
      if (add_generation_prompt) p.text += "<|assistant|>\n";
      break;
    case Kind::kLlama2: {
      p.add_bos = true;
      bool in_turn = true;
      p.text = "[INST] ";
      for (const ChatMessage& m : messages) {
        if (!in_turn) {
          p.text += "[INST] ";
          in_turn = true;
        }
        if (m.role == "system") {
          p.text += m.content + "\n";
        } else if (m.role == "user") {
          p.text += m.content + " [/INST]";
        } else {
          p.text += m.content + "</s>";
          in_turn = false;
        }
      }
      break;
    }
    case Kind::kDeepseek3:
      p = RenderDeepseek3(messages, add_generation_prompt, thinking_);
      break;
    case Kind::kHarmony:
    case Kind::kGlm45:
      break;  // rendered above
  }
  return p;
}

Result<ChatTemplateKwargs> ChatTemplateKwargsFromJson(const nlohmann::json& kwargs) {
  if (!kwargs.is_object()) {
    return InvalidArgument(
        "chat_template_kwargs must be a JSON object, not {} (e.g. "
        "{{\"enable_thinking\": false}})",
        kwargs.type_name());
  }
  ChatTemplateKwargs k;
  if (const auto it = kwargs.find("enable_thinking"); it != kwargs.end() && !it->is_null()) {
    if (!it->is_boolean()) {
      return InvalidArgument("chat_template_kwargs.enable_thinking must be true or false, not {}",
                             it->dump());
    }
    k.enable_thinking = it->get<bool>();
  }
  if (const auto it = kwargs.find("reasoning_effort"); it != kwargs.end() && !it->is_null()) {
    if (!it->is_string() || !CheckReasoningEffort(it->get<std::string>()).ok()) {
      return InvalidArgument(
          "chat_template_kwargs.reasoning_effort must be \"low\", \"medium\" or \"high\", not "
          "{}",
          it->dump());
    }
    k.reasoning_effort = it->get<std::string>();
  }
  return k;
}

Status CheckReasoningEffort(std::string_view effort) {
  if (effort == "low" || effort == "medium" || effort == "high") return Status::Ok();
  return InvalidArgument("reasoning_effort must be \"low\", \"medium\" or \"high\", not {:?}",
                         effort);
}

Result<ChatTemplateKwargs> ParseChatTemplateKwargs(std::string_view json_text) {
  if (const size_t depth = JsonDepth(json_text); depth > kMaxJsonDepth) {
    return InvalidArgument(
        "chat_template_kwargs nests arrays and objects {} levels deep; at most {} "
        "are allowed",
        depth, kMaxJsonDepth);
  }
  const nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return InvalidArgument(
        "chat_template_kwargs is not valid JSON (e.g. "
        "{{\"enable_thinking\": false}})");
  }
  return ChatTemplateKwargsFromJson(j);
}

}  // namespace mt
