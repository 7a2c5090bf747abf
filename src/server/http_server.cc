#include "server/http_server.h"

#include <dirent.h>
#include <httplib.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <span>
#include <thread>
#include <utility>

#include "base/check.h"
#include "base/json_depth.h"
#include "base/log.h"
#include "server/api.h"
#include "server/api_keys.h"
#include "server/generation.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "server/tiers.h"
#include "server/web_assets.h"
#include "tokenizer/chat_template.h"

namespace mt::server {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr size_t kMaxBodyBytes = size_t{32} << 20;
constexpr auto kPollInterval = 100ms;  // how often a waiting handler looks at its client

// "host:port" of a socket address, formatted as httplib formats Request::remote_addr.
bool AddressOf(const sockaddr_storage& addr, socklen_t len, std::string* host, int* port) {
  char h[NI_MAXHOST], p[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, h, sizeof(h), p, sizeof(p),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return false;
  }
  *host = h;
  *port = std::atoi(p);
  return true;
}

// The connected socket a request came in on. httplib does not expose it, so it is found
// among the process's descriptors by its two addresses; it stays open (and so keeps its
// number) while the request's handler runs. -1 if not found.
int FindConnectionSocket(const httplib::Request& req) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    struct stat st;
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage local{}, peer{};
    socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
        getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) {
      continue;
    }
    std::string local_host, peer_host;
    int local_port = -1, peer_port = -1;
    if (AddressOf(local, local_len, &local_host, &local_port) &&
        AddressOf(peer, peer_len, &peer_host, &peer_port) && local_port == req.local_port &&
        peer_port == req.remote_port && peer_host == req.remote_addr) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

// Tells whether the client of a request has closed its connection.
class ConnectionProbe {
 public:
  explicit ConnectionProbe(const httplib::Request& req) : fd_(FindConnectionSocket(req)) {}

  bool Gone() const {
    if (fd_ < 0) return false;
    char c;
    const ssize_t n = recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return true;  // orderly close
    return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  }

 private:
  int fd_;
};

void SendJson(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(Dump(body), "application/json");
}

void SendError(httplib::Response& res, const ApiError& e) {
  SendJson(res, e.http_status, ErrorJson(e));
}

// Reads a POST body and parses it with `parse` (body -> the 400 to send, or nothing); false:
// the response is set (or left to the error handler, with httplib's 400 / 413 status). The
// body comes through a content reader rather than httplib's own buffering,
// which caps form-encoded bodies (what `curl -d` sends, whatever the JSON inside) at 8 KiB
// with a bare 413: CPPHTTPLIB_FORM_URL_ENCODED_PAYLOAD_MAX_LENGTH, fixed when Debian built the
// library. kMaxBodyBytes still applies.
template <class Parse>
bool ReadRequest(const httplib::Request& req, httplib::Response& res,
                 const httplib::ContentReader& reader, Parse&& parse) {
  if (req.is_multipart_form_data()) {  // the reader would need multipart callbacks
    ApiError e;
    e.message = "the request body must be JSON, not multipart/form-data";
    SendError(res, e);
    return false;
  }
  std::string body;
  const bool read = reader([&body](const char* data, size_t n) {
    body.append(data, n);
    return true;
  });
  if (!read) return false;
  if (std::optional<ApiError> e = parse(std::string_view(body))) {
    SendError(res, *e);
    return false;
  }
  return true;
}

const char* kKnownPaths[] = {"/v1/completions", "/v1/chat/completions",
                             "/v1/models",      "/v1/tiers",
                             "/health",         "/metrics",
                             "/tokenize",       "/detokenize",
                             "/tokenizer_info", "/apply-template",
                             "/completion",     "/infill",
                             "/props",          "/"};

// Metrics label of a path: unknown paths share one label, so clients cannot grow the set.
std::string EndpointLabel(const std::string& path) {
  for (const char* p : kKnownPaths) {
    if (path == p) return p;
  }
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  if (path.rfind("/web/", 0) == 0) return "/web/{file}";
  return "other";
}

// The chat page's files: GET / is index.html, GET /web/NAME the rest. They are open to
// anyone; the page asks for an API key when /health says one is needed.
bool IsPagePath(const std::string& path) { return path == "/" || path.rfind("/web/", 0) == 0; }

const WebAsset* FindWebAsset(std::string_view name) {
  for (const WebAsset& a : WebAssets()) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

const char* ContentTypeOf(std::string_view name) {
  auto ends = [name](std::string_view ext) { return name.ends_with(ext); };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".svg")) return "image/svg+xml";
  return "application/octet-stream";
}

// Scripts, styles and requests from the server itself only: model output that the page
// renders can never load or run anything, even if the Markdown renderer let markup through.
constexpr const char* kPagePolicy =
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'";

