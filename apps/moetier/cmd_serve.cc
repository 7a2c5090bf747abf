// moetier serve -m MODEL [--host 127.0.0.1] [--port 8080] [--parallel N] [--ctx N]
//               [--api-key KEY]... [--api-key-file FILE] ...
// An OpenAI-compatible HTTP server (src/server/http_server.h) with continuous batching, and
// a chat page at /. Without a key it should listen on loopback only (it warns otherwise).
// SIGTERM or SIGINT drains: no new requests, running ones finish (up to --drain-timeout),
// then the process exits 0; a second signal cancels what is still running.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <vector>

#include "command.h"
#include "engine/context.h"
#include "engine/model.h"
#include "server/api_keys.h"
#include "server/http_server.h"
#include "storage_flags.h"
#include "tokenizer/chat_template.h"

namespace mt::cli {
namespace {

struct ServeFlags {
  std::string model;
  std::string alias;
  std::string host = "127.0.0.1";
  int port = 8080;
  uint32_t n_parallel = 4;
  uint32_t n_ctx = 0;  // per slot; 0: 4096, or the model's training context if smaller
  uint32_t n_batch = 512;
  int n_threads = 0;
  bool pin_threads = false;
  KvTypeFlags kv_type;
  size_t max_queue = 64;
  std::string chat_template;
  std::string reasoning_format = "deepseek";
  std::string chat_template_kwargs;
  double drain_timeout = 30;
  std::vector<std::string> api_keys;
  std::string api_key_file;
  StorageFlags storage;
  bool no_gpu_promote = false;
};

// --api-key and --api-key-file's keys, each checked; errors name the flag or the file's line.
Result<std::vector<std::string>> ApiKeys(const ServeFlags& f) {
  std::vector<std::string> keys;
  for (const std::string& key : f.api_keys) {
    if (Status s = server::CheckApiKey(key, "--api-key"); !s.ok()) return s;
    keys.push_back(key);
  }
  if (!f.api_key_file.empty()) {
    std::vector<std::string> from_file = MT_TRY(server::ReadApiKeyFile(f.api_key_file));
    keys.insert(keys.end(), from_file.begin(), from_file.end());
  }
  return keys;
}

int Serve(const ServeFlags& f) {
  if (f.port < 0 || f.port > 65535) {
    return ReportError(
        InvalidArgument("--port must be in [0, 65535] (0: any free port), not {}", f.port));
  }
  if (f.n_parallel < 1 || f.n_parallel > 1024) {
    return ReportError(InvalidArgument("--parallel must be in [1, 1024], not {}", f.n_parallel));
  }
  Result<KvTypes> kv_types = ResolveKvTypes(f.kv_type);
  if (!kv_types.ok()) return ReportError(kv_types.status());
  if (!(f.drain_timeout >= 0)) {
    return ReportError(InvalidArgument("--drain-timeout must be >= 0 seconds"));
  }
  // Signals are taken by one thread (sigwait), so block them before any thread exists.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that goes away must not kill the server

  if (f.reasoning_format != "deepseek" && f.reasoning_format != "none") {
    return ReportError(InvalidArgument("--reasoning-format must be deepseek or none, not '{}'",
                                       f.reasoning_format));
  }
  Result<std::vector<std::string>> api_keys = ApiKeys(f);
  if (!api_keys.ok()) return ReportError(api_keys.status());
  ChatTemplateKwargs kwargs;
  if (!f.chat_template_kwargs.empty()) {
    Result<ChatTemplateKwargs> k = ParseChatTemplateKwargs(f.chat_template_kwargs);
    if (!k.ok()) return ReportError(k.status().WithContext("--chat-template-kwargs"));
    kwargs = k.value();
  }
  Result<LoadOptions> load = LoadOptionsOf(f.storage, kv_types.value());
  if (!load.ok()) return ReportError(load.status());
  Result<std::unique_ptr<Model>> model = Model::Load(f.model, *load);
  if (!model.ok()) return ReportError(model.status());
  const Model& m = *model.value();
  ContextOptions copt;
  copt.n_ctx = f.n_ctx != 0 ? f.n_ctx : std::min<uint32_t>(4096, m.hparams().n_ctx_train);
  copt.n_seq_max = f.n_parallel;
  copt.n_batch = std::max(f.n_batch, f.n_parallel);
  copt.n_threads = f.n_threads;
  copt.pin_threads = f.pin_threads;
  copt.kv_types = kv_types.value();
  copt.populate_kv = true;  // the slots fill it over time: fault it in now, not in requests
  if (Status s = ResolveStorageFlags(f.storage, &copt); !s.ok()) return ReportError(s);
  Result<std::unique_ptr<Context>> ctx = Context::Create(m, copt);
  if (!ctx.ok()) return ReportError(ctx.status().WithContext(f.model));
  PrintStoragePlan(**ctx);

  server::ServerOptions so;
  so.host = f.host;
  so.port = f.port;
  so.model_id = !f.alias.empty() ? f.alias : std::filesystem::path(f.model).stem().string();
  so.chat_template = f.chat_template;
  so.split_reasoning = f.reasoning_format == "deepseek";
  so.enable_thinking = kwargs.enable_thinking.value_or(true);
  so.reasoning_effort = kwargs.reasoning_effort.value_or("");
  so.n_parallel = f.n_parallel;
  so.step_tokens = copt.n_batch;
  so.max_queue = f.max_queue;
  so.promote_device_experts = !f.no_gpu_promote;
  so.api_keys = std::move(api_keys.value());
  Result<std::unique_ptr<server::HttpServer>> created = server::HttpServer::Create(**ctx, so);
  if (!created.ok()) return ReportError(created.status());
  server::HttpServer& http = *created.value();
  std::fprintf(stderr, "moetier: chat template: %s\n", http.chat_template_description().c_str());
  std::fprintf(
      stderr, "moetier: serving '%s' on http://%s:%d/v1 (%u slots of %u positions, queue %zu)\n",
      so.model_id.c_str(), f.host.c_str(), http.port(), f.n_parallel, (*ctx)->n_ctx(), f.max_queue);
  std::fprintf(stderr, "moetier: chat page at http://%s:%d/%s\n", f.host.c_str(), http.port(),
               so.api_keys.empty() ? "" : " (requests need an API key)");
  if (so.api_keys.empty() && !server::IsLoopbackHost(f.host)) {
    std::fprintf(stderr,
                 "moetier: warning: listening on %s without an API key: anyone who can reach "
                 "it can use this server (--api-key, --api-key-file)\n",
                 f.host.c_str());
  }
  std::fflush(stderr);

  // First signal: drain (on its own thread, so a second signal can cut it short).
  std::atomic<bool> done{false};
  std::thread drainer;
  std::thread signals([&] {
    const timespec tick{0, 100'000'000};
    int received = 0;
    while (!done.load()) {
      const int sig = sigtimedwait(&stop_signals, nullptr, &tick);
      if (sig < 0) continue;
      if (received++ == 0) {
        std::fprintf(stderr, "moetier: %s: draining (up to %.0f s; again to cancel)\n",
                     sig == SIGTERM ? "SIGTERM" : "SIGINT", f.drain_timeout);
        drainer = std::thread([&] {
          http.Shutdown(std::chrono::milliseconds(static_cast<int64_t>(f.drain_timeout * 1000)));
        });
      } else {
        std::fprintf(stderr, "moetier: cancelling the requests still running\n");
        http.Shutdown(std::chrono::milliseconds(0));
      }
    }
  });
  const auto t0 = std::chrono::steady_clock::now();
  http.Run();
  done.store(true);
  signals.join();
  if (drainer.joinable()) drainer.join();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "moetier: server stopped\n");
  if (Status s = ReportTierStats(f.storage, **ctx, wall, 0); !s.ok()) return ReportError(s);
  if (Status s = SaveRoutingStats(f.storage, **ctx); !s.ok()) return ReportError(s);
  return kExitOk;
}

}  // namespace

