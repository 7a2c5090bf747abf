// Fuzzes the request parsers of `moetier serve` (src/server/api.cc). The first byte picks
// the endpoint (bit 2 set: /infill, or /completion with bit 0 set too; else bit 1 set:
// /tokenize, or /detokenize with bit 0 clear; else completions, or chat with bit 0 set), the
// rest is the body, which is also read as model output with tool
// calls (server/tool_calls.h, Hermes and GLM-4.5 blocks) and as gpt-oss's harmony messages
// (server/harmony.h), as a key file and an Authorization header (server/api_keys.h). Any
// bytes must give a parsed request or a 400 error object,
// never a crash or an exception, and what parses obeys the documented ranges.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "grammar/grammar.h"
#include "server/api.h"
#include "server/api_keys.h"
#include "server/harmony.h"
#include "server/tool_calls.h"

namespace {

// A key file (--api-key-file) and an Authorization header: keys parsed are non-empty
// printable ASCII without spaces, and each is accepted; a bearer token is part of the header.
void FuzzApiKeys(std::string_view text) {
  auto keys = mt::server::ParseApiKeys(text, "keys");
  if (keys.ok()) {
    for (const std::string& k : keys.value()) {
      if (k.empty() || !mt::server::CheckApiKey(k, "k").ok()) __builtin_trap();
      if (!mt::server::ApiKeyMatches(k, keys.value())) __builtin_trap();
    }
  } else if (keys.status().message().rfind("keys", 0) != 0) {
    __builtin_trap();  // the error names the file
  }
  const std::string_view token = mt::server::BearerToken(text);
  if (!token.empty() && (token.data() < text.data() || token.end() > text.end())) __builtin_trap();
}

// POST /tokenize and /detokenize bodies.
void FuzzTokenizerBodies(bool tokenize, std::string_view body) {
  std::optional<mt::server::ApiError> e;
  if (tokenize) {
    mt::server::TokenizeRequest t;
    e = mt::server::ParseTokenizeRequest(body, "m", &t);
    if (!e) (void)mt::server::Dump(nlohmann::json(t.text));
  } else {
    mt::server::DetokenizeRequest d;
    e = mt::server::ParseDetokenizeRequest(body, "m", &d);
    for (int64_t id : d.tokens) {
      if (id < 0 || id > INT32_MAX) __builtin_trap();
    }
  }
  if (e) {
    if (e->http_status != 400 || e->message.empty()) __builtin_trap();
    (void)mt::server::Dump(mt::server::ErrorJson(*e));
  }
}

// POST /infill bodies: a parsed one has no prompt yet, and sampling in range.
void FuzzInfillBody(std::string_view body) {
  mt::server::InfillRequest r;
  std::optional<mt::server::ApiError> e = mt::server::ParseInfillRequest(body, "m", &r);
  if (e) {
    if (e->http_status != 400 || e->message.empty()) __builtin_trap();
    (void)mt::server::Dump(mt::server::ErrorJson(*e));
    return;
  }
  if (!r.api.prompts.empty() || r.api.stream || (r.api.max_tokens && *r.api.max_tokens < 0)) {
    __builtin_trap();
  }
  const auto& s = r.api.sampling;
  if (!(s.temperature >= 0 && s.temperature <= 2) || !(s.top_p >= 0 && s.top_p <= 1) ||
      s.top_k < 0) {
    __builtin_trap();
  }
  for (const mt::server::InfillChunk& c : r.extra) (void)mt::server::Dump(nlohmann::json(c.text));
}

// POST /completion bodies: one prompt, sampling in range.
void FuzzNativeCompletionBody(std::string_view body) {
  mt::server::ApiRequest r;
  std::optional<mt::server::ApiError> e = mt::server::ParseNativeCompletionRequest(body, "m", &r);
  if (e) {
    if (e->http_status != 400 || e->message.empty()) __builtin_trap();
    (void)mt::server::Dump(mt::server::ErrorJson(*e));
    return;
  }
  if (r.prompts.size() != 1 || r.n != 1 || (r.max_tokens && *r.max_tokens < 0)) __builtin_trap();
  for (const auto& [id, bias] : r.sampling.logit_bias) {
    if (id < 0 || id > INT32_MAX || !(bias >= -100 && bias <= 100)) __builtin_trap();
  }
}

}  // namespace

// The body as model output: the tool-call parser and the stream splitter agree.
void FuzzToolCallOutput(std::string_view text, mt::server::ToolCallSyntax syntax) {
  const mt::server::ToolCallOutput whole = mt::server::ParseToolCalls(text, syntax);
  mt::server::ToolCallSplitter splitter(syntax);
  std::string content;
  for (size_t at = 0; at < text.size(); at += 7) content += splitter.Push(text.substr(at, 7));
  const mt::server::ToolCallOutput rest = splitter.Finish();
  content += rest.content;
  if (content != whole.content || rest.calls.size() != whole.calls.size()) __builtin_trap();
}