void SendWebAsset(httplib::Response& res, const WebAsset& asset) {
  res.set_header("Cache-Control", "no-cache");  // the page changes with the binary
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Content-Security-Policy", kPagePolicy);
  res.set_content(std::string(asset.bytes), ContentTypeOf(asset.name));
}

// A finished job's native response (/completion, /infill) with `content`.
NativeCompletion Native(const Tokenizer& tok, std::string content, const Job& job,
                        const JobUpdate& u, int64_t n_prompt) {
  NativeCompletion c;
  c.content = std::move(content);
  c.prompt = tok.Decode(job.spec().prompt);
  c.stop_type = u.reason == FinishReason::kLength ? "limit" : u.stop_string ? "word" : "eos";
  c.usage = Usage{n_prompt, u.completion_tokens, u.cached_tokens};
  c.prompt_ms = 1e3 * u.prompt_seconds;
  c.predicted_ms = 1e3 * u.generation_seconds;
  return c;
}

// httplib calls this for every status >= 400; it fills in only responses without a body
// (unknown paths, bodies over the limit, ...).
httplib::Server::HandlerResponse FillErrorBody(const httplib::Request& req,
                                               httplib::Response& res) {
  if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
  ApiError e;
  e.http_status = res.status;
  switch (res.status) {
    case 404:
      e.message = fmt::format("no route for {} {}", req.method, req.path);
      break;
    case 413:
      e.message =
          fmt::format("the request body is over the server's limit of {} MiB", kMaxBodyBytes >> 20);
      break;
    case 400:
      e.message = "the request could not be read (malformed HTTP, or a body that ended early)";
      break;
    default:
      e.message = fmt::format("HTTP {}", res.status);
  }
  e.code = res.status == 404 ? "not_found" : "";
  res.set_content(Dump(ErrorJson(e)), "application/json");
  return httplib::Server::HandlerResponse::Handled;
}

// A handler's exception as a 500 naming it.
void SendException(const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
  std::string what = "unknown exception";
  try {
    std::rethrow_exception(ep);
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  SendError(res, ServerError(500, "internal error: " + what, "internal_error"));
}

}  // namespace

struct HttpServer::Impl {
  Impl(Context& c, const ServerOptions& o)
      : ctx(c),
        tok(*c.model().tokenizer()),
        options(o),
        scheduler(c,
                  SchedulerOptions{o.n_parallel, std::max(o.step_tokens, o.n_parallel), o.max_queue,
                                   o.promote_device_experts},
                  &metrics),
        created(std::time(nullptr)) {}

  // Registers every endpoint, a group at a time, and the handlers around them: the API key
  // check before routing, error bodies, the request counter.
  void Routes();
  // Before routing: a 401 (Handled) for a request without a valid API key, unless the path
  // is open (/health, the chat page).
  httplib::Server::HandlerResponse CheckApiKey(const httplib::Request& req, httplib::Response& res);
  // GET / and /web/NAME: the chat page.
  void PageRoutes();
  // OpenAI's: POST /v1/completions, /v1/chat/completions; GET /v1/models, /v1/models/ID.
  void OpenAiRoutes();
  // llama-server's own: POST /completion, /infill, /apply-template; GET /props.
  void LlamaServerRoutes();
  // The server's tokenizer, as vLLM and llama-server expose theirs: clients that send token
  // ids (lm-eval's local-completions finds these by itself) need no copy of it. POST
  // /tokenize, /detokenize; GET /tokenizer_info.
  void TokenizerRoutes();
  // GET /health, /metrics (Prometheus), /v1/tiers (the expert tiers' live counters).
  void MonitoringRoutes();

  // The model's entry in /v1/models.
  json ModelJson() const;
  // llama-server's server properties, which its web UI and other llama.cpp clients read for
  // the context size, the slots and the chat template. The defaults are the sampling a
  // request gets when it sets nothing.
  json PropsJson() const;
  // GET /tokenizer_info: eos/bos, the chat template, the context length.
  json TokenizerInfoJson() const;
  // POST /apply-template (llama-server's): the chat prompt a chat completions body would run,
  // without running it.
  void ApplyTemplate(const httplib::Request& req, httplib::Response& res,
                     const httplib::ContentReader& reader);
  // POST /tokenize: {prompt, add_special_tokens} or {content, add_special} -> token ids.
  void Tokenize(const httplib::Request& req, httplib::Response& res,
                const httplib::ContentReader& reader);
  // POST /detokenize: {tokens} -> the text, as `prompt` and as `content`.
  void Detokenize(const httplib::Request& req, httplib::Response& res,
                  const httplib::ContentReader& reader);

