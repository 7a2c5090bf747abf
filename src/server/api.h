// The OpenAI wire format of `moetier serve`: parsing and validating the bodies of
// POST /v1/completions and POST /v1/chat/completions, and building the JSON the server
// sends back (responses, SSE chunks, error objects).
//
// Depends only on base, tokenizer (utf8, chat template kwargs) and nlohmann-json, so the
// parser can be fuzzed on its own (tests/fuzz/server_request_fuzz.cc). Every function is
// thread-safe (no shared state).
//
// What is accepted (anything else is a 400 with an OpenAI-style error naming the field):
//   model        required; must equal the served model's id.
//   prompt       (completions) a string or an array of token ids, or a batch of up to 64 of
//                them (an array of strings or of token-id arrays; each prompt gets its choice,
//                in order). Token ids are range-checked later against the
//                vocabulary (the parser does not know it).
//   messages     (chat) a non-empty array of {role: string, content: string | null |
//                [{type: "text", text: string}, ...]}; the text parts are concatenated.
//                Role "developer" is taken as "system".
//   max_tokens   integer >= 1 (completions: >= 0) or null (chat also takes
//                max_completion_tokens). Default:
//                16 for completions (OpenAI's), until the context is full for chat.
//   temperature  number in [0, 2]; top_p in [0, 1]; top_k integer, <= 0 off (extension);
//                min_p in [0, 1] (extension); repeat_penalty > 0 (extension).
//                Defaults are `moetier run`'s: 0.8, 0.95, 40, 0.05, 1.0.
//   presence_penalty, frequency_penalty: numbers in [-2, 2], default 0, over the last 64
//                tokens (prompt included), as llama.cpp's server applies them.
//   stop         a string or an array of at most 16 non-empty strings.
//   seed         integer (any); absent: a fresh seed per request.
//   stream       bool; stream_options.include_usage bool.
//   logprobs     completions: integer in [0, 20], alternatives per token (the token's own
//                log-probability always comes too); chat: bool, with top_logprobs in [0, 20].
//                Log-probabilities are the model's: log-softmax of the logits, before
//                penalties and temperature (as vLLM's default and OpenAI's).
//   suffix       string, completions only: the text that follows the completion; the
//                model fills in the middle (its FIM tokens, e.g. Qwen coders' <|fim_prefix|>,
//                <|fim_suffix|>, <|fim_middle|>; a model without them: 400). Not with echo.
//   echo         bool, completions only: the prompt is prepended to the text and, with
//                logprobs, its tokens to the entries (the first token has none). max_tokens
//                may then be 0 (score the prompt only).
//   n            choices per prompt, 1-64 (prompts x n at most 64); with a seed, choice k
//                samples with seed + k. best_of: only equal to n.
//   ignore_eos   bool (extension): keep generating after end-of-generation tokens.
//   cache_prompt bool (extension, llama-server's): default true, reuse the KV cache of the
//                longest prefix of the prompt that a slot already holds (the same bits).
//   logit_bias   {"<token id>": number in [-100, 100]}, added to the logit before sampling
//                (greedy included; -100 all but bans a token). Ids are range-checked later.
//   response_format  {"type": "text" | "json_object" | "json_schema", "json_schema":
//                {"schema": {...}}}: the output is constrained to a JSON object, or to a
//                document the schema accepts (grammar/json_schema.h says which keywords);
//                a thinking model's <think> block stays free (grammar/chat_answer.h).
//   grammar      GBNF text (extension, llama-server's): the whole output follows it,
//                reasoning included.
//   json_schema, guided_json  a schema (extensions, llama-server's and vLLM's names).
//                At most one of these four constrains a request; compile errors are 400s.
//   tools        (chat) [{type: "function", function: {name, description, parameters}}]:
//                rendered into the prompt by the chat template (chatml, harmony and glm4.5
//                models; the last two take tool_choice auto or none only); the output's
//                tool call blocks come back as message.tool_calls, finish_reason
//                "tool_calls". tool_choice: "auto" (default with tools), "none", "required"
//                or {type: "function", function: {name}} (the last two constrain the output
//                to calls, with arguments following each function's parameters schema;
//                after the reasoning, for a thinking model).
//                parallel_tool_calls: false allows one call. With a JSON response format
//                (response_format, json_schema, guided_json) and tool_choice auto, the output
//                is calls or a document of the format; required/named calls and GBNF
//                grammars do not combine with tools. Messages may carry
//                tool_calls (assistant) and role "tool" with tool_call_id. functions: only
//                empty.
//   chat_template_kwargs  (chat) {"enable_thinking": bool}: false asks a Qwen3 or GLM-4.5
//                hybrid model to answer without reasoning (tokenizer/chat_template.h);
//                {"reasoning_effort": "low" | "medium" | "high"}: gpt-oss's reasoning (also
//                taken as the top-level reasoning_effort, OpenAI's field); other keys are
//                ignored, as the template would. Assistant messages may carry
//                reasoning_content (a string or null): Qwen3's, GLM-4.5's and gpt-oss's
//                templates render it.
// Unknown fields are ignored, as other OpenAI-compatible servers do.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "grammar/grammar.h"

