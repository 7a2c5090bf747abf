#include "server/generation.h"

#include <fmt/format.h>

#include <utility>
#include <vector>

#include "grammar/chat_answer.h"
#include "grammar/grammar.h"
#include "server/tool_calls.h"

namespace mt::server {

ApiError ServerError(int status, std::string message, std::string code) {
  ApiError e;
  e.http_status = status;
  e.message = std::move(message);
  e.type = "server_error";
  e.code = std::move(code);
  return e;
}

std::optional<ApiError> JobError(const JobUpdate& u) {
  if (u.reason == FinishReason::kError) {
    return ServerError(500, u.error.message(), "engine_error");
  }
  if (u.reason == FinishReason::kCancelled) {
    return ServerError(503, "the request was cancelled: the server is shutting down",
                       "shutting_down");
  }
  return std::nullopt;
}

namespace {

ToolCallSyntax ToolSyntax(const ChoiceOptions& options) {
  return options.chat_format == ChatTemplate::Kind::kGlm45 ? ToolCallSyntax::kGlm45
                                                           : ToolCallSyntax::kHermes;
}

}  // namespace

int64_t CodePoints(std::string_view bytes) {
  int64_t n = 0;
  for (unsigned char c : bytes) n += (c & 0xC0) != 0x80;
  return n;
}

Result<ChatPrompt> RenderChat(const ChatTemplate& chat, const ApiRequest& r,
                              bool default_enable_thinking,
                              std::string_view default_reasoning_effort) {
  std::vector<ChatMessage> messages;
  for (const ApiMessage& m : r.messages) {
    ChatMessage& c = messages.emplace_back(ChatMessage{m.role, m.content});
    for (const ApiToolCall& call : m.tool_calls) {
      c.tool_calls.push_back({call.name, call.arguments});
    }
    c.reasoning_content = m.reasoning_content;
  }
  // tool_choice "none" hides the tools (a model with no tool format can still answer).
  const bool offer_tools = r.tool_choice != ToolChoice::kNone;
  ChatTemplateKwargs kwargs;
  kwargs.enable_thinking = r.enable_thinking.value_or(default_enable_thinking);
  if (r.reasoning_effort) {
    kwargs.reasoning_effort = r.reasoning_effort;
  } else if (!default_reasoning_effort.empty()) {
    kwargs.reasoning_effort = std::string(default_reasoning_effort);
  }
  return chat.Render(messages, /*add_generation_prompt=*/true, offer_tools ? r.tools_json : nullptr,
                     kwargs);
}

std::optional<ApiError> InfillPrompt(const Tokenizer& tok, const InfillRequest& r, uint32_t n_ctx,
                                     std::vector<int32_t>* out) {
  const std::optional<Tokenizer::Fim> fim = tok.fim();
  if (!fim) {
    return ApiError{501,
                    "Infill is not supported by this model: it has no fill-in-the-middle tokens "
                    "(such as <|fim_prefix|>, <|fim_suffix|> and <|fim_middle|>)",
                    "not_supported_error", "", "unsupported"};
  }
  std::optional<ApiError> failed;
  auto encode = [&](const std::string& text) {
    Result<std::vector<int32_t>> ids = tok.Encode(text, false, /*parse_special=*/false);
    if (ids.ok()) return std::move(ids).value();
    failed = ServerError(500, ids.status().message(), "tokenizer_error");
    return std::vector<int32_t>();
  };
  std::vector<int32_t> extra;
  auto append = [](std::vector<int32_t>& to, const std::vector<int32_t>& ids) {
    to.insert(to.end(), ids.begin(), ids.end());
  };
  if (fim->repo) {
    extra.push_back(*fim->repo);
    append(extra, encode("myproject\n"));
  }
  for (const InfillChunk& chunk : r.extra) {
    if (fim->file_sep) {
      extra.push_back(*fim->file_sep);
      append(extra, encode(chunk.filename + "\n"));
    } else {
      append(extra, encode("\n\n--- snippet ---\n\n"));
    }
    append(extra, encode(chunk.text));
  }
  if (fim->file_sep) {
    extra.push_back(*fim->file_sep);
    append(extra, encode("filename\n"));
  }
  std::vector<int32_t> prefix = encode(r.prefix), suffix = encode(r.suffix),
                       prompt = encode(r.prompt);
  if (failed) return failed;
  // llama-server's batch (2048 by default, in a 4096 context); never more than half the
  // context, so that the extra files keep room.
  const int64_t batch = std::min<int64_t>(n_ctx / 2, 2048);
  const int64_t n_prefix = std::min<int64_t>(prefix.size(), 3 * (batch / 4));
  const int64_t n_suffix = std::min<int64_t>(
      suffix.size(), std::max<int64_t>(0, batch / 4 - (2 + static_cast<int64_t>(prompt.size()))));
  const int64_t n_extra = std::min<int64_t>(
      extra.size(), std::max<int64_t>(0, n_ctx - batch - 2 * r.api.max_tokens.value_or(0)));
  std::vector<int32_t>& ids = *out;
  ids.assign(extra.end() - n_extra, extra.end());
  if (tok.add_bos() && tok.bos_id()) ids.push_back(*tok.bos_id());
  ids.push_back(fim->prefix);
  ids.insert(ids.end(), prefix.end() - n_prefix, prefix.end());
  append(ids, prompt);
  ids.push_back(fim->suffix);
  ids.insert(ids.end(), suffix.begin(), suffix.begin() + n_suffix);
  ids.push_back(fim->middle);
  return std::nullopt;
}

std::optional<ApiError> MakeSpec(const GenerationTarget& target, const ApiRequest& r, size_t which,
                                 uint64_t fresh_seed, GenerationSpec* spec) {
  const Tokenizer& tok = target.tok;
  const ChatTemplate* chat = target.chat;
  // How messages name the prompt: its index when the request holds several.
  const std::string name = r.prompts.size() > 1 ? fmt::format("prompt[{}]", which) : "prompt";
  auto invalid = [](std::string param, std::string message, std::string code = "") {
    ApiError e;
    e.message = std::move(message);
    e.param = std::move(param);
    e.code = std::move(code);
    return e;
  };
  std::vector<int32_t>& prompt = spec->prompt;
  ChatPrompt chat_prompt;  // where the answer starts (chat): inside <think>, or free to open it
  std::string gbnf;        // the grammar the output follows (text; empty: none)
  std::string trigger;     // not empty: gbnf follows the first `trigger` (lazy)
  if (r.endpoint == Endpoint::kChat) {
    if (!chat) {
      return invalid("messages", std::string(target.chat_error), "chat_template_unavailable");
    }
    if (r.tool_choice != ToolChoice::kNone && !chat->supports_tools()) {
      return invalid("tools",
                     fmt::format("this model's chat format ({}) has no tool calls; "
                                 "tools need a chatml (Qwen), harmony (gpt-oss) or "
                                 "glm4.5 model",
                                 chat->name()),
                     "unsupported");
    }
    // The grammars of tools are written for Hermes call blocks (chatml); harmony's channels
    // and GLM's blocks are read back, not constrained.
    const bool hermes = chat->kind() == ChatTemplate::Kind::kChatml;
    const bool harmony = chat->kind() == ChatTemplate::Kind::kHarmony;
    if (!hermes && (r.tool_choice == ToolChoice::kRequired || r.tool_choice == ToolChoice::kNamed ||
                    (r.tool_choice == ToolChoice::kAuto && r.format_schema))) {
      return invalid("tool_choice",
                     fmt::format("the {} chat format takes tool_choice \"auto\" or \"none\" "
                                 "(without a response format); \"required\" and named calls "
                                 "are not constrained for it",
                                 chat->name()),
                     "unsupported");
    }
    if (harmony && r.format_schema && r.tool_choice == ToolChoice::kNone) {
      return invalid("response_format",
                     "a JSON response format is not supported for the harmony chat format "
                     "(gpt-oss): its answer follows the analysis channel",
                     "unsupported");
    }
    Result<ChatPrompt> rendered =
        RenderChat(*chat, r, target.enable_thinking, target.reasoning_effort);
    if (!rendered.ok()) return invalid("messages", rendered.status().message());
    Result<std::string> calls = std::string();
    if (!hermes) {
      // The calls are read back from free text.
    } else if (r.tool_choice == ToolChoice::kRequired || r.tool_choice == ToolChoice::kNamed) {
      calls = ToolCallGbnf(r.tools, r.tool_choice_name, r.parallel_tool_calls);
    } else if (r.tool_choice == ToolChoice::kAuto && r.format_schema) {
      // Calls, or an answer in the response format: one grammar of both from the start.
      calls = ToolCallGbnf(r.tools, "", r.parallel_tool_calls, /*after_open_tag=*/false,
                           &*r.format_schema);
    } else if (r.tool_choice == ToolChoice::kAuto) {
      // Free text until the model opens a call; the call then follows the schemas. A schema
      // the grammar cannot express leaves auto calls unconstrained (a client that needs the
      // guarantee asks for "required").
      calls = ToolCallGbnf(r.tools, "", r.parallel_tool_calls, /*after_open_tag=*/true);
      if (!calls.ok()) calls = std::string();
      trigger = kToolCallOpen;
    }
    if (!calls.ok()) return invalid("tools", calls.status().message());
    gbnf = std::move(calls).value();
    Result<std::vector<int32_t>> ids = tok.Encode(rendered->text, rendered->add_bos, true);
    if (!ids.ok()) return ServerError(500, ids.status().message(), "tokenizer_error");
    prompt = std::move(ids.value());
    chat_prompt = std::move(rendered).value();
  } else if (r.prompts[which].is_tokens) {
    const std::vector<int64_t>& ids = r.prompts[which].tokens;
    const int64_t n_vocab = tok.n_vocab();
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] >= n_vocab) {
        return invalid("prompt", fmt::format("{}[{}]: token id {} is outside the vocabulary "
                                             "(0..{})",
                                             name, i, ids[i], n_vocab - 1));
      }
      prompt.push_back(static_cast<int32_t>(ids[i]));
    }
  } else {
    // With a suffix, BOS goes before the FIM tokens, not before the prefix.
    Result<std::vector<int32_t>> ids =
        tok.Encode(r.prompts[which].text, tok.add_bos() && !r.suffix, true);
    if (!ids.ok()) return ServerError(500, ids.status().message(), "tokenizer_error");
    prompt = std::move(ids.value());
  }
  if (r.endpoint == Endpoint::kCompletions && r.suffix) {
    // Fill in the middle: [BOS] <prefix token> prompt <suffix token> suffix <middle token>,
    // the order of llama.cpp's /infill and of Qwen's coders; the model writes the middle.
    const std::optional<Tokenizer::Fim> fim = tok.fim();
    if (!fim) {
      return invalid("suffix",
                     "this model has no fill-in-the-middle tokens (such as <|fim_prefix|>, "
                     "<|fim_suffix|> and <|fim_middle|>), so it cannot complete before a suffix",
                     "unsupported");
    }
    Result<std::vector<int32_t>> suffix = tok.Encode(*r.suffix, false, true);
    if (!suffix.ok()) return ServerError(500, suffix.status().message(), "tokenizer_error");
    std::vector<int32_t> fill;
    if (tok.add_bos() && !r.prompts[which].is_tokens && tok.bos_id()) fill.push_back(*tok.bos_id());
    fill.push_back(fim->prefix);
    fill.insert(fill.end(), prompt.begin(), prompt.end());
    fill.push_back(fim->suffix);
    fill.insert(fill.end(), suffix->begin(), suffix->end());
    fill.push_back(fim->middle);
    prompt = std::move(fill);
  }
  const std::string what = r.endpoint == Endpoint::kChat ? "messages" : "prompt";
  if (prompt.empty()) return invalid(what, fmt::format("the {} has no tokens", name));
  if (prompt.size() >= target.n_ctx) {
    return invalid(what,
                   fmt::format("the {} has {} tokens; the context holds {} per request "
                               "(--ctx), and at least one must be left to generate",
                               name, prompt.size(), target.n_ctx),
                   "context_length_exceeded");
  }
  const SamplingRequest& s = r.sampling;
  spec->sampling.temperature = s.temperature;
  spec->sampling.top_p = s.top_p;
  spec->sampling.top_k = s.top_k;
  spec->sampling.min_p = s.min_p;
  spec->sampling.repeat_penalty = s.repeat_penalty;
  spec->sampling.presence_penalty = s.presence_penalty;
  spec->sampling.frequency_penalty = s.frequency_penalty;
  for (const auto& [id, bias] : s.logit_bias) {
    if (id >= tok.n_vocab()) {
      return invalid("logit_bias", fmt::format("logit_bias: token id {} is outside the "
                                               "vocabulary (0..{})",
                                               id, tok.n_vocab() - 1));
    }
    spec->sampling.logit_bias.emplace_back(static_cast<int32_t>(id), bias);
  }
  spec->sampling.seed = s.seed ? *s.seed : fresh_seed;
  // OpenAI's defaults: 16 tokens for completions; chat goes on until it stops.
  spec->max_tokens =
      r.max_tokens ? *r.max_tokens : (r.endpoint == Endpoint::kCompletions ? 16 : -1);
  spec->stops = r.stop;
  spec->ignore_eos = r.ignore_eos;
  spec->logprobs = r.logprobs;
  spec->prompt_logprobs = r.echo;
  spec->cache_prompt = r.cache_prompt;
  spec->max_predict_ms = static_cast<double>(r.max_predict_ms);
  // The response format alone (with tools, it is in the grammar above). A GBNF grammar
  // describes the whole output, reasoning included; a schema, tool calls: the answer only.
  bool whole_output = false;
  if (r.grammar != nullptr && r.tool_choice == ToolChoice::kNone) {
    gbnf = r.grammar_gbnf;
    whole_output = !r.format_schema;
  }
  if (!gbnf.empty()) {
    // A thinking model's reasoning stays free: the grammar holds for the answer after it.
    Result<grammar::StartedGrammar> g =
        !trigger.empty() ? grammar::LazyAnswerGrammar(gbnf, trigger, chat_prompt)
                         : grammar::AnswerGrammar(gbnf, whole_output ? ChatPrompt() : chat_prompt);
    if (!g.ok()) {
      return invalid(r.tool_choice == ToolChoice::kNone ? "response_format" : "tools",
                     g.status().message());
    }
    spec->grammar = std::move(g->grammar);
    spec->grammar_start = std::move(g->start);
  }
  return std::nullopt;
}