  void Generate(const httplib::Request& req, httplib::Response& res,
                const httplib::ContentReader& reader, Endpoint endpoint);
  // POST /infill: the prompt built from the request (InfillPrompt), then Run.
  void Infill(const httplib::Request& req, httplib::Response& res,
              const httplib::ContentReader& reader);
  // POST /completion (llama-server's native completion).
  void NativeComplete(const httplib::Request& req, httplib::Response& res,
                      const httplib::ContentReader& reader);
  // Runs a parsed request's jobs and answers: streamed (r.stream), or whole, as OpenAI's
  // response or as llama-server's native one (`native`: one choice).
  void Run(const httplib::Request& req, httplib::Response& res, const ApiRequest& r, bool native);
  // Streams the choices `jobs` (index i: jobs[i]) as Server-Sent Events. echoes[i]: text to
  // send before choice i's generated text (an echoed prompt); n_prompt: prompt tokens of all.
  void Stream(const httplib::Request& req, httplib::Response& res,
              std::vector<std::shared_ptr<Job>> jobs, const ApiRequest& r, ResponseMeta meta,
              std::vector<std::string> echoes, int64_t n_prompt);
  // Streams one choice in llama-server's native shape: an event per piece of text
  // ({"content", "stop": false, ...}), then the final NativeCompletionJson (content "").
  void StreamNative(const httplib::Request& req, httplib::Response& res, std::shared_ptr<Job> job,
                    ResponseMeta meta, int64_t n_prompt);
  // An id for a tool call of a response: "call_" and 16 random hex digits.
  std::string NewToolCallId() { return fmt::format("call_{:016x}", FreshSeed()); }

  uint64_t FreshSeed() {
    const uint64_t t =
        static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
    return t ^ (seed_counter.fetch_add(1) * 0x9E3779B97F4A7C15ull);
  }

  // Handlers with a generation in flight; Shutdown waits for them to write their ends.
  void EnterGeneration() {
    std::lock_guard lock(active_mu);
    ++active;
  }
  void LeaveGeneration() {
    {
      std::lock_guard lock(active_mu);
      --active;
    }
    active_cv.notify_all();
  }

  Context& ctx;
  const Tokenizer& tok;
  const ServerOptions options;
  const std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  std::optional<ChatTemplate> chat;
  std::string chat_error;  // why there is no chat template
  // A chat prompt ends inside an open <think> block (the template opens it), so the
  // generated text starts as reasoning.
  bool ThinkingOpen() const { return chat && chat->thinking().forced_open; }
  // How chat output is read (harmony's channels, GLM's call blocks, else <think>/Hermes).
  ChatTemplate::Kind ChatFormat() const {
    return chat ? chat->kind() : ChatTemplate::Kind::kChatml;
  }
  Metrics metrics;
  Scheduler scheduler;
  httplib::Server http;
  int port = 0;
  const int64_t created;
  std::atomic<uint64_t> next_id{1};
  std::atomic<uint64_t> seed_counter{1};
  std::atomic<bool> shutting_down{false};
  std::atomic<bool> run_started{false};
  std::atomic<bool> listen_done{false};
  std::mutex active_mu;
  std::condition_variable active_cv;
  int active = 0;
};

void HttpServer::Impl::Generate(const httplib::Request& req, httplib::Response& res,
                                const httplib::ContentReader& reader, Endpoint endpoint) {
  ApiRequest r;
  if (!ReadRequest(req, res, reader, [&](std::string_view body) {
        return ParseRequest(body, endpoint, options.model_id, &r);
      })) {
    return;
  }
  Run(req, res, r, /*native=*/false);
}

void HttpServer::Impl::Infill(const httplib::Request& req, httplib::Response& res,
                              const httplib::ContentReader& reader) {
  InfillRequest in;
  if (!ReadRequest(req, res, reader, [&](std::string_view body) -> std::optional<ApiError> {
        if (std::optional<ApiError> e = ParseInfillRequest(body, options.model_id, &in)) return e;
        std::vector<int32_t> ids;
        if (std::optional<ApiError> e = InfillPrompt(tok, in, ctx.n_ctx(), &ids)) return e;
        in.api.prompts = {ApiPrompt{"", std::vector<int64_t>(ids.begin(), ids.end()), true}};
        return std::nullopt;
      })) {
    return;
  }
  Run(req, res, in.api, /*native=*/true);
}

void HttpServer::Impl::NativeComplete(const httplib::Request& req, httplib::Response& res,
                                      const httplib::ContentReader& reader) {
  ApiRequest r;
  if (!ReadRequest(req, res, reader, [&](std::string_view body) {
        return ParseNativeCompletionRequest(body, options.model_id, &r);
      })) {
    return;
  }
  Run(req, res, r, /*native=*/true);
}