// The body as gpt-oss's output: the whole parse and the stream splitter agree.
void FuzzHarmonyOutput(std::string_view text, bool reasoning_in_content) {
  const mt::server::HarmonyOutput whole = mt::server::ParseHarmony(text, reasoning_in_content);
  mt::server::HarmonySplitter splitter(reasoning_in_content);
  std::string reasoning, content;
  for (size_t at = 0; at < text.size(); at += 5) {
    const mt::server::ReasoningOutput o = splitter.Push(text.substr(at, 5));
    reasoning += o.reasoning;
    content += o.content;
  }
  const mt::server::HarmonyOutput rest = splitter.Finish();
  if (reasoning + rest.reasoning != whole.reasoning || content + rest.content != whole.content ||
      rest.calls.size() != whole.calls.size()) {
    __builtin_trap();
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using mt::server::Endpoint;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  FuzzToolCallOutput(body, mt::server::ToolCallSyntax::kHermes);
  FuzzToolCallOutput(body, mt::server::ToolCallSyntax::kGlm45);
  FuzzHarmonyOutput(body, data[0] & 8);
  FuzzApiKeys(body);
  if (data[0] & 4) {
    if (data[0] & 1) {
      FuzzNativeCompletionBody(body);
    } else {
      FuzzInfillBody(body);
    }
    return 0;
  }
  if (data[0] & 2) {  // the tokenizer endpoints
    FuzzTokenizerBodies(data[0] & 1, body);
    return 0;
  }
  const Endpoint endpoint = (data[0] & 1) ? Endpoint::kChat : Endpoint::kCompletions;
  mt::server::ApiRequest r;
  std::optional<mt::server::ApiError> e = mt::server::ParseRequest(body, endpoint, "m", &r);
  if (e) {
    if (e->http_status != 400 || e->message.empty()) __builtin_trap();
    (void)mt::server::Dump(mt::server::ErrorJson(*e));  // must not throw, whatever the bytes
    return 0;
  }
  if (r.model != "m" || r.endpoint != endpoint) __builtin_trap();
  if (endpoint == Endpoint::kChat && r.messages.empty()) __builtin_trap();
  if (endpoint == Endpoint::kCompletions && (r.prompts.empty() || r.prompts.size() > 64)) {
    __builtin_trap();
  }
  if (endpoint == Endpoint::kChat && (!r.prompts.empty() || r.echo)) __builtin_trap();
  // Tools: a named choice is among them; the grammar of required calls builds or fails
  // cleanly (the server turns a failure into a 400).
  if (r.tool_choice == mt::server::ToolChoice::kNamed &&
      std::none_of(r.tools.begin(), r.tools.end(),
                   [&](const mt::server::ApiTool& t) { return t.name == r.tool_choice_name; })) {
    __builtin_trap();
  }
  if (!r.tools.empty()) {
    mt::Result<std::string> gbnf =
        mt::server::ToolCallGbnf(r.tools, r.tool_choice_name, r.parallel_tool_calls);
    if (gbnf.ok()) (void)mt::grammar::Grammar::Parse(*gbnf);
  }
  if (r.n < 1 || std::max<size_t>(r.prompts.size(), 1) * r.n > 64) __builtin_trap();
  for (const mt::server::ApiPrompt& p : r.prompts) {
    if (p.is_tokens && p.tokens.empty()) __builtin_trap();
    for (int64_t id : p.tokens) {
      if (id < 0 || id > INT32_MAX) __builtin_trap();
    }
    // Echoing parsed text back (as responses do) must not throw on invalid UTF-8.
    (void)mt::server::Dump(nlohmann::json(p.text));
  }
  if (r.max_tokens && *r.max_tokens < (endpoint == Endpoint::kChat ? 1 : 0)) __builtin_trap();
  if (r.logprobs < -1 || r.logprobs > 20) __builtin_trap();
  const auto& s = r.sampling;
  if (!(s.temperature >= 0 && s.temperature <= 2) || !(s.top_p >= 0 && s.top_p <= 1) ||
      !(s.min_p >= 0 && s.min_p <= 1) || !(s.repeat_penalty > 0) || s.top_k < 0) {
    __builtin_trap();
  }
  for (const auto& [id, bias] : s.logit_bias) {
    if (id < 0 || id > INT32_MAX || !(bias >= -100 && bias <= 100)) __builtin_trap();
  }
  if (r.stop.size() > 16) __builtin_trap();
  for (const std::string& stop : r.stop) {
    if (stop.empty()) __builtin_trap();
  }
  return 0;
}