Choice WholeChoice(const Tokenizer& tok, const ChoiceOptions& options, const std::string& echo,
                   const std::string& generated, std::span<const TokenLogprob> logprobs,
                   FinishReason reason, const std::function<std::string()>& new_call_id) {
  Choice c;
  c.text = echo + generated;
  c.finish_reason = FinishReasonName(reason);
  std::vector<ApiToolCall> calls;
  if (options.endpoint == Endpoint::kChat && options.chat_format == ChatTemplate::Kind::kHarmony) {
    // Harmony's channels hold the reasoning, the answer and the calls at once.
    HarmonyOutput h = ParseHarmony(generated, !options.split_reasoning);
    if (h.thought && options.split_reasoning) c.reasoning = std::move(h.reasoning);
    c.text = std::move(h.content);
    calls = std::move(h.calls);
  } else {
    std::string answer = generated;
    if (options.endpoint == Endpoint::kChat && options.split_reasoning) {
      ReasoningOutput split = SplitReasoning(generated, options.thinking_open);
      if (split.thought) c.reasoning = std::move(split.reasoning);
      answer = std::move(split.content);
      c.text = answer;
    }
    if (options.tools) {  // the answer's call blocks become tool_calls
      ToolCallOutput parsed = ParseToolCalls(answer, ToolSyntax(options));
      c.text = std::move(parsed.content);
      calls = std::move(parsed.calls);
    }
  }
  if (options.tools) {
    c.tool_calls = std::move(calls);
    for (ApiToolCall& call : c.tool_calls) call.id = new_call_id();
    // Cut short (length), a response keeps saying so.
    if (!c.tool_calls.empty() && reason == FinishReason::kStop) c.finish_reason = "tool_calls";
  }
  if (options.logprobs) {
    LogprobWriter writer(tok, options.endpoint, CodePoints(echo));
    c.logprobs = writer.Entries(logprobs, generated);
  }
  return c;
}