namespace mt::server {

enum class Endpoint { kCompletions, kChat };

// A function call, asked for by the model (a response's tool_calls) or sent back in an
// assistant message of the conversation.
struct ApiToolCall {
  std::string id;  // "call_..." (may be empty in a request)
  std::string name;
  std::string arguments;  // JSON text of the arguments object
};

struct ApiMessage {
  std::string role;
  std::string content;
  std::vector<ApiToolCall> tool_calls = {};  // assistant messages that called tools
  std::optional<std::string> reasoning_content = std::nullopt;  // assistant: sent apart
};

// A function the model may call: its name and the JSON schema of its arguments.
struct ApiTool {
  std::string name;
  nlohmann::ordered_json parameters;  // {"type": "object"} when the tool gives none
};

enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

// A completions prompt: text, or token ids.
struct ApiPrompt {
  std::string text;
  std::vector<int64_t> tokens;  // (n_prompt) unchecked ids, when is_tokens
  bool is_tokens = false;
};

struct SamplingRequest {
  float temperature = 0.8f;
  float top_p = 0.95f;
  int32_t top_k = 40;
  float min_p = 0.05f;
  float repeat_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::optional<uint64_t> seed;                       // absent: the server picks one
  std::vector<std::pair<int64_t, float>> logit_bias;  // (unchecked token id, bias)
};

struct ApiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  std::vector<ApiPrompt> prompts;     // completions: one, or a batch (a choice each)
  std::optional<std::string> suffix;  // completions: fill in the middle before this text
  std::vector<ApiMessage> messages;   // chat
  std::optional<int64_t> max_tokens;  // absent: the endpoint's default
  SamplingRequest sampling;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool ignore_eos = false;
  bool cache_prompt = true;    // extension: reuse a slot's KV cache for a shared prefix
  int64_t max_predict_ms = 0;  // llama-server's t_max_predict_ms (native endpoints); 0: none
  int32_t n = 1;               // choices per prompt
  int32_t logprobs = -1;       // alternatives per token in the logprobs; -1: no logprobs
  bool echo = false;           // completions: prepend the prompt
  // The grammar the output must follow (response_format, grammar, json_schema); null: none.
  std::shared_ptr<const grammar::Grammar> grammar;
  std::string grammar_gbnf;  // its GBNF text (start rule root)
  // The JSON schema that grammar comes from, when it is one (json_object: {"type":
  // "object"}): with tools (auto) the output is calls or a document of it.
  std::optional<nlohmann::ordered_json> format_schema;
  // Chat: the functions the model may call, the tools array as sent (key order kept: it is
  // rendered into the prompt), and whether it must call one (or the named one).
  std::vector<ApiTool> tools;
  nlohmann::ordered_json tools_json;
  ToolChoice tool_choice = ToolChoice::kNone;  // kAuto by default when tools are given
  std::string tool_choice_name;                // kNamed: the function
  bool parallel_tool_calls = true;
  // Chat: chat_template_kwargs.enable_thinking; absent: the server's default.
  std::optional<bool> enable_thinking;
  // Chat: chat_template_kwargs.reasoning_effort, else the request's reasoning_effort; absent:
  // the server's default.
  std::optional<std::string> reasoning_effort;
};

