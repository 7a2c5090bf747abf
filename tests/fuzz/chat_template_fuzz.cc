// Fuzzes the chat templates (src/tokenizer/chat_template.h): the input is a Jinja template as
// a GGUF may carry it (untrusted: Detect, DetectThinking, DetectDefaultSystem, ForModel), a
// NUL byte, then a conversation as JSON ({"messages": [{role, content, reasoning_content,
// tool_calls: [{name, arguments}]}], "tools": [...]}) rendered by every format with and
// without thinking (a conversation nested past kMaxJsonDepth is none, as the server refuses
// it). Any bytes must give a template or a one-line error, and a rendering or
// a one-line error, never a crash; chatml, deepseek3, harmony and glm4.5 render every user
// message's content (deepseek3 every system message's too).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/json_depth.h"
#include "tokenizer/chat_template.h"

namespace {

using Json = nlohmann::ordered_json;

std::string StringOr(const Json& j, const char* key) {
  if (!j.is_object()) return "";
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

std::vector<mt::ChatMessage> Messages(const Json& body) {
  std::vector<mt::ChatMessage> out;
  const auto it = body.is_object() ? body.find("messages") : body.end();
  if (it == body.end() || !it->is_array()) return out;
  for (const Json& m : *it) {
    mt::ChatMessage& c =
        out.emplace_back(mt::ChatMessage{StringOr(m, "role"), StringOr(m, "content")});
    if (m.is_object() && m.contains("reasoning_content")) {
      c.reasoning_content = StringOr(m, "reasoning_content");
    }
    const auto calls = m.is_object() ? m.find("tool_calls") : m.end();
    if (calls == m.end() || !calls->is_array()) continue;
    for (const Json& call : *calls) {
      c.tool_calls.push_back({StringOr(call, "name"), StringOr(call, "arguments")});
    }
  }
  return out;
}

void CheckError(const mt::Status& s) {
  if (s.ok() || s.message().empty() || s.message().find('\n') != std::string::npos) {
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view jinja = input.substr(0, nul);
  const std::string_view conversation =
      nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);

  (void)mt::ChatTemplate::DetectThinking(jinja);
  const std::string system = mt::ChatTemplate::DetectDefaultSystem(jinja);
  if (system.find_first_of("'\"\\{}") != std::string::npos) __builtin_trap();
  if (mt::Result<mt::ChatTemplate::Kind> k = mt::ChatTemplate::Detect(jinja); !k.ok()) {
    CheckError(k.status());
  }
  std::vector<mt::ChatTemplate> templates;
  for (const char* arch :
       {"qwen3moe", "qwen2moe", "olmoe", "llama", "deepseek2", "gpt-oss", "glm4moe"}) {
    mt::Result<mt::ChatTemplate> t = mt::ChatTemplate::ForModel(jinja, arch, "</s>");
    if (t.ok()) {
      templates.push_back(std::move(t).value());
    } else {
      CheckError(t.status());
    }
  }
  templates.emplace_back(mt::ChatTemplate::Kind::kChatml, "", "fuzz",
                         mt::ChatThinking{.history = true, .switchable = true, .forced_open = true},
                         system);
  // DeepSeek-R1's rules (ForModel gives V3's plain format for deepseek2 without a template).
  templates.emplace_back(mt::ChatTemplate::Kind::kDeepseek3, "", "fuzz",
                         mt::ChatThinking{.history = true, .forced_open = true});

  // Nested past kMaxJsonDepth, no conversation, as the server refuses such a request body.
  const Json body = mt::ParseJsonWithinDepth<Json>(conversation);
  const std::vector<mt::ChatMessage> messages = Messages(body);
  const Json none;
  const auto tools_it = body.is_object() ? body.find("tools") : body.end();
  const Json& tools = tools_it != body.end() ? *tools_it : none;  // not copied: copies recurse
  for (const mt::ChatTemplate& t : templates) {
    for (bool thinking : {true, false}) {
      mt::Result<mt::ChatPrompt> p = t.Render(messages, thinking, tools, thinking);
      if (!p.ok()) {
        CheckError(p.status());
        continue;
      }
      const bool deepseek = t.kind() == mt::ChatTemplate::Kind::kDeepseek3;
      if (t.kind() == mt::ChatTemplate::Kind::kTulu ||
          t.kind() == mt::ChatTemplate::Kind::kLlama2) {
        continue;
      }
      for (const mt::ChatMessage& m : messages) {
        const bool rendered = m.role == "user" || (deepseek && m.role == "system");
        if (rendered && p->text.find(m.content) == std::string::npos) __builtin_trap();
      }
    }
  }
  (void)mt::ParseChatTemplateKwargs(conversation);
  return 0;
}