CommandMain SetupServe(CLI::App& sub) {
  auto f = std::make_shared<ServeFlags>();
  sub.add_option("-m,--model", f->model, "GGUF model (or the first shard of a split set)")
      ->required();
  sub.add_option("-a,--alias", f->alias,
                 "Model id clients pass as \"model\" (default: the file "
                 "name without .gguf)");
  sub.add_option("--host", f->host, "Address to listen on")->default_str("127.0.0.1");
  sub.add_option("--port", f->port, "Port (0: any free port; the start-up line names it)")
      ->default_str("8080");
  sub.add_option("--parallel", f->n_parallel,
                 "Sequences decoded together (slots, each with its own KV cache)")
      ->default_str("4");
  sub.add_option("-c,--ctx,--ctx-size", f->n_ctx,
                 "Context per slot (default 4096, at most the model's); KV cache = parallel x ctx");
  sub.add_option("-b,--batch-size", f->n_batch, "Tokens per batched forward step")
      ->default_str("512");
  AddThreadFlags(sub, f->n_threads, f->pin_threads);
  AddKvTypeFlags(sub, f->kv_type);
  sub.add_option("--max-queue", f->max_queue, "Requests waiting for a slot before new ones get 503")
      ->default_str("64");
  sub.add_flag("--no-gpu-promote", f->no_gpu_promote,
               "Keep the --gpu-expert-cache experts where they started (outputs then never depend "
               "on request timing); by default, when the server falls idle, experts routed more "
               "often than the device's coldest take their place (LFU)");
  sub.add_option("--chat-template", f->chat_template,
                 "Built-in chat template instead of the model's: chatml, tulu, llama2, deepseek3, "
                 "harmony (gpt-oss), glm4.5");
  sub.add_option("--reasoning-format", f->reasoning_format,
                 "deepseek: a thinking model's <think> text (gpt-oss: its analysis channel) "
                 "goes to reasoning_content; none: it stays in the content")
      ->default_str("deepseek");
  sub.add_option("--chat-template-kwargs", f->chat_template_kwargs,
                 "Chat template variables for requests that do not set them, as JSON, e.g. "
                 "'{\"enable_thinking\": false}' (a Qwen3 or GLM-4.5 model answers without "
                 "thinking), '{\"reasoning_effort\": \"high\"}' (gpt-oss)");
  sub.add_option("--drain-timeout", f->drain_timeout,
                 "Seconds running requests may take to finish after SIGTERM")
      ->default_str("30");
  sub.add_option("--api-key", f->api_keys,
                 "A key requests must send as 'Authorization: Bearer KEY' (repeatable); /health "
                 "and the chat page stay open")
      ->allow_extra_args(false);
  sub.add_option("--api-key-file", f->api_key_file,
                 "A file of API keys, one per line (blank lines and # comments ignored)");
  AddStorageFlags(sub, &f->storage);
  return [f]() { return Serve(*f); };
}

}  // namespace mt::cli