void HttpServer::Impl::Run(const httplib::Request& req, httplib::Response& res, const ApiRequest& r,
                           bool native) {
  const Endpoint endpoint = r.endpoint;
  // A job per choice: n per prompt (chat: one prompt), choice p * n + k. They run together
  // like any other requests.
  const size_t n_prompts = endpoint == Endpoint::kChat ? 1 : r.prompts.size();
  const size_t n_choices = n_prompts * static_cast<size_t>(r.n);
  std::vector<std::shared_ptr<Job>> jobs;
  std::vector<std::string> echoes;  // echo: the prompt as sent, or as its tokens decode
  int64_t n_prompt = 0;
  for (size_t p = 0; p < n_prompts; ++p) {
    GenerationSpec spec;
    const GenerationTarget target{tok,         chat ? &*chat : nullptr, chat_error,
                                  ctx.n_ctx(), options.enable_thinking, options.reasoning_effort};
    if (std::optional<ApiError> e = MakeSpec(target, r, p, FreshSeed(), &spec)) {
      return SendError(res, *e);
    }
    n_prompt += static_cast<int64_t>(spec.prompt.size());
    const std::string echo = !r.echo                  ? ""
                             : r.prompts[p].is_tokens ? tok.Decode(spec.prompt, false)
                                                      : r.prompts[p].text;
    for (int32_t k = 0; k < r.n; ++k) {
      GenerationSpec choice = spec;
      // Choice k's seed: seed + k (choice 0 is what n = 1 gives); without one, fresh seeds.
      choice.sampling.seed = r.sampling.seed ? *r.sampling.seed + static_cast<uint64_t>(k)
                             : k == 0        ? spec.sampling.seed
                                             : FreshSeed();
      echoes.push_back(echo);
      jobs.push_back(std::make_shared<Job>(std::move(choice)));
    }
  }
  EnterGeneration();
  if (Status s = scheduler.SubmitAll(jobs); !s.ok()) {
    LeaveGeneration();
    res.set_header("Retry-After", "1");
    return SendError(
        res,
        ServerError(503, s.message(),
                    s.code() == StatusCode::kResourceExhausted ? "server_busy" : "shutting_down"));
  }
  ResponseMeta meta;
  meta.id = fmt::format("{}-{:x}", endpoint == Endpoint::kChat ? "chatcmpl" : "cmpl",
                        next_id.fetch_add(1));
  meta.created = std::time(nullptr);
  meta.model = options.model_id;
  if (r.stream && native) {
    return StreamNative(req, res, std::move(jobs[0]), std::move(meta), n_prompt);
  }
  if (r.stream) {
    return Stream(req, res, std::move(jobs), r, std::move(meta), std::move(echoes), n_prompt);
  }

  ConnectionProbe probe(req);
  std::vector<std::string> texts(n_choices);
  std::vector<std::vector<TokenLogprob>> logprobs(n_choices);
  std::vector<JobUpdate> last(n_choices);
  // The job wakes this thread at every token; look at the client once per poll interval.
  // The jobs run together; waiting on each in turn loses nothing (a job keeps its updates).
  auto next_probe = std::chrono::steady_clock::now() + kPollInterval;
  for (size_t i = 0; i < n_choices; ++i) {
    JobUpdate& u = last[i];
    for (;;) {
      jobs[i]->Wait(kPollInterval, &u);
      texts[i] += u.text;
      for (TokenLogprob& e : u.logprobs) logprobs[i].push_back(std::move(e));
      if (u.finished) break;
      if (std::chrono::steady_clock::now() < next_probe) continue;
      next_probe = std::chrono::steady_clock::now() + kPollInterval;
      if (probe.Gone()) {
        for (const auto& job : jobs) job->Cancel();
        LeaveGeneration();
        res.status = 499;  // client closed the request; nobody reads this
        return;
      }
    }
  }
  LeaveGeneration();
  if (native) {
    const JobUpdate& u = last[0];
    if (std::optional<ApiError> e = JobError(u)) return SendError(res, *e);
    return SendJson(res, 200,
                    NativeCompletionJson(meta, Native(tok, texts[0], *jobs[0], u, n_prompt)));
  }
  std::vector<Choice> choices;
  Usage usage{n_prompt, 0};
  const ChoiceOptions choice_options{endpoint,        options.split_reasoning,
                                     ThinkingOpen(),  r.tool_choice != ToolChoice::kNone,
                                     r.logprobs >= 0, ChatFormat()};
  for (size_t i = 0; i < n_choices; ++i) {
    if (std::optional<ApiError> e = JobError(last[i])) return SendError(res, *e);
    usage.completion_tokens += last[i].completion_tokens;
    usage.cached_tokens += last[i].cached_tokens;
    choices.push_back(WholeChoice(tok, choice_options, echoes[i], texts[i], logprobs[i],
                                  last[i].reason, [this] { return NewToolCallId(); }));
  }
  SendJson(res, 200, CompletionJson(endpoint, meta, choices, usage));
}

