// Chat prompts for the built-in templates. moetier does not run Jinja: it recognises which
// known format a GGUF's tokenizer.chat_template is (by marker strings, as llama.cpp's
// llm_chat_detect_template does), or falls back to the architecture's format, and renders
// that format itself.
//
// Formats (what a rendered prompt looks like):
//   chatml  (Qwen2/Qwen3 MoE):  "<|im_start|>{role}\n{content}<|im_end|>\n" per message, then
//           "<|im_start|>assistant\n" with add_generation_prompt. No default system prompt
//           (as llama.cpp's chatml; Qwen3's template adds none either). Qwen3's thinking
//           switches are not rendered: the model decides whether to think.
//   tulu    (OLMoE-1B-7B-0924-Instruct, "{{ bos_token }}" + the Tulu template):
//           "<|system|>\n{c}\n", "<|user|>\n{c}\n", "<|assistant|>\n{c}{eos}\n", then
//           "<|assistant|>\n" with add_generation_prompt (HF renders the template with
//           trim_blocks, so each "{{ ... }}\n" keeps its newline). Wants BOS first.
//   llama2  (Mixtral-8x7B-Instruct "[INST]"; llama.cpp's LLAMA_2 rendering):
//           "[INST] " then per message: system "{c}\n", user "{c} [/INST]", assistant
//           "{c}</s>" followed by "[INST] " before the next message. Wants BOS first. The
//           generation prompt is implicit (the text ends with " [/INST]").
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace mt {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" (chatml accepts any role name)
  std::string content;
};

struct ChatPrompt {
  std::string text;  // the rendered prompt; encode it with parse_special = true
  bool add_bos;      // put BOS before `text` (the template starts with the BOS token)
};

class ChatTemplate {
 public:
  enum class Kind { kChatml, kTulu, kLlama2 };

  // The format of a Jinja template by its markers; Unimplemented if none is recognised.
  static Result<Kind> Detect(std::string_view jinja);
  // The format an architecture's instruct models use: qwen2moe, qwen3moe, qwen2, qwen3 ->
  // chatml; olmoe -> tulu; llama (Mixtral) -> llama2. Unimplemented for others.
  static Result<Kind> ForArchitecture(std::string_view architecture);
  // By name: "chatml", "tulu", "llama2" (also "mistral", "mixtral"). InvalidArgument else.
  static Result<Kind> ByName(std::string_view name);

  // Picks the format for a model: the GGUF's tokenizer.chat_template when its format is
  // recognised, else the architecture's. `eos_text` is the text of the EOS token (tulu
  // renders it after assistant turns; llama2 uses "</s>" literally).
  static Result<ChatTemplate> ForModel(std::string_view jinja, std::string_view architecture,
                                       std::string eos_text);
  ChatTemplate(Kind kind, std::string eos_text, std::string origin)
      : kind_(kind), eos_text_(std::move(eos_text)), origin_(std::move(origin)) {}

  Kind kind() const { return kind_; }
  // "chatml", "tulu" or "llama2".
  std::string_view name() const;
  // Where the choice came from: "tokenizer.chat_template", "architecture <arch>" or "name".
  const std::string& origin() const { return origin_; }

  // Renders `messages`. Errors (InvalidArgument): no messages; for tulu and llama2 a role
  // other than system/user/assistant.
  Result<ChatPrompt> Render(std::span<const ChatMessage> messages,
                            bool add_generation_prompt) const;

 private:
  Kind kind_;
  std::string eos_text_;
  std::string origin_;
};

}  // namespace mt
