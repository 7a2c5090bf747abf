// Chat prompts for the built-in templates. moetier does not run Jinja: it recognises which
// known format a GGUF's tokenizer.chat_template is (by marker strings, as llama.cpp's
// llm_chat_detect_template does), or falls back to the architecture's format, and renders
// that format itself.
//
// Formats (what a rendered prompt looks like):
//   chatml  (Qwen2/Qwen3 MoE):  "<|im_start|>{role}\n{content}<|im_end|>\n" per message, then
//           "<|im_start|>assistant\n" with add_generation_prompt. A default system message
//           only where the template writes one (DetectDefaultSystem). Tools and tool calls
//           follow Qwen3's own template (see Render below); roles it does not know are
//           rendered like any other (Qwen3's template drops them). A thinking template
//           (ChatThinking) also renders Qwen3's <think> blocks.
//   tulu    (OLMoE-1B-7B-0924-Instruct, "{{ bos_token }}" + the Tulu template):
//           "<|system|>\n{c}\n", "<|user|>\n{c}\n", "<|assistant|>\n{c}{eos}\n", then
//           "<|assistant|>\n" with add_generation_prompt (HF renders the template with
//           trim_blocks, so each "{{ ... }}\n" keeps its newline). Wants BOS first.
//   llama2  (Mixtral-8x7B-Instruct "[INST]"; llama.cpp's LLAMA_2 rendering):
//           "[INST] " then per message: system "{c}\n", user "{c} [/INST]", assistant
//           "{c}</s>" followed by "[INST] " before the next message. Wants BOS first. The
//           generation prompt is implicit (the text ends with " [/INST]").
//   deepseek3 (DeepSeek-V3 and R1, their tokenizer_config.json templates; llama.cpp's
//           "deepseek3" markers): wants BOS first; then the contents of all system messages,
//           wherever they are, joined by "\n\n"; then per message: user "<｜User｜>{c}",
//           assistant "<｜Assistant｜>{c}<｜end▁of▁sentence｜>" (the literal EOS text), system
//           nothing; then "<｜Assistant｜>" with add_generation_prompt. R1's template
//           (ChatThinking) renders only what follows an assistant turn's last "</think>" and
//           opens "<think>\n" after the generation prompt. No tool calls (the template's
//           tool format is not rendered: tools, tool calls and "tool" messages are errors).
//   harmony (OpenAI gpt-oss, its chat_template; OpenAI's "harmony" format): messages are
//           "<|start|>{header}<|message|>{body}<|end|>". First a system message (model
//           identity, "Knowledge cutoff: 2024-06", "Current date: {date}", "Reasoning:
//           {reasoning_effort}", the valid channels), then a developer message when the
//           conversation starts with a system message ("# Instructions\n\n{c}\n\n") or tools
//           are offered ("# Tools" and a TypeScript-like "namespace functions {...}"); user
//           turns; assistant turns as "<|start|>assistant<|channel|>final<|message|>{c}<|end|>";
//           tool calls as "<|start|>assistant to=functions.{name}<|channel|>commentary json
//           <|message|>{args}<|call|>" (after their reasoning, as the analysis channel, when no
//           later answer ends the run); tool results as "<|start|>functions.{name} to=assistant
//           <|channel|>commentary<|message|>{json string}<|end|>"; then "<|start|>assistant".
//           Every rule: chat_template_harmony.cc.
//   glm4.5  (GLM-4.5 and 4.6, glm4moe; their chat_template): "[gMASK]<sop>" first, then
//           "<|system|>\n{c}", "<|user|>\n{c}" ("/nothink" appended when enable_thinking is
//           false), "<|assistant|>\n<think>{reasoning}</think>" (reasoning only after the last
//           user message, else empty) + "\n{content}" + tool calls as "\n<tool_call>{name}" +
//           "\n<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>" per argument +
//           "\n</tool_call>"; tool results as "<|observation|>" + "\n<tool_response>\n{c}\n
//           </tool_response>" per result; tools listed in a first "<|system|>" block; the
//           generation prompt "<|assistant|>" (+ "\n<think></think>" when enable_thinking is
//           false).
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace mt {

// The tags around a thinking model's reasoning (Qwen3, DeepSeek-R1).
inline constexpr std::string_view kThinkOpen = "<think>";
inline constexpr std::string_view kThinkClose = "</think>";

// One function call made by an assistant turn (OpenAI's tool_calls[i].function).
struct ChatToolCall {
  std::string name;
  std::string arguments;  // JSON text, rendered as given (the template prints a string as is)
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool" (chatml accepts any role name)
  std::string content;
  std::vector<ChatToolCall> tool_calls = {};  // assistant messages that call tools
  // An assistant turn's reasoning, given apart from its content (a thinking template renders
  // it; see ChatThinking). nullopt: none given (the content may still hold a <think> block).
  std::optional<std::string> reasoning_content = std::nullopt;
};

struct ChatPrompt {
  std::string text;      // the rendered prompt; encode it with parse_special = true
  bool add_bos = false;  // put BOS before `text` (the template starts with the BOS token)
  // The text ends inside an open <think> block (a template that makes the model think), so
  // what the model writes starts as reasoning and its </think> ends it.
  bool thinking_open = false;
  // The model may open a <think> block itself (a hybrid model asked to think: Qwen3 with
  // enable_thinking on), so what it writes may start with reasoning.
  bool may_think = false;
};

// How a chatml template treats reasoning, read from its Jinja text (Qwen3's families):
//   history      ("reasoning_content" in the template: Qwen3, Qwen3-2507): an assistant turn
//                is split into reasoning and content (its reasoning_content, else the text
//                around its first and last "</think>"); turns up to the last real user query
//                (a user message that is not one "<tool_response>" block) keep only the
//                content; later turns (a tool-calling run) keep "<think>\n{reasoning}\n
//                </think>\n\n" when they have reasoning or end the conversation.
//   switchable   ("enable_thinking": Qwen3's hybrid models): enable_thinking = false adds an
//                empty "<think>\n\n</think>\n\n" after the generation prompt, so the model
//                answers at once.
//   forced_open  (the generation prompt is "<|im_start|>assistant\n<think>\n": Qwen3
//                Thinking-2507): the model's text starts inside the reasoning.
// Templates with none of these (Qwen2, Qwen2.5) render the content as given.
// A deepseek3 template (DeepSeek-R1's) has its own two:
//   history      ("content.split('</think>')"): an assistant turn renders only the text after
//                its last "</think>" (all of it when there is none; reasoning_content is not
//                rendered).
//   forced_open  (the generation prompt is "<｜Assistant｜><think>\n").
struct ChatThinking {
  bool history = false;
  bool switchable = false;
  bool forced_open = false;
};

// The chat template variables moetier's templates read, from chat_template_kwargs given as
// JSON text (the --chat-template-kwargs flag, as llama-server's): {"enable_thinking": bool,
// "reasoning_effort": "low" | "medium" | "high"}. Other keys are ignored, as a Jinja template
// ignores variables it does not use (gpt-oss's model_identity and builtin_tools are not
// rendered). InvalidArgument (one line) for text that is not a JSON object, an
// enable_thinking that is not a boolean, or another reasoning_effort.
struct ChatTemplateKwargs {
  std::optional<bool> enable_thinking;  // unset: the template's default (on)
  // gpt-oss's "Reasoning: ..." line; unset: the template's default ("medium").
  std::optional<std::string> reasoning_effort;
};

class ChatTemplate {
 public:
  enum class Kind { kChatml, kTulu, kLlama2, kDeepseek3, kHarmony, kGlm45 };

  // The format of a Jinja template by its markers; Unimplemented if none is recognised.
  static Result<Kind> Detect(std::string_view jinja);
  // The format an architecture's instruct models use: qwen2moe, qwen3moe, qwen2, qwen3 ->
  // chatml; olmoe -> tulu; llama (Mixtral) -> llama2; deepseek2 (DeepSeek-V3, R1) ->
  // deepseek3; gpt-oss -> harmony; glm4moe -> glm4.5. Unimplemented for others.
  static Result<Kind> ForArchitecture(std::string_view architecture);
  // By name: "chatml", "tulu", "llama2" (also "mistral", "mixtral"), "deepseek3", "harmony"
  // (also "gpt-oss"), "glm4.5" (also "glm4moe", "glm-4.5"). InvalidArgument else.
  static Result<Kind> ByName(std::string_view name);

  // Picks the format for a model: the GGUF's tokenizer.chat_template when its format is
  // recognised (with its ChatThinking), else the architecture's (qwen3moe and qwen3: Qwen3's
  // history and switch; deepseek2: DeepSeek-V3's, without R1's thinking). `eos_text` is the
  // text of the EOS token (tulu renders it after assistant turns; llama2 uses "</s>" and
  // deepseek3 "<｜end▁of▁sentence｜>" literally).
  static Result<ChatTemplate> ForModel(std::string_view jinja, std::string_view architecture,
                                       std::string eos_text);
  // What a template's Jinja text says about reasoning (chatml and deepseek3 templates, as
  // Detect finds them; {} otherwise).
  static ChatThinking DetectThinking(std::string_view jinja);
  // The system message a chatml template writes first when the conversation has none, as a
  // literal '<|im_start|>system\n...<|im_end|>\n' (Qwen2 and Qwen1.5 MoE: "You are a
  // helpful assistant."); empty when it writes none (Qwen3).
  static std::string DetectDefaultSystem(std::string_view jinja);
  ChatTemplate(Kind kind, std::string eos_text, std::string origin, ChatThinking thinking = {},
               std::string default_system = "")
      : kind_(kind),
        eos_text_(std::move(eos_text)),
        origin_(std::move(origin)),
        thinking_(thinking),
        default_system_(std::move(default_system)) {}

  Kind kind() const { return kind_; }
  // "chatml", "tulu", "llama2", "deepseek3", "harmony" or "glm4.5".
  std::string_view name() const;
  // Where the choice came from: "tokenizer.chat_template", "architecture <arch>" or "name".
  const std::string& origin() const { return origin_; }

  // True when Render accepts tools, tool calls and "tool" messages: chatml, harmony, glm4.5.
  bool supports_tools() const {
    return kind_ == Kind::kChatml || kind_ == Kind::kHarmony || kind_ == Kind::kGlm45;
  }
  // The date harmony's system message prints ("Current date: YYYY-MM-DD", as the template's
  // strftime_now("%Y-%m-%d")); empty (the default): the local date at each Render.
  void set_date(std::string date) { date_ = std::move(date); }
  const ChatThinking& thinking() const { return thinking_; }
  const std::string& default_system() const { return default_system_; }

  // Renders `messages` with no tools offered. Same as Render(messages, add_generation_prompt,
  // nullptr) below.
  Result<ChatPrompt> Render(std::span<const ChatMessage> messages,
                            bool add_generation_prompt) const;
  // Renders `messages`, offering `tools`: null or an array of tool objects exactly as the
  // client sent them (e.g. {"type": "function", "function": {"name": ..., "parameters":
  // ...}}); null or [] offers none. chatml renders as Qwen3's template does:
  //   - with tools, the prompt starts with one system block: the leading system message's
  //     content + "\n\n" (when there is one; it is then not rendered again), "# Tools ...
  //     <tools>", "\n" + HfToJson(tool) per tool, "\n</tools>" and the <tool_call> format
  //     instructions;
  //   - an assistant message renders its content, then per tool call
  //     "<tool_call>\n{\"name\": \"{name}\", \"arguments\": {arguments}}\n</tool_call>",
  //     each preceded by "\n" except the first when the content is empty; name and
  //     arguments are inserted as given (tool_calls of other roles are ignored, as there);
  //   - consecutive "tool" messages share one "<|im_start|>user" ... "<|im_end|>\n" block,
  //     each as "\n<tool_response>\n{content}\n</tool_response>".
  // `enable_thinking` is the template variable of that name (chat_template_kwargs): false
  // asks a switchable template for an answer without reasoning; other templates ignore it,
  // as Jinja ignores a variable a template does not read.
  // harmony and glm4.5 render as their templates do (the format list above; every rule in
  // chat_template_harmony.cc and chat_template_glm45.cc). Both read a tool call's arguments as
  // JSON (Hugging Face's templates take them as a mapping); harmony renders text that is not
  // JSON as a JSON string, glm4.5 wants an object (an empty text is {}).
  // Errors (InvalidArgument, one line): no messages; `tools` neither null nor an array; for
  // tulu, llama2 and deepseek3 (which have no tool format here) a non-empty `tools`, a "tool"
  // message, an assistant message with tool_calls, or a role other than
  // system/user/assistant; what the harmony and glm4.5 templates refuse (raise_exception):
  // harmony, an assistant content or reasoning holding "<|channel|>analysis<|message|>" or
  // "<|channel|>final<|message|>", a tool-calling turn with both content and reasoning, a
  // "tool" message with no tool call before it; glm4.5, arguments that are not a JSON object.
  // Thread-safe (const, no shared state); the result owns its text.
  Result<ChatPrompt> Render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                            const nlohmann::ordered_json& tools, bool enable_thinking = true) const;
  // The same with all of the template variables moetier reads (ChatTemplateKwargs above).
  Result<ChatPrompt> Render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                            const nlohmann::ordered_json& tools,
                            const ChatTemplateKwargs& kwargs) const;

 private:
  Kind kind_;
  std::string eos_text_;
  std::string origin_;
  ChatThinking thinking_;
  std::string default_system_;
  std::string date_;  // harmony's "Current date"; empty: today
};