void HttpServer::Impl::StreamNative(const httplib::Request& req, httplib::Response& res,
                                    std::shared_ptr<Job> job, ResponseMeta meta, int64_t n_prompt) {
  struct State {
    std::shared_ptr<Job> job;
    ResponseMeta meta;
    int64_t n_prompt;
    ConnectionProbe probe;
  };
  auto st = std::make_shared<State>(
      State{std::move(job), std::move(meta), n_prompt, ConnectionProbe(req)});
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, st](size_t /*offset*/, httplib::DataSink& sink) {
        JobUpdate u;
        if (!st->job->Wait(kPollInterval, &u)) {
          if (!st->probe.Gone()) return true;  // nothing yet; httplib calls again
          st->job->Cancel();
          return false;
        }
        std::string out;
        if (!u.text.empty()) {
          out += SseEvent({{"index", 0},
                           {"content", u.text},
                           {"tokens", nlohmann::json::array()},
                           {"stop", false},
                           {"tokens_predicted", u.completion_tokens},
                           {"tokens_evaluated", st->n_prompt}});
        }
        if (out.empty() && !u.finished) return true;  // news without text (cached tokens)
        if (u.finished) {
          if (std::optional<ApiError> e = JobError(u)) {
            out += SseEvent(ErrorJson(*e));
          } else {
            out += SseEvent(
                NativeCompletionJson(st->meta, Native(tok, "", *st->job, u, st->n_prompt)));
          }
        }
        if (!sink.write(out.data(), out.size())) {
          st->job->Cancel();
          return false;
        }
        if (u.finished) sink.done();
        return true;
      },
      [this, st](bool /*success*/) {
        st->job->Cancel();
        LeaveGeneration();
      });
}

void HttpServer::Impl::Stream(const httplib::Request& req, httplib::Response& res,
                              std::vector<std::shared_ptr<Job>> jobs, const ApiRequest& r,
                              ResponseMeta meta, std::vector<std::string> echoes,
                              int64_t n_prompt) {
  // One choice of the stream: its job, and what turns the job's updates into events.
  struct Choice {
    std::shared_ptr<Job> job;
    std::optional<ChoiceStream> events;
  };
  struct State {
    std::vector<Choice> choices;
    ResponseMeta meta;
    Endpoint endpoint;
    bool include_usage;
    int64_t n_prompt;
    ConnectionProbe probe;
    bool first = true;
    size_t n_finished = 0;
    void CancelAll() {
      for (Choice& c : choices) c.job->Cancel();  // no effect on those that finished
    }
  };
  auto st = std::make_shared<State>(
      State{{}, std::move(meta), r.endpoint, r.include_usage, n_prompt, ConnectionProbe(req)});
  const ChoiceOptions choice_options{r.endpoint,      options.split_reasoning,
                                     ThinkingOpen(),  r.tool_choice != ToolChoice::kNone,
                                     r.logprobs >= 0, ChatFormat()};
  for (size_t i = 0; i < jobs.size(); ++i) {
    Choice& c = st->choices.emplace_back();
    c.job = std::move(jobs[i]);
    c.events.emplace(tok, choice_options, st->meta, static_cast<int>(i), std::move(echoes[i]),
                     [this] { return NewToolCallId(); });
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [st](size_t /*offset*/, httplib::DataSink& sink) {
        std::string out;
        if (st->first && st->endpoint == Endpoint::kChat) {
          for (const Choice& c : st->choices) out += c.events->Opening();
        }
        st->first = false;
        std::optional<ApiError> error;
        auto take = [&](size_t i, const JobUpdate& u) {
          std::optional<ApiError> e = st->choices[i].events->Take(u, &out);
          if (u.finished) ++st->n_finished;
          if (e && !error) error = std::move(e);
        };
        // What every choice has now; when none has anything, wait on one of them a while.
        const size_t before = out.size();
        std::optional<size_t> waiting;  // an unfinished choice
        for (size_t i = 0; i < st->choices.size(); ++i) {
          if (st->choices[i].events->finished()) continue;
          if (!waiting) waiting = i;
          JobUpdate u;
          if (st->choices[i].job->Wait(std::chrono::milliseconds(0), &u)) take(i, u);
        }
        if (out.size() == before && waiting && !error) {
          JobUpdate u;
          // Several choices: wait less, so that the others' tokens are not held back long.
          const auto wait = st->choices.size() > 1 ? kPollInterval / 5 : kPollInterval;
          if (st->choices[*waiting].job->Wait(wait, &u)) take(*waiting, u);
        }
        const bool done = error || st->n_finished == st->choices.size();
        if (out.empty() && !done) {
          if (st->probe.Gone()) {
            st->CancelAll();
            return false;
          }
          return true;  // nothing yet; httplib calls again
        }
        if (error) {
          st->CancelAll();  // one failed choice ends the stream
          out += SseEvent(ErrorJson(*error));
        } else if (done) {
          if (st->include_usage) {
            Usage usage{st->n_prompt, 0, 0};
            for (const Choice& c : st->choices) {
              usage.completion_tokens += c.events->completion_tokens();
              usage.cached_tokens += c.events->cached_tokens();
            }
            out += SseEvent(UsageChunkJson(st->endpoint, st->meta, usage));
          }
          out += kSseDone;
        }
        if (!sink.write(out.data(), out.size())) {
          st->CancelAll();
          return false;
        }
        if (done) sink.done();
        return true;
      },
      [this, st](bool /*success*/) {
        st->CancelAll();
        LeaveGeneration();
      });
}