ChoiceStream::ChoiceStream(const Tokenizer& tok, const ChoiceOptions& options,
                           const ResponseMeta& meta, int index, std::string echo,
                           std::function<std::string()> new_call_id)
    : options_(options),
      meta_(meta),
      index_(index),
      echo_(std::move(echo)),
      new_call_id_(std::move(new_call_id)) {
  if (options.logprobs) logprobs_.emplace(tok, options.endpoint, CodePoints(echo_));
  if (options.endpoint == Endpoint::kChat && options.chat_format == ChatTemplate::Kind::kHarmony) {
    harmony_.emplace(/*reasoning_in_content=*/!options.split_reasoning);
    return;
  }
  if (options.tools) tools_.emplace(ToolSyntax(options));
  if (options.endpoint == Endpoint::kChat && options.split_reasoning) {
    reasoning_.emplace(options.thinking_open);
  }
}

std::string ChoiceStream::Opening() const {
  return SseEvent(ChunkJson(options_.endpoint, meta_, "", "", /*first=*/true, nullptr, index_));
}

std::optional<ApiError> ChoiceStream::Take(const JobUpdate& u, std::string* out) {
  generated_ += u.text;
  // Reasoning first goes out on its own; the answer's call blocks are held back.
  std::string answer = u.text;
  std::vector<ApiToolCall> harmony_calls;
  if (harmony_) {
    ReasoningOutput split = harmony_->Push(u.text);
    if (u.finished) {
      HarmonyOutput rest = harmony_->Finish();
      split.reasoning += rest.reasoning;
      split.content += rest.content;
      if (options_.tools) harmony_calls = std::move(rest.calls);
    }
    if (!split.reasoning.empty()) {
      *out += SseEvent(ReasoningChunkJson(meta_, split.reasoning, index_));
    }
    answer = std::move(split.content);
  } else if (reasoning_) {
    ReasoningOutput split = reasoning_->Push(u.text);
    if (u.finished) {
      ReasoningOutput rest = reasoning_->Finish();
      split.reasoning += rest.reasoning;
      split.content += rest.content;
    }
    if (!split.reasoning.empty()) {
      *out += SseEvent(ReasoningChunkJson(meta_, split.reasoning, index_));
    }
    answer = std::move(split.content);
  }
  const std::string text = std::exchange(echo_, "") + (tools_ ? tools_->Push(answer) : answer);
  if (!text.empty() || !u.logprobs.empty()) {
    nlohmann::json logprobs = nullptr;
    if (logprobs_) logprobs = logprobs_->Entries(u.logprobs, generated_);
    *out += SseEvent(ChunkJson(options_.endpoint, meta_, text, "", false, logprobs, index_));
  }
  if (!u.finished) return std::nullopt;
  finished_ = true;
  completion_tokens_ = u.completion_tokens;
  cached_tokens_ = u.cached_tokens;
  if (std::optional<ApiError> e = JobError(u)) return e;
  std::string reason = FinishReasonName(u.reason);
  if (tools_) {  // what was held back: content, or the calls
    ToolCallOutput rest = tools_->Finish();
    if (!rest.content.empty()) {
      *out +=
          SseEvent(ChunkJson(options_.endpoint, meta_, rest.content, "", false, nullptr, index_));
    }
    if (!rest.calls.empty()) {
      for (ApiToolCall& call : rest.calls) call.id = new_call_id_();
      *out += SseEvent(ToolCallsChunkJson(meta_, rest.calls, index_));
      if (u.reason == FinishReason::kStop) reason = "tool_calls";
    }
  }
  if (!harmony_calls.empty()) {
    for (ApiToolCall& call : harmony_calls) call.id = new_call_id_();
    *out += SseEvent(ToolCallsChunkJson(meta_, harmony_calls, index_));
    if (u.reason == FinishReason::kStop) reason = "tool_calls";
  }
  *out += SseEvent(ChunkJson(options_.endpoint, meta_, "", reason, false, nullptr, index_));
  return std::nullopt;
}

}  // namespace mt::server
