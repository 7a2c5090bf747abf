#include "tokenizer/chat_template.h"

namespace mt {
namespace {

bool Contains(std::string_view s, std::string_view needle) {
  return s.find(needle) != std::string_view::npos;
}

}  // namespace

Result<ChatTemplate::Kind> ChatTemplate::Detect(std::string_view t) {
  // Order and markers follow llama.cpp's detection for the formats moetier knows; tulu is
  // recognised before llama.cpp's generic "<|user|>"/"<|assistant|>" families because
  // llama.cpp has no tulu format (it would take OLMoE's template for GLM-Edge).
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
  return Unimplemented("chat template not recognised (known: chatml, tulu, llama2 [INST])");
}

Result<ChatTemplate::Kind> ChatTemplate::ForArchitecture(std::string_view arch) {
  if (arch == "qwen2moe" || arch == "qwen3moe" || arch == "qwen2" || arch == "qwen3") {
    return Kind::kChatml;
  }
  if (arch == "olmoe") return Kind::kTulu;
  if (arch == "llama") return Kind::kLlama2;
  return Unimplemented("no built-in chat template for architecture '{}'", arch);
}

Result<ChatTemplate::Kind> ChatTemplate::ByName(std::string_view name) {
  if (name == "chatml") return Kind::kChatml;
  if (name == "tulu") return Kind::kTulu;
  if (name == "llama2" || name == "mistral" || name == "mixtral") return Kind::kLlama2;
  return InvalidArgument("unknown chat template '{}' (chatml, tulu, llama2)", name);
}

Result<ChatTemplate> ChatTemplate::ForModel(std::string_view jinja, std::string_view architecture,
                                            std::string eos_text) {
  if (!jinja.empty()) {
    if (Result<Kind> k = Detect(jinja); k.ok()) {
      return ChatTemplate(*k, std::move(eos_text), "tokenizer.chat_template");
    }
  }
  Result<Kind> k = ForArchitecture(architecture);
  if (!k.ok()) {
    return Unimplemented("no chat template: tokenizer.chat_template is {} and {}",
                         jinja.empty() ? "absent" : "not a known format", k.status().message());
  }
  return ChatTemplate(*k, std::move(eos_text), fmt::format("architecture {}", architecture));
}

std::string_view ChatTemplate::name() const {
  switch (kind_) {
    case Kind::kChatml:
      return "chatml";
    case Kind::kTulu:
      return "tulu";
    case Kind::kLlama2:
      return "llama2";
  }
  return "";
}

Result<ChatPrompt> ChatTemplate::Render(std::span<const ChatMessage> messages,
                                        bool add_generation_prompt) const {
  if (messages.empty()) return InvalidArgument("chat: no messages");
  if (kind_ != Kind::kChatml) {
    for (size_t i = 0; i < messages.size(); ++i) {
      const std::string& r = messages[i].role;
      if (r != "system" && r != "user" && r != "assistant") {
        return InvalidArgument("chat: message {} has role '{}' ({} knows system, user, assistant)",
                               i, r, name());
      }
    }
  }
  ChatPrompt p{"", false};
  switch (kind_) {
    case Kind::kChatml:
      for (const ChatMessage& m : messages)
        p.text += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      if (add_generation_prompt) p.text += "<|im_start|>assistant\n";
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
  }
  return p;
}

}  // namespace mt