void HttpServer::Impl::Routes() {
  // API keys: checked before routing, so unknown paths and bodies are not looked at either.
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    return CheckApiKey(req, res);
  });
  PageRoutes();
  OpenAiRoutes();
  LlamaServerRoutes();
  TokenizerRoutes();
  MonitoringRoutes();
  http.set_error_handler(httplib::Server::HandlerWithResponse(FillErrorBody));
  http.set_exception_handler(SendException);
  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics.CountRequest(EndpointLabel(req.path), res.status);
  });
}

httplib::Server::HandlerResponse HttpServer::Impl::CheckApiKey(const httplib::Request& req,
                                                               httplib::Response& res) {
  if (options.api_keys.empty() || req.path == "/health" || IsPagePath(req.path)) {
    return httplib::Server::HandlerResponse::Unhandled;
  }
  const std::string header = req.get_header_value("Authorization");
  if (ApiKeyMatches(BearerToken(header), options.api_keys)) {
    return httplib::Server::HandlerResponse::Unhandled;
  }
  ApiError e;
  e.http_status = 401;
  e.code = "invalid_api_key";
  e.message = header.empty()
                  ? "this server needs an API key: send the header 'Authorization: Bearer KEY'"
                  : "the API key is not valid (send 'Authorization: Bearer KEY' with a key the "
                    "server was started with)";
  res.set_header("WWW-Authenticate", "Bearer");
  res.set_header("Connection", "close");  // a body the request may have is left unread
  SendError(res, e);
  return httplib::Server::HandlerResponse::Handled;
}

void HttpServer::Impl::PageRoutes() {
  http.Get("/", [](const httplib::Request&, httplib::Response& res) {
    const WebAsset* page = FindWebAsset("index.html");
    MT_CHECK(page != nullptr);
    SendWebAsset(res, *page);
  });
  http.Get(R"(/web/([A-Za-z0-9_.-]+))", [](const httplib::Request& req, httplib::Response& res) {
    const WebAsset* asset = FindWebAsset(req.matches[1].str());
    if (asset == nullptr) {
      res.status = 404;  // the error handler writes the body
      return;
    }
    SendWebAsset(res, *asset);
  });
}

void HttpServer::Impl::OpenAiRoutes() {
  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res,
                                      const httplib::ContentReader& reader) {
    Generate(req, res, reader, Endpoint::kCompletions);
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res,
                                           const httplib::ContentReader& reader) {
    Generate(req, res, reader, Endpoint::kChat);
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    SendJson(res, 200, {{"object", "list"}, {"data", json::array({ModelJson()})}});
  });
  http.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    if (req.matches[1] != options.model_id) {
      ApiError e;
      e.http_status = 404;
      e.message = fmt::format("the model '{}' does not exist; this server serves '{}'",
                              req.matches[1].str(), options.model_id);
      e.param = "model";
      e.code = "model_not_found";
      return SendError(res, e);
    }
    SendJson(res, 200, ModelJson());
  });
}

json HttpServer::Impl::ModelJson() const {
  return json{{"id", options.model_id},
              {"object", "model"},
              {"created", created},
              {"owned_by", "moetier"},
              {"context_length", ctx.n_ctx()}};
}

void HttpServer::Impl::LlamaServerRoutes() {
  http.Post("/completion",
            [this](const httplib::Request& req, httplib::Response& res,
                   const httplib::ContentReader& reader) { NativeComplete(req, res, reader); });
  http.Post("/infill", [this](const httplib::Request& req, httplib::Response& res,
                              const httplib::ContentReader& reader) { Infill(req, res, reader); });
  http.Post("/apply-template",
            [this](const httplib::Request& req, httplib::Response& res,
                   const httplib::ContentReader& reader) { ApplyTemplate(req, res, reader); });
  http.Get("/props", [this](const httplib::Request&, httplib::Response& res) {
    SendJson(res, 200, PropsJson());
  });
}

void HttpServer::Impl::ApplyTemplate(const httplib::Request& req, httplib::Response& res,
                                     const httplib::ContentReader& reader) {
  ApiRequest r;
  if (!ReadRequest(req, res, reader, [&](std::string_view body) {
        // "model" may be left out here, as llama-server allows. (Ordered: the tools are
        // rendered in the client's key order.)
        // (Too deep: the body as sent, for ParseRequest's error.)
        auto j = ParseJsonWithinDepth<nlohmann::ordered_json>(body);
        if (j.is_object() && !j.contains("model")) j["model"] = options.model_id;
        return ParseRequest(j.is_object() ? j.dump() : std::string(body), Endpoint::kChat,
                            options.model_id, &r);
      })) {
    return;
  }
  if (!chat) {
    ApiError e;
    e.message = chat_error;
    e.param = "messages";
    e.code = "chat_template_unavailable";
    return SendError(res, e);
  }
  Result<ChatPrompt> p = RenderChat(*chat, r, options.enable_thinking, options.reasoning_effort);
  if (!p.ok()) {
    ApiError e;
    e.message = p.status().message();
    e.param = "messages";
    return SendError(res, e);
  }
  SendJson(res, 200, {{"prompt", p->text}});
}