// DeepSeek-R1's chat template, the Jinja text its tokenizer_config.json ships (DeepSeek-V3's
// with R1's reasoning rules): what synth writes into tokenizer.chat_template for DeepSeek
// presets. ForModel finds it deepseek3 with ChatThinking history and forced_open.
// (chat_template_data.cc)
std::string_view DeepseekR1ChatTemplate();

// harmony's control tokens as text (o200k_harmony's special tokens).
inline constexpr std::string_view kHarmonyStart = "<|start|>";
inline constexpr std::string_view kHarmonyChannel = "<|channel|>";
inline constexpr std::string_view kHarmonyMessage = "<|message|>";
inline constexpr std::string_view kHarmonyEnd = "<|end|>";
inline constexpr std::string_view kHarmonyConstrain = "<|constrain|>";

// Checks a reasoning_effort value: "low", "medium" or "high"; InvalidArgument else.
Status CheckReasoningEffort(std::string_view effort);
// chat_template_kwargs given as JSON text (ChatTemplateKwargs above says what is read).
Result<ChatTemplateKwargs> ParseChatTemplateKwargs(std::string_view json_text);
// The same from parsed JSON (a request's chat_template_kwargs field).
Result<ChatTemplateKwargs> ChatTemplateKwargsFromJson(const nlohmann::json& kwargs);

// Serializes `value` exactly as Hugging Face's `tojson` template filter does, i.e. Python's
// json.dumps(value, ensure_ascii=False) of the value json.loads would give: separators ", "
// and ": ", keys in the object's order, no indent; strings escape \" \\ \n \r \t \b \f and
// the other control characters below 0x20 as \u00xx (lowercase hex), everything else
// (non-ASCII, '/', U+007F) is copied raw; integers print as integers; floats as Python's
// repr (shortest round-trip digits; "1.0", "1e-05", "1e+16"); NaN and infinities as NaN,
// Infinity, -Infinity; true/false/null; "{}" and "[]".
// Differences from Python, for values Python cannot hold the same way: a byte of a string
// or key that is not part of valid UTF-8 becomes U+FFFD (one per byte); an integer outside
// int64/uint64 has already become a double when nlohmann parsed it (Python keeps the
// integer); a binary (or discarded) value prints as nlohmann's dump() does. Never throws;
// not recursive (any nesting depth is safe). Thread-safe.
std::string HfToJson(const nlohmann::ordered_json& value);

}  // namespace mt
