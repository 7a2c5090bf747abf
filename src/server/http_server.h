// `moetier serve`: an OpenAI-compatible HTTP server over one Context (cpp-httplib).
//
//   POST /v1/completions, POST /v1/chat/completions   (api.h says what a body may hold)
//   GET  /v1/models, /v1/models/{id}, /health, /metrics (Prometheus text)
//   GET  /v1/tiers (the expert tiers as JSON: tiers.h), / (the chat page: src/server/web/)
//
// With API keys (ServerOptions::api_keys), every request but GET /health and the chat page's
// files needs "Authorization: Bearer KEY" with one of them, else 401 with code
// "invalid_api_key". /health says whether keys are required ("api_key_required").
//
// Generation requests are tokenized on the HTTP thread and handed to the Scheduler
// (scheduler.h), which batches all running sequences into one forward step. Answers:
//   200  the completion (or an SSE stream ending with "data: [DONE]")
//   400  a malformed or unsupported request, an unknown model, a prompt that does not fit
//        the context (code "context_length_exceeded"); {"error": {message, type, param, code}}
//   503  the queue is full (Retry-After: 1) or the server is shutting down
//   500  the engine failed (an expert read error names the file, layer and expert); other
//        requests of the same step go on. In a stream, the error comes as a last
//        "data: {"error": ...}" event.
// A client that goes away (its connection closes) cancels its sequence: the slot and its
// KV cache are free at the next step.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/context.h"

namespace mt::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                     // 0: any free port (see HttpServer::port())
  std::string model_id;                // the name clients pass as "model"
  std::string chat_template;           // built-in template name; empty: the model's
  uint32_t n_parallel = 1;             // slots: the Context's n_seq_max
  uint32_t step_tokens = 512;          // tokens per batched forward step
  size_t max_queue = 64;               // requests waiting for a slot before 503
  bool promote_device_experts = true;  // SchedulerOptions::promote_device_experts
  // Connections served at once (httplib gives each its own thread, also while a keep-alive
  // connection sits idle). 0: 2 * (n_parallel + max_queue) + 16.
  size_t http_threads = 0;
  // Chat: a thinking model's <think>...</think> goes to message.reasoning_content
  // (llama-server's --reasoning-format deepseek); false: it stays in the content.
  bool split_reasoning = true;
  // Chat: enable_thinking for requests that do not set it in chat_template_kwargs
  // (--chat-template-kwargs).
  bool enable_thinking = true;
  // Chat: gpt-oss's reasoning_effort for requests that do not set it; empty: the template's
  // ("medium").
  std::string reasoning_effort;
  // Keys a request may carry (api_keys.h); empty: no authentication.
  std::vector<std::string> api_keys;
};

class HttpServer {
 public:
  // Resolves the chat template (a model without one can still serve completions; chat
  // requests then get 400) and binds the listening socket. Errors: the address cannot be
  // bound (naming it). `ctx` must outlive the server and have n_parallel sequences.
  static Result<std::unique_ptr<HttpServer>> Create(Context& ctx, const ServerOptions& options);
  ~HttpServer();

  int port() const;
  // How chat prompts are rendered, for the start-up line ("chatml (from ...)" or "none: ...").
  std::string chat_template_description() const;

  // Serves until Shutdown. Call once.
  void Run();

  // Stops taking generation requests (503), lets queued and running ones finish for up to
  // `drain`, cancels the rest, then stops the HTTP server so that Run returns. Thread-safe;
  // a second call while a drain runs cuts it short (everything left is cancelled).
  void Shutdown(std::chrono::milliseconds drain);

  struct Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mt::server