json HttpServer::Impl::PropsJson() const {
  const SamplingRequest defaults;
  // The float as written (0.8, not 0.800000011920929).
  auto num = [](float f) { return std::stod(fmt::format("{}", f)); };
  const std::string* jinja = ctx.model().gguf().metadata().FindString("tokenizer.chat_template");
  return {{"default_generation_settings",
           {{"n_ctx", ctx.n_ctx()},
            {"params",
             {{"n_predict", -1},
              {"temperature", num(defaults.temperature)},
              {"top_k", defaults.top_k},
              {"top_p", num(defaults.top_p)},
              {"min_p", num(defaults.min_p)},
              {"repeat_penalty", num(defaults.repeat_penalty)},
              {"presence_penalty", num(defaults.presence_penalty)},
              {"frequency_penalty", num(defaults.frequency_penalty)}}}}},
          {"total_slots", options.n_parallel},
          {"model_alias", options.model_id},
          {"model_path", ctx.model().path()},
          {"chat_template", jinja != nullptr ? json(*jinja) : json(nullptr)},
          {"modalities", {{"vision", false}, {"audio", false}}},
          {"build_info", "moetier"}};
}

void HttpServer::Impl::TokenizerRoutes() {
  http.Post("/tokenize",
            [this](const httplib::Request& req, httplib::Response& res,
                   const httplib::ContentReader& reader) { Tokenize(req, res, reader); });
  http.Post("/detokenize",
            [this](const httplib::Request& req, httplib::Response& res,
                   const httplib::ContentReader& reader) { Detokenize(req, res, reader); });
  http.Get("/tokenizer_info", [this](const httplib::Request&, httplib::Response& res) {
    SendJson(res, 200, TokenizerInfoJson());
  });
}

void HttpServer::Impl::Tokenize(const httplib::Request& req, httplib::Response& res,
                                const httplib::ContentReader& reader) {
  TokenizeRequest r;
  if (!ReadRequest(req, res, reader, [&](std::string_view body) {
        return ParseTokenizeRequest(body, options.model_id, &r);
      })) {
    return;
  }
  Result<std::vector<int32_t>> ids = tok.Encode(r.text, r.add_special && tok.add_bos(), true);
  if (!ids.ok()) {
    return SendError(res, ServerError(500, ids.status().message(), "tokenizer_error"));
  }
  SendJson(
      res, 200,
      {{"tokens", ids.value()}, {"count", ids.value().size()}, {"max_model_len", ctx.n_ctx()}});
}

void HttpServer::Impl::Detokenize(const httplib::Request& req, httplib::Response& res,
                                  const httplib::ContentReader& reader) {
  DetokenizeRequest r;
  if (!ReadRequest(req, res, reader, [&](std::string_view body) {
        return ParseDetokenizeRequest(body, options.model_id, &r);
      })) {
    return;
  }
  std::vector<int32_t> ids;
  for (size_t i = 0; i < r.tokens.size(); ++i) {
    if (r.tokens[i] >= tok.n_vocab()) {
      ApiError e;
      e.message = fmt::format("tokens[{}]: token id {} is outside the vocabulary (0..{})", i,
                              r.tokens[i], tok.n_vocab() - 1);
      e.param = "tokens";
      return SendError(res, e);
    }
    ids.push_back(static_cast<int32_t>(r.tokens[i]));
  }
  const std::string text = tok.Decode(ids);
  // vLLM names the text `prompt`, llama-server `content`.
  SendJson(res, 200, {{"prompt", text}, {"content", text}});
}

json HttpServer::Impl::TokenizerInfoJson() const {
  auto text = [this](std::optional<int32_t> id) {
    return id ? json(std::string(tok.token_text(*id))) : json(nullptr);
  };
  const std::string* jinja = ctx.model().gguf().metadata().FindString("tokenizer.chat_template");
  return {{"tokenizer_class", "moetier"},
          {"eos_token", text(tok.eos_id())},
          {"bos_token", text(tok.bos_id())},
          {"pad_token", nullptr},
          {"add_bos_token", tok.add_bos()},
          {"vocab_size", tok.n_vocab()},
          {"model_max_length", ctx.n_ctx()},
          {"chat_template", jinja != nullptr ? json(*jinja) : json(nullptr)}};
}

