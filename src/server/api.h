// The OpenAI wire format of `moetier serve`: parsing and validating the bodies of
// POST /v1/completions and POST /v1/chat/completions, and building the JSON the server
// sends back (responses, SSE chunks, error objects).
//
// Depends only on base and nlohmann-json, so the parser can be fuzzed on its own
// (tests/fuzz/server_request_fuzz.cc). Every function is thread-safe (no shared state).
//
// What is accepted (anything else is a 400 with an OpenAI-style error naming the field):
//   model        required; must equal the served model's id.
//   prompt       (completions) a string, an array of one string, an array of token ids, or
//                an array of one array of token ids. Token ids are range-checked later
//                against the vocabulary (the parser does not know it).
//   messages     (chat) a non-empty array of {role: string, content: string | null |
//                [{type: "text", text: string}, ...]}; the text parts are concatenated.
//                Role "developer" is taken as "system".
//   max_tokens   integer >= 1 or null (chat also takes max_completion_tokens). Default:
//                16 for completions (OpenAI's), until the context is full for chat.
//   temperature  number in [0, 2]; top_p in [0, 1]; top_k integer >= 0 (extension);
//                min_p in [0, 1] (extension); repeat_penalty > 0 (extension).
//                Defaults are `moetier run`'s: 0.8, 0.95, 40, 0.05, 1.0.
//   presence_penalty, frequency_penalty: numbers in [-2, 2], default 0, over the last 64
//                tokens (prompt included), as llama.cpp's server applies them.
//   stop         a string or an array of at most 16 non-empty strings.
//   seed         integer (any); absent: a fresh seed per request.
//   stream       bool; stream_options.include_usage bool.
//   n, best_of   1 if present. logprobs/top_logprobs/echo: only false/null/0.
//   ignore_eos   bool (extension): keep generating after end-of-generation tokens.
//   tools, functions, logit_bias: only empty. response_format: only {"type": "text"}.
// Unknown fields are ignored, as other OpenAI-compatible servers do.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace mt::server {

enum class Endpoint { kCompletions, kChat };

struct ApiMessage {
  std::string role;
  std::string content;
};

struct SamplingRequest {
  float temperature = 0.8f;
  float top_p = 0.95f;
  int32_t top_k = 40;
  float min_p = 0.05f;
  float repeat_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::optional<uint64_t> seed;  // absent: the server picks one
};

struct ApiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  // Completions: the prompt as text, or as token ids (prompt_is_tokens).
  std::string prompt;
  std::vector<int64_t> prompt_tokens;  // (n_prompt) unchecked ids
  bool prompt_is_tokens = false;
  std::vector<ApiMessage> messages;  // chat
  std::optional<int64_t> max_tokens;  // absent: the endpoint's default
  SamplingRequest sampling;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool ignore_eos = false;
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

// {"error": {...}} for `e`.
nlohmann::json ErrorJson(const ApiError& e);

// Serializes `j` on one line; invalid UTF-8 in strings (a model can emit any bytes) becomes
// U+FFFD instead of throwing.
std::string Dump(const nlohmann::json& j);

// Token counts of a response: prompt_tokens, completion_tokens and their sum.
struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};
nlohmann::json UsageJson(const Usage& u);

// Identifies one response: id ("cmpl-..." or "chatcmpl-..."), created (Unix seconds) and
// the model id, repeated in every chunk of a stream.
struct ResponseMeta {
  std::string id;
  int64_t created = 0;
  std::string model;
};

// The whole (non-streamed) response; finish_reason is "stop" or "length".
nlohmann::json CompletionJson(Endpoint endpoint, const ResponseMeta& meta, const std::string& text,
                              std::string_view finish_reason, const Usage& usage);

// One chunk of a stream: `text` as a delta; `finish_reason` empty means null. For chat,
// `first` adds role "assistant" to the delta.
nlohmann::json ChunkJson(Endpoint endpoint, const ResponseMeta& meta, const std::string& text,
                         std::string_view finish_reason, bool first);

// The last chunk of a stream with stream_options.include_usage: empty choices and usage.
nlohmann::json UsageChunkJson(Endpoint endpoint, const ResponseMeta& meta, const Usage& usage);

// "data: <json>\n\n".
std::string SseEvent(const nlohmann::json& j);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace mt::server
