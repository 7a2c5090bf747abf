// The generation endpoints' logic that does not touch HTTP: a parsed request's jobs
// (MakeSpec), what a finished job reports (JobError), log-probabilities with their text
// offsets (LogprobWriter). http_server.cc carries them over HTTP, whole or streamed.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "server/api.h"
#include "server/harmony.h"
#include "server/reasoning.h"
#include "server/scheduler.h"
#include "server/tool_calls.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace mt::server {

// What a request's jobs are made for: the model's tokenizer and chat template (null: none;
// chat_error says why) and the context each job gets.
struct GenerationTarget {
  const Tokenizer& tok;
  const ChatTemplate* chat;
  std::string_view chat_error;
  uint32_t n_ctx;
  bool enable_thinking = true;             // when the request does not say
  std::string_view reasoning_effort = {};  // when the request does not say; empty: the template's
};

// A chat request's prompt as the template renders it (with the tools it offers), or the
// 400 that refuses it. The defaults are for the template variables the request does not set.
Result<ChatPrompt> RenderChat(const ChatTemplate& chat, const ApiRequest& r,
                              bool default_enable_thinking,
                              std::string_view default_reasoning_effort = {});

// The job of a parsed request (completions: of its prompt `which`): its prompt (the chat
// rendered by the template, with the tools offered), sampling (`fresh_seed` when the
// request gives none), limits and grammar (the request's, or the one tool_choice asks for).
// An error is the response to send (a 400 naming the field; a 500 for a tokenizer failure).
std::optional<ApiError> MakeSpec(const GenerationTarget& target, const ApiRequest& r, size_t which,
                                 uint64_t fresh_seed, GenerationSpec* spec);

// /infill's prompt (llama-server's, the repo-level fill-in-the-middle format of Qwen's coders):
//   [<repo>"myproject\n"] for each extra file: (<file_sep> filename "\n" | "\n\n--- snippet
//   ---\n\n") text; [<file_sep> "filename\n"]; [BOS] <prefix> prefix prompt <suffix> suffix
//   <middle>
// (<repo> and <file_sep> where the vocabulary has them; special-token text in the inputs is
// plain text). As llama-server keeps the middle to one batch B, here min(n_ctx / 2, 2048): the
// prefix's last 3/4 B tokens, the suffix's first B/4 - 2 - |prompt|, and the extra files' last
// n_ctx - B - 2 max_tokens. Errors: a model without FIM tokens (501); a tokenizer failure.
std::optional<ApiError> InfillPrompt(const Tokenizer& tok, const InfillRequest& r, uint32_t n_ctx,
                                     std::vector<int32_t>* out);

// A server-side error object (type "server_error").
ApiError ServerError(int status, std::string message, std::string code);

// The error a finished job reports, if it did not complete: 500 for an engine failure, 503
// when the server cancelled it on shutdown.
std::optional<ApiError> JobError(const JobUpdate& u);

// Code points among `bytes` (bytes that do not continue a UTF-8 sequence).
int64_t CodePoints(std::string_view bytes);

// Turns a job's logprob entries into a response's, in order, with their text offsets: a
// prompt token's counts the prompt's pieces before it, a generated token's the echoed prompt
// and the generated text before it.
class LogprobWriter {
 public:
  LogprobWriter(const Tokenizer& tok, Endpoint endpoint, int64_t echo_code_points)
      : tok_(tok), endpoint_(endpoint), echo_code_points_(echo_code_points) {}

  // `generated`: the generated text so far, including the text released with `entries`.
  nlohmann::json Entries(std::span<const TokenLogprob> entries, std::string_view generated) {
    std::vector<LogprobEntry> out;
    for (const TokenLogprob& e : entries) {
      LogprobEntry& o = out.emplace_back();
      o.token = tok_.TokenPiece(e.id);
      if (!std::isnan(e.logprob)) o.logprob = e.logprob;
      for (const auto& [id, lp] : e.top) o.top.emplace_back(tok_.TokenPiece(id), lp);
      if (e.prompt) {
        o.text_offset = prompt_code_points_;
        prompt_code_points_ += CodePoints(tok_.TokenPiece(e.id, /*special=*/false));
        continue;
      }
      const size_t upto = std::min(static_cast<size_t>(e.text_byte), generated.size());
      if (upto > counted_bytes_) {
        counted_code_points_ += CodePoints(generated.substr(counted_bytes_, upto - counted_bytes_));
        counted_bytes_ = upto;
      }
      o.text_offset = echo_code_points_ + counted_code_points_;
    }
    return LogprobsJson(endpoint_, out);
  }

 private:
  const Tokenizer& tok_;
  const Endpoint endpoint_;
  const int64_t echo_code_points_;
  int64_t prompt_code_points_ = 0;
  size_t counted_bytes_ = 0;  // of the generated text, whose code points are counted
  int64_t counted_code_points_ = 0;
};

// What a request's choices go through on their way out.
struct ChoiceOptions {
  Endpoint endpoint = Endpoint::kCompletions;
  bool split_reasoning = false;  // chat: <think> text goes to reasoning_content
  bool thinking_open = false;    // the chat prompt opened <think> (ChatPrompt::thinking_open)
  bool tools = false;            // tool_choice is not none: call blocks become tool_calls
  bool logprobs = false;         // the request asked for logprobs
  // The chat format, which says how the output is read: harmony's channels (harmony.h),
  // GLM-4.5's call blocks (tool_calls.h), else <think> and Hermes call blocks.
  ChatTemplate::Kind chat_format = ChatTemplate::Kind::kChatml;
};

// One choice of a whole response: its echo and generated text split into reasoning, content
// and tool calls as `options` say, with its logprobs and finish reason.
Choice WholeChoice(const Tokenizer& tok, const ChoiceOptions& options, const std::string& echo,
                   const std::string& generated, std::span<const TokenLogprob> logprobs,
                   FinishReason reason, const std::function<std::string()>& new_call_id);

// One choice of a streamed response: turns its job's updates into Server-Sent Events, in
// order: reasoning deltas, text (the echo first) with its logprobs, then at the end what was
// held back (content, or the tool calls) and the finish chunk. No I/O: the HTTP front end
// writes the events. `meta` is kept by reference and must outlive it. Not thread-safe.
class ChoiceStream {
 public:
  ChoiceStream(const Tokenizer& tok, const ChoiceOptions& options, const ResponseMeta& meta,
               int index, std::string echo, std::function<std::string()> new_call_id);

  // The chunk that opens a chat choice (its role).
  std::string Opening() const;
  // Appends the events of `u` to *out. When the job ended in failure, nothing more is added
  // and its error is returned (the stream then ends with it).
  std::optional<ApiError> Take(const JobUpdate& u, std::string* out);

  bool finished() const { return finished_; }
  int64_t completion_tokens() const { return completion_tokens_; }
  int64_t cached_tokens() const { return cached_tokens_; }

 private:
  const ChoiceOptions options_;
  const ResponseMeta& meta_;
  const int index_;
  std::string echo_;  // sent with the first text
  std::function<std::string()> new_call_id_;
  std::optional<LogprobWriter> logprobs_;
  std::optional<ReasoningSplitter> reasoning_;
  std::optional<ToolCallSplitter> tools_;
  std::optional<HarmonySplitter> harmony_;  // harmony: reasoning, content and calls at once
  std::string generated_;                   // the generated text so far (for logprob text offsets)
  bool finished_ = false;
  int64_t completion_tokens_ = 0;
  int64_t cached_tokens_ = 0;
};

}  // namespace mt::server