void HttpServer::Impl::MonitoringRoutes() {
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const SchedulerGauges g = scheduler.Gauges();
    const bool ok = scheduler.accepting();
    SendJson(res, ok ? 200 : 503,
             {{"status", ok ? "ok" : "shutting down"},
              {"slots_idle", g.slots_total - g.slots_busy},
              {"slots_busy", g.slots_busy},
              {"queue_depth", g.queue_depth},
              {"api_key_required", !options.api_keys.empty()}});
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.Render(scheduler.Gauges()), "text/plain; version=0.0.4");
  });
  http.Get("/v1/tiers", [this](const httplib::Request&, httplib::Response& res) {
    const double uptime =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    SendJson(res, 200, TiersJson(scheduler.Gauges(), scheduler.Activity(), uptime));
  });
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() {
  if (impl_ != nullptr) impl_->scheduler.Shutdown(0ms);
}

Result<std::unique_ptr<HttpServer>> HttpServer::Create(Context& ctx, const ServerOptions& options) {
  if (ctx.model().tokenizer() == nullptr) {
    return InvalidArgument("{}: the model has no tokenizer", ctx.model().path());
  }
  auto impl = std::make_unique<Impl>(ctx, options);
  const Model& model = ctx.model();
  std::optional<int32_t> eos = impl->tok.eos_id();
  const std::string eos_text = eos ? std::string(impl->tok.token_text(*eos)) : "";
  if (!options.chat_template.empty()) {
    Result<ChatTemplate::Kind> kind = ChatTemplate::ByName(options.chat_template);
    if (!kind.ok()) return kind.status().WithContext("--chat-template");
    impl->chat.emplace(kind.value(), eos_text, "--chat-template");
  } else {
    const std::string* jinja = model.gguf().metadata().FindString("tokenizer.chat_template");
    Result<ChatTemplate> t =
        ChatTemplate::ForModel(jinja ? *jinja : "", model.hparams().arch, eos_text);
    if (t.ok()) {
      impl->chat.emplace(t.value());
    } else {
      impl->chat_error = "this model has no chat template moetier can render (" +
                         t.status().message() + "); start the server with --chat-template";
    }
  }
  Impl* p = impl.get();
  const size_t threads = options.http_threads != 0
                             ? options.http_threads
                             : 2 * (options.n_parallel + options.max_queue) + 16;
  p->http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  p->http.set_payload_max_length(kMaxBodyBytes);
  p->http.set_tcp_nodelay(true);
  p->Routes();
  if (options.port == 0) {
    p->port = p->http.bind_to_any_port(options.host);
  } else {
    p->port = p->http.bind_to_port(options.host, options.port) ? options.port : -1;
  }
  if (p->port < 0) {
    return IoError("cannot listen on {}:{} (address in use, or not an address of this host)",
                   options.host, options.port);
  }
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

int HttpServer::port() const { return impl_->port; }

std::string HttpServer::chat_template_description() const {
  if (!impl_->chat) return "none: " + impl_->chat_error;
  const ChatThinking& th = impl_->chat->thinking();
  std::string thinking;
  if (th.history) {
    thinking += impl_->chat->kind() == ChatTemplate::Kind::kDeepseek3 ? ", past reasoning dropped"
                                                                      : ", past reasoning as Qwen3";
  }
  if (th.switchable) thinking += ", enable_thinking";
  if (th.forced_open) thinking += ", always thinks";
  if (impl_->chat->kind() == ChatTemplate::Kind::kHarmony)
    thinking += ", analysis channel as reasoning";
  if (impl_->chat->kind() == ChatTemplate::Kind::kGlm45) thinking += ", enable_thinking";
  if (!impl_->chat->default_system().empty()) thinking += ", a default system message";
  return fmt::format("{} (from {}{})", impl_->chat->name(), impl_->chat->origin(), thinking);
}

void HttpServer::Run() {
  impl_->scheduler.Start();
  impl_->run_started.store(true);
  if (!impl_->shutting_down.load()) impl_->http.listen_after_bind();
  impl_->listen_done.store(true);
}

void HttpServer::Shutdown(std::chrono::milliseconds drain) {
  Impl& p = *impl_;
  if (p.shutting_down.exchange(true)) {
    p.scheduler.CancelAll();  // a second request to stop: do not wait for the drain
    return;
  }
  p.scheduler.Shutdown(drain);
  // Every job has finished; give their handlers a moment to write the ends of responses.
  {
    std::unique_lock lock(p.active_mu);
    p.active_cv.wait_for(lock, 5s, [&] { return p.active == 0; });
  }
  // stop() only acts on a running server: repeat until Run has returned (Run may not have
  // reached listen yet; if it has not started, it sees shutting_down and does not listen).
  while (p.run_started.load() && !p.listen_done.load()) {
    p.http.stop();
    std::this_thread::sleep_for(10ms);
  }
}

}  // namespace mt::server