// A request the server refuses: the HTTP status and the OpenAI error object
// {"error": {"message", "type", "param", "code"}}. `param` and `code` empty mean null.
struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;
  std::string code;
};

// Parses and checks a request body for `endpoint`. `model_id` is the id the server serves
// (GET /v1/models). Errors: malformed JSON, a field of the wrong type or out of range, a
// missing required field, an unknown model, an unsupported option; each names the field.
// Never throws, whatever `body` holds.
std::optional<ApiError> ParseRequest(std::string_view body, Endpoint endpoint,
                                     std::string_view model_id, ApiRequest* out);

// POST /tokenize: vLLM's {prompt, add_special_tokens = true} or llama.cpp's {content,
// add_special = false}; add_special puts the BOS token first where the model has one.
// Special tokens' text in the prompt is always read as those tokens (as HF tokenizers do).
struct TokenizeRequest {
  std::string text;
  bool add_special = true;
};
std::optional<ApiError> ParseTokenizeRequest(std::string_view body, std::string_view model_id,
                                             TokenizeRequest* out);

// POST /detokenize: {tokens: [ids]} (range-checked later against the vocabulary).
struct DetokenizeRequest {
  std::vector<int64_t> tokens;
};
std::optional<ApiError> ParseDetokenizeRequest(std::string_view body, std::string_view model_id,
                                               DetokenizeRequest* out);

// POST /infill, llama-server's code completion (llama.vscode, llama.vim): the text before and
// after the cursor, more files as context, and the sampling fields of /v1/completions (as
// ParseRequest reads them; n_predict -1 or absent: generate up to the context's end; seed -1
// and t_max_predict_ms as /completion's). The prompt is built from them by InfillPrompt
// (generation.h). Not streamed: stream true is a 400. Fields llama-server takes for its own
// machinery (samplers, t_max_prompt_ms, which it does not implement either, id_slot,
// response_fields, ...) are accepted and ignored.
struct InfillChunk {
  std::string filename;  // "tmp" when not given, as llama-server
  std::string text;
};
struct InfillRequest {
  ApiRequest api;      // sampling, stop, max_tokens, cache_prompt; no prompt yet
  std::string prefix;  // input_prefix: the text before the cursor
  std::string suffix;  // input_suffix: the text after it
  std::string prompt;  // prompt: text that follows the prefix (llama.vscode: the cursor's line)
  std::vector<InfillChunk> extra;  // input_extra: other files, oldest first
};
std::optional<ApiError> ParseInfillRequest(std::string_view body, std::string_view model_id,
                                           InfillRequest* out);

// {"error": {...}} for `e`.
nlohmann::json ErrorJson(const ApiError& e);

// Serializes `j` on one line; invalid UTF-8 in strings (a model can emit any bytes) becomes
// U+FFFD instead of throwing.
std::string Dump(const nlohmann::json& j);

// Token counts of a response: prompt_tokens, completion_tokens, their sum, and
// prompt_tokens_details.cached_tokens (OpenAI's name for prompt tokens not recomputed).
struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // of the prompt tokens, those found in the KV cache
};
nlohmann::json UsageJson(const Usage& u);

// Identifies one response: id ("cmpl-..." or "chatcmpl-..."), created (Unix seconds) and
// the model id, repeated in every chunk of a stream.
struct ResponseMeta {
  std::string id;
  int64_t created = 0;
  std::string model;
};

// One token of a response's logprobs.
struct LogprobEntry {
  std::string token;             // its bytes (a piece may hold part of a UTF-8 character)
  std::optional<float> logprob;  // absent: none (the first token of an echoed prompt)
  std::vector<std::pair<std::string, float>> top;  // (top_n) the most likely, descending
  int64_t text_offset = 0;  // code points of the response's text before the token
};

// choices[].logprobs for `entries`. Completions: {tokens, token_logprobs, top_logprobs (an
// object of the alternatives and the token itself), text_offset}. Chat: {content: [{token,
// logprob, bytes, top_logprobs: [{token, logprob, bytes}]}], refusal: null}. A token that is
// not valid UTF-8 on its own is shown as OpenAI shows it, "bytes:\xe2\x80"; chat's `bytes`
// hold it exactly.
nlohmann::json LogprobsJson(Endpoint endpoint, std::span<const LogprobEntry> entries);

// One choice of a whole response: finish_reason is "stop" or "length"; logprobs null when
// none were asked for.
struct Choice {
  std::string text;
  std::string finish_reason;
  nlohmann::json logprobs;
  std::vector<ApiToolCall> tool_calls = {};   // chat: message.tool_calls (content null if none)
  std::optional<std::string> reasoning = {};  // chat: message.reasoning_content, if it thought
};

// The whole (non-streamed) response: choices in order (index 0, 1, ...) and the usage of all.
nlohmann::json CompletionJson(Endpoint endpoint, const ResponseMeta& meta,
                              std::span<const Choice> choices, const Usage& usage);

// One chunk of a stream, of choice `index`: `text` as a delta; `finish_reason` empty means
// null. For chat, `first` adds role "assistant" to the delta. `logprobs`: the entries of this
// chunk's text.
nlohmann::json ChunkJson(Endpoint endpoint, const ResponseMeta& meta, const std::string& text,
                         std::string_view finish_reason, bool first,
                         const nlohmann::json& logprobs = nullptr, int index = 0);

// A chat chunk of choice `index` whose delta is reasoning: {"reasoning_content": text}.
nlohmann::json ReasoningChunkJson(const ResponseMeta& meta, const std::string& text, int index);

// A chat chunk of choice `index` whose delta holds `calls` (tool_calls entries with their
// index, id, type and the whole function {name, arguments}).
nlohmann::json ToolCallsChunkJson(const ResponseMeta& meta, std::span<const ApiToolCall> calls,
                                  int index);

// The last chunk of a stream with stream_options.include_usage: empty choices and usage.
nlohmann::json UsageChunkJson(Endpoint endpoint, const ResponseMeta& meta, const Usage& usage);

// POST /completion, llama-server's native completion (SillyTavern's and llama.cpp's own
// clients): prompt (one: text or token ids), n_predict (-1 or absent: up to the context's
// end), stream, the sampling fields of /v1/completions (logit_bias also as llama-server's
// [[id, bias or false]], false as -100; seed -1: a random one, as llama-server), grammar and
// json_schema, t_max_predict_ms (after that long generating, stop at a newline: editors bound
// a completion's latency so). n_probs above 0 is refused (use /v1/completions' logprobs);
// llama-server's machinery fields are ignored. Answered with NativeCompletionJson, streamed as
// its chunks (content pieces, then the final object).
std::optional<ApiError> ParseNativeCompletionRequest(std::string_view body,
                                                     std::string_view model_id, ApiRequest* out);

// llama-server's native (non-OpenAI) response, which /infill and /completion clients read:
// content, stop, model, tokens_predicted, tokens_evaluated, tokens_cached (positions the
// slot's KV cache holds at the end), truncated, stop_type ("eos", "word" for a stop string,
// "limit"), has_new_line, prompt, and timings {prompt_n (tokens evaluated, not found in the
// cache), prompt_ms, prompt_per_token_ms, prompt_per_second, predicted_n, predicted_ms,
// predicted_per_token_ms, predicted_per_second}.
struct NativeCompletion {
  std::string content;
  std::string prompt;     // the prompt's text, special tokens shown
  std::string stop_type;  // "eos", "word", "limit"
  Usage usage;
  double prompt_ms = 0;     // the prompt's evaluation (admission to the first token)
  double predicted_ms = 0;  // the first token to the end
};
nlohmann::json NativeCompletionJson(const ResponseMeta& meta, const NativeCompletion& c);

// "data: <json>\n\n".
std::string SseEvent(const nlohmann::json& j);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace mt::server
