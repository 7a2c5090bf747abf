// moetier run -m MODEL [-p PROMPT | -f FILE] [-n N] [-c CTX] [-t THREADS] [--temp T] ...
// Generates text, streaming tokens to stdout; a closing line on stderr gives the speeds.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "base/file_io.h"
#include "command.h"
#include "engine/context.h"
#include "engine/model.h"
#include "grammar/chat_answer.h"
#include "grammar/json_schema.h"
#include "grammar/token_filter.h"
#include "sampler/sampler.h"
#include "server/harmony.h"
#include "storage_flags.h"
#include "tokenizer/chat_template.h"

namespace mt::cli {
namespace {

struct RunFlags {
  std::string model;
  std::string prompt;
  std::string prompt_file;
  bool prompt_given = false;  // -p was passed, even if empty
  std::string system_prompt;
  int n_predict = -1;
  uint32_t n_ctx = 0;  // 0: 4096, or the model's training context if smaller
  uint32_t n_batch = 512;
  int n_threads = 0;
  bool pin_threads = false;
  SamplerParams sampling;
  int64_t seed = -1;
  bool chat = false;
  bool conversation = false;  // -cnv: user turns from stdin
  std::string chat_template;
  std::string chat_template_kwargs;
  std::vector<std::string> stops;
  std::vector<std::string> logit_bias;  // llama.cpp's TOKEN_ID(+/-)BIAS
  std::string grammar;                  // GBNF text; or in a file, or a JSON schema (text or file)
  std::string grammar_file;
  std::string json_schema;
  std::string json_schema_file;
  bool ignore_eos = false;
  bool no_display_prompt = false;
  KvTypeFlags kv_type;
  std::string dump_logits;
  StorageFlags storage;
};

// Writes a float32 .npy file (format 1.0) of the given shape.
Status WriteNpy(const std::string& path, const std::vector<float>& data, size_t rows, size_t cols) {
  std::string header =
      fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {}), }}", rows, cols);
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::string bytes("\x93NUMPY\x01\x00", 8);
  const uint16_t len = static_cast<uint16_t>(header.size());
  bytes.append(reinterpret_cast<const char*>(&len), 2);
  bytes += header;
  bytes.append(reinterpret_cast<const char*>(data.data()), rows * cols * sizeof(float));
  return WriteFileAtomically(path, bytes);
}

// Emits generated text, holding back any tail that could still become a stop string.
class StopFilter {
 public:
  explicit StopFilter(const std::vector<std::string>& stops) : stops_(stops) {}
  // Adds text; returns what can be printed now; sets *stopped when a stop string appears
  // (the stop string and anything after it are dropped).
  std::string Push(const std::string& text, bool* stopped) {
    held_ += text;
    for (const std::string& s : stops_) {
      size_t at = held_.find(s);
      if (!s.empty() && at != std::string::npos) {
        *stopped = true;
        std::string out = held_.substr(0, at);
        held_.clear();
        return out;
      }
    }
    size_t keep = 0;  // longest suffix of held_ that is a proper prefix of a stop string
    for (const std::string& s : stops_) {
      for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n) {
        if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
          keep = n;
          break;
        }
      }
    }
    std::string out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return out;
  }
  std::string Flush() { return std::exchange(held_, {}); }

 private:
  const std::vector<std::string>& stops_;
  std::string held_;
};

void Print(const std::string& s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

// llama.cpp's meanings hold out of range (--temp <= 0 greedy; --top-k <= 0, --top-p >= 1 and
// --min-p <= 0 off), but nothing the sampler would turn into NaN probabilities.
Status CheckSampling(const SamplerParams& s) {
  const std::pair<const char*, float> values[] = {{"--temp", s.temperature},
                                                  {"--top-p", s.top_p},
                                                  {"--min-p", s.min_p},
                                                  {"--repeat-penalty", s.repeat_penalty},
                                                  {"--presence-penalty", s.presence_penalty},
                                                  {"--frequency-penalty", s.frequency_penalty}};
  for (const auto& [flag, v] : values) {
    if (!std::isfinite(v)) return InvalidArgument("{} must be a finite number, not {}", flag, v);
  }
  if (s.repeat_penalty <= 0) {
    return InvalidArgument("--repeat-penalty must be > 0 (1: off), not {}", s.repeat_penalty);
  }
  if (s.repeat_last_n < -1) {
    return InvalidArgument("--repeat-last-n must be -1 (all) or more, not {}", s.repeat_last_n);
  }
  return Status::Ok();
}

// --logit-bias values as llama.cpp spells them: TOKEN_ID followed by +BIAS or -BIAS, e.g.
// 15043+1 or 15043-inf (never that token). Ids are checked against the vocabulary later.
Result<std::vector<std::pair<int32_t, float>>> ParseLogitBias(
    const std::vector<std::string>& values) {
  std::vector<std::pair<int32_t, float>> out;
  for (const std::string& v : values) {
    auto bad = [&] {
      return InvalidArgument(
          "--logit-bias '{}': expected TOKEN_ID+BIAS or TOKEN_ID-BIAS with a "
          "finite BIAS or -inf (e.g. 15043+1, 15043-inf)",
          v);
    };
    const size_t sign = v.find_first_of("+-");
    const auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
    if (sign == std::string::npos || sign == 0 || sign > 10 ||
        !std::all_of(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(sign), is_digit) ||
        std::stoll(v.substr(0, sign)) > std::numeric_limits<int32_t>::max()) {
      return bad();
    }
    char* end = nullptr;
    const float bias = std::strtof(v.c_str() + sign, &end);
    // +inf would leave the softmax inf - inf = NaN; -inf bans the token.
    if (end == v.c_str() + sign || *end != '\0' || std::isnan(bias) || bias == INFINITY) {
      return bad();
    }
    out.emplace_back(std::stoi(v.substr(0, sign)), bias);
  }
  return out;
}

// The GBNF text of --grammar, --grammar-file, --json-schema or --json-schema-file (at most
// one of them), checked; empty when none is given.
Result<std::string> LoadGrammar(const RunFlags& f) {
  const int given = !f.grammar.empty() + !f.grammar_file.empty() + !f.json_schema.empty() +
                    !f.json_schema_file.empty();
  if (given == 0) return std::string();
  if (given > 1) {
    return InvalidArgument(
        "give at most one of --grammar, --grammar-file, --json-schema and "
        "--json-schema-file");
  }
  std::string text = !f.grammar.empty() ? f.grammar : f.json_schema;
  const std::string& file = !f.grammar_file.empty() ? f.grammar_file : f.json_schema_file;
  const char* flag = !f.grammar.empty()        ? "--grammar"
                     : !f.grammar_file.empty() ? "--grammar-file"
                     : !f.json_schema.empty()  ? "--json-schema"
                                               : "--json-schema-file";
  if (!file.empty()) {
    text = MT_TRY(ReadWholeFile(file));
  }
  if (!f.json_schema.empty() || !f.json_schema_file.empty()) {
    nlohmann::ordered_json schema;
    try {
      schema = nlohmann::ordered_json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      return InvalidArgument("{}: not valid JSON ({})", flag, e.what());
    }
    Result<std::string> gbnf = grammar::JsonSchemaToGbnf(schema);
    if (!gbnf.ok()) return gbnf.status().WithContext(flag);
    text = std::move(gbnf).value();
  }
  Result<std::shared_ptr<const grammar::Grammar>> g = grammar::Grammar::Parse(text);
  if (!g.ok()) return g.status().WithContext(file.empty() ? flag : file);
  return text;
}

// Samples after the evaluated tokens whose last logits are `logits` and prints the text,
// until an end token, -n, a stop string or the end of the context. `history` (the penalties'
// window) gets the sampled tokens; each one but the last is evaluated, so the context holds
// history less at most its last token. Returns the text printed; a failure after some text
// has ended that text's line.
Result<std::string> GenerateAndPrint(Context& ctx, const Tokenizer& tok, const RunFlags& f,
                                     Sampler& sampler, grammar::GrammarFilter* filter,
                                     std::vector<float>& logits, std::vector<int32_t>& history,
                                     int* n_generated) {
  StreamDecoder decoder(tok, /*special=*/false);
  StopFilter stop_filter(f.stops);
  std::string printed;
  auto print = [&](const std::string& s) {
    Print(s);
    printed += s;
  };
  bool stopped = false;
  while ((f.n_predict < 0 || *n_generated < f.n_predict) && !stopped &&
         ctx.n_past() < ctx.n_ctx()) {
    const int32_t id = sampler.Sample(logits, history, filter);
    if (id < 0) {  // only under a grammar: nothing can follow
      if (filter->IsComplete()) break;
      Print("\n");
      return InvalidArgument(
          "grammar: no token of the vocabulary can continue the output "
          "after {} generated tokens",
          *n_generated);
    }
    if (filter) filter->Accept(id);
    ++*n_generated;
    history.push_back(id);
    // Under a grammar an end token (allowed once the text is whole) ends it, --ignore-eos or
    // not.
    if ((!f.ignore_eos || filter) && tok.IsEndOfGeneration(id)) break;
    print(stop_filter.Push(decoder.Push(id), &stopped));
    if (stopped || (f.n_predict >= 0 && *n_generated >= f.n_predict)) break;
    if (ctx.n_past() >= ctx.n_ctx()) break;
    const int32_t next[1] = {id};
    if (Status s = ctx.Eval(next, LogitsFor::kLast, &logits); !s.ok()) {
      Print("\n");
      return s;
    }
  }
  if (!stopped) print(stop_filter.Push(decoder.Flush(), &stopped) + stop_filter.Flush());
  return printed;
}

// -cnv: a conversation, a user turn per line of stdin (`first`, from -p or -f, before them),
// until the end of input or "/exit"; each answer is printed on stdout as it comes. A turn
// renders the whole conversation and evaluates only the tokens after the longest prefix the
// context already holds (the earlier turns, unless the template renders them differently
// now: Qwen3 drops past reasoning).
int Converse(const RunFlags& f, Context& ctx, const Tokenizer& tok, const ChatTemplate& tmpl,
             const ChatTemplateKwargs& kwargs, Sampler& sampler, std::string first) {
  std::vector<ChatMessage> messages;
  if (!f.system_prompt.empty()) messages.push_back({"system", f.system_prompt});
  std::vector<int32_t> history;  // the conversation's tokens; the context holds a prefix
  const bool tty = isatty(STDIN_FILENO) != 0;
  std::string line = std::move(first);
  int turns = 0;
  int64_t evaluated = 0, reused = 0;
  for (;;) {
    if (line.empty()) {
      if (tty) std::fputs("> ", stderr);
      if (!std::getline(std::cin, line) || line == "/exit") break;
      if (line.empty()) continue;
    }
    messages.push_back({"user", std::exchange(line, "")});
    Result<ChatPrompt> rendered = tmpl.Render(messages, true, nullptr, kwargs);
    if (!rendered.ok()) return ReportError(rendered.status());
    Result<std::vector<int32_t>> tokens = tok.Encode(rendered->text, rendered->add_bos, true);
    if (!tokens.ok()) return ReportError(tokens.status());
    if (tokens->size() >= ctx.n_ctx()) {
      return ReportError(
          InvalidArgument("the conversation has {} tokens, more than the context "
                          "of {} (raise -c)",
                          tokens->size(), ctx.n_ctx()));
    }
    std::vector<float> logits;
    Result<size_t> kept = ctx.EvalAfterPrefix(history, *tokens, &logits);
    if (!kept.ok()) return ReportError(kept.status());
    evaluated += static_cast<int64_t>(tokens->size() - *kept);
    reused += static_cast<int64_t>(*kept);
    history = std::move(tokens).value();
    int n_generated = 0;
    Result<std::string> answer =
        GenerateAndPrint(ctx, tok, f, sampler, nullptr, logits, history, &n_generated);
    if (!answer.ok()) return ReportError(answer.status());
    Print("\n");
    if (tmpl.kind() == ChatTemplate::Kind::kHarmony) {
      // The turn's answer is its final channel (the template takes no channel tags in a
      // message, and drops past reasoning).
      messages.push_back({"assistant", server::ParseHarmony(*answer).content});
    } else {
      messages.push_back({"assistant", std::move(answer).value()});
    }
    ++turns;
    if (ctx.n_past() >= ctx.n_ctx()) {
      std::fprintf(stderr, "moetier: the context is full (%u positions); raise -c\n", ctx.n_ctx());
      break;
    }
  }
  std::fprintf(stderr,
               "moetier: %d turns; prompt tokens: %lld evaluated, %lld kept from earlier turns\n",
               turns, static_cast<long long>(evaluated), static_cast<long long>(reused));
  if (Status s = SaveRoutingStats(f.storage, ctx); !s.ok()) return ReportError(s);
  return kExitOk;
}

using Clock = std::chrono::steady_clock;

// What the flags give before a model is loaded.
struct RunInputs {
  std::vector<std::pair<int32_t, float>> logit_bias;
  std::string gbnf;    // the grammar's GBNF text; empty: none
  std::string prompt;  // -p, or the text of -f's file; empty only with -cnv
  ChatTemplateKwargs kwargs;
};

// Checks the flags that need no model and reads the files they name (-f, the grammar's).
Result<RunInputs> ReadInputs(const RunFlags& f) {
  MT_RETURN_IF_ERROR(CheckSampling(f.sampling));
  RunInputs in;
  in.logit_bias = MT_TRY(ParseLogitBias(f.logit_bias));
  in.gbnf = MT_TRY(LoadGrammar(f));
  if (f.n_batch == 0) return InvalidArgument("-b must be positive (got 0)");
  if (f.prompt_given && !f.prompt_file.empty()) {
    return InvalidArgument("give the prompt with one of -p or -f, not both");
  }
  if (!f.conversation && !f.prompt_given && f.prompt_file.empty()) {
    return InvalidArgument("give the prompt with -p or -f (or converse with -cnv)");
  }
  if (f.conversation && !in.gbnf.empty()) {
    return InvalidArgument("-cnv does not take a grammar or a JSON schema");
  }
  if (f.conversation && !f.dump_logits.empty()) {
    return InvalidArgument("-cnv does not take --dump-logits");
  }
  in.prompt = f.prompt;
  if (!f.prompt_file.empty()) {
    in.prompt = MT_TRY(ReadWholeFile(f.prompt_file));
  }
  if (in.prompt.empty() && !f.conversation) return InvalidArgument("the prompt is empty");
  if (!f.chat_template_kwargs.empty()) {
    Result<ChatTemplateKwargs> k = ParseChatTemplateKwargs(f.chat_template_kwargs);
    if (!k.ok()) return k.status().WithContext("--chat-template-kwargs");
    in.kwargs = k.value();
  }
  return in;
}

// --logit-bias's token ids against the model's vocabulary.
Status CheckLogitBias(const std::vector<std::pair<int32_t, float>>& logit_bias, uint32_t n_vocab) {
  for (const auto& [id, bias] : logit_bias) {
    if (static_cast<uint32_t>(id) >= n_vocab) {
      return InvalidArgument("--logit-bias: token id {} is outside the vocabulary (0..{})", id,
                             n_vocab - 1);
    }
  }
  return Status::Ok();
}

// The context of -c (default 4096, at most the model's training context), -b, the threads,
// the KV cache types and the storage flags.
Result<std::unique_ptr<Context>> CreateContext(const RunFlags& f, const Model& m) {
  ContextOptions copt;
  copt.n_ctx = f.n_ctx != 0 ? f.n_ctx : std::min<uint32_t>(4096, m.hparams().n_ctx_train);
  copt.n_batch = f.n_batch;
  copt.n_threads = f.n_threads;
  copt.pin_threads = f.pin_threads;
  copt.kv_types = MT_TRY(ResolveKvTypes(f.kv_type));
  MT_RETURN_IF_ERROR(ResolveStorageFlags(f.storage, &copt));
  Result<std::unique_ptr<Context>> ctx = Context::Create(m, copt);
  if (!ctx.ok()) return ctx.status().WithContext(f.model);
  return ctx;
}

// The sampling flags with the logit biases, seeded by -s or else by the clock.
SamplerParams SamplingOf(const RunFlags& f,
                         const std::vector<std::pair<int32_t, float>>& logit_bias) {
  SamplerParams sp = f.sampling;
  sp.logit_bias = logit_bias;
  sp.seed = f.seed >= 0 ? static_cast<uint64_t>(f.seed)
                        : static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  return sp;
}

// --chat-template's built-in template, else the model's own (from its Jinja text or its
// architecture).
Result<ChatTemplate> LoadChatTemplate(const RunFlags& f, const Model& m) {
  const Tokenizer& tok = *m.tokenizer();
  const std::string* jinja = m.gguf().metadata().FindString("tokenizer.chat_template");
  std::optional<int32_t> eos = tok.eos_id();
  std::string eos_text = eos ? std::string(tok.token_text(*eos)) : "";
  if (f.chat_template.empty()) {
    return ChatTemplate::ForModel(jinja ? *jinja : "", m.hparams().arch, eos_text);
  }
  ChatTemplate::Kind kind = MT_TRY(ChatTemplate::ByName(f.chat_template));
  return ChatTemplate(kind, eos_text, "--chat-template");
}

// The prompt as the model reads it.
struct PromptText {
  std::string text;
  bool add_bos = false;
  ChatPrompt chat;  // with --chat: whether the answer may start with reasoning
};

// --chat: the system prompt and the prompt as a user turn, rendered by `tmpl`.
Result<PromptText> RenderChatPrompt(const RunFlags& f, const ChatTemplate& tmpl,
                                    const std::string& prompt, const ChatTemplateKwargs& kwargs) {
  std::vector<ChatMessage> messages;
  if (!f.system_prompt.empty()) messages.push_back({"system", f.system_prompt});
  messages.push_back({"user", prompt});
  ChatPrompt rendered = MT_TRY(tmpl.Render(messages, true, nullptr, kwargs));
  return PromptText{rendered.text, rendered.add_bos, rendered};
}

// The prompt's tokens; an error when there are none or they leave no room in the context.
Result<std::vector<int32_t>> EncodePrompt(const Tokenizer& tok, const PromptText& p,
                                          uint32_t n_ctx) {
  std::vector<int32_t> tokens = MT_TRY(tok.Encode(p.text, p.add_bos, /*parse_special=*/true));
  if (tokens.empty()) return InvalidArgument("the prompt has no tokens");
  if (tokens.size() >= n_ctx) {
    return InvalidArgument("the prompt has {} tokens, more than the context of {} (raise -c)",
                           tokens.size(), n_ctx);
  }
  return tokens;
}

// --dump-logits (`path`, nothing when empty): writes the logits of every prompt token
// (n_tokens rows of n_vocab) to the .npy file, then keeps only the last row in *logits.
Status DumpLogits(const std::string& path, size_t n_tokens, size_t n_vocab,
                  std::vector<float>* logits) {
  if (path.empty()) return Status::Ok();
  MT_RETURN_IF_ERROR(WriteNpy(path, *logits, n_tokens, n_vocab));
  logits->erase(logits->begin(), logits->end() - static_cast<std::ptrdiff_t>(n_vocab));
  return Status::Ok();
}

// The filter of the grammar `gbnf` (nothing when it is empty) for an answer after `chat`. A
// JSON schema is for the answer (a thinking model's reasoning stays free); a GBNF grammar
// describes the whole output.
Status StartGrammar(const RunFlags& f, const std::string& gbnf, const ChatPrompt& chat,
                    const Tokenizer& tok, std::optional<grammar::GrammarFilter>* filter) {
  if (gbnf.empty()) return Status::Ok();
  const bool schema = !f.json_schema.empty() || !f.json_schema_file.empty();
  grammar::StartedGrammar g = MT_TRY(grammar::AnswerGrammar(gbnf, schema ? chat : ChatPrompt()));
  filter->emplace(g.grammar, std::make_shared<const grammar::GrammarVocab>(tok), g.start);
  return Status::Ok();
}

// The closing line on stderr (the speeds), the tier statistics and --routing-stats.
Status ReportRun(const RunFlags& f, Context& ctx, size_t n_prompt, int n_generated, double prompt_s,
                 double gen_s) {
  std::fprintf(stderr,
               "moetier: prompt %zu tokens in %.2f s (%.1f tok/s), generation %d tokens in %.2f s "
               "(%.1f tok/s)\n",
               n_prompt, prompt_s, n_prompt / std::max(prompt_s, 1e-9), n_generated, gen_s,
               n_generated / std::max(gen_s, 1e-9));
  MT_RETURN_IF_ERROR(ReportTierStats(f.storage, ctx, prompt_s + gen_s, n_prompt + n_generated));
  return SaveRoutingStats(f.storage, ctx);
}

// One prompt, then the generated text after it: the prompt evaluated (timed), echoed unless
// --no-display-prompt, then sampled from until GenerateAndPrint stops.
int Complete(const RunFlags& f, Context& ctx, Sampler& sampler, const RunInputs& in,
             const PromptText& p) {
  const Tokenizer& tok = *ctx.model().tokenizer();
  Result<std::vector<int32_t>> tokens = EncodePrompt(tok, p, ctx.n_ctx());
  if (!tokens.ok()) return ReportError(tokens.status());
  std::vector<float> logits;
  const auto t0 = Clock::now();
  const LogitsFor which = f.dump_logits.empty() ? LogitsFor::kLast : LogitsFor::kAll;
  if (Status s = ctx.Eval(*tokens, which, &logits); !s.ok()) return ReportError(s);
  const auto t1 = Clock::now();
  if (Status s = DumpLogits(f.dump_logits, tokens->size(), ctx.n_vocab(), &logits); !s.ok()) {
    return ReportError(s);
  }
  if (!f.no_display_prompt) Print(in.prompt);
  std::optional<grammar::GrammarFilter> filter;
  if (Status s = StartGrammar(f, in.gbnf, p.chat, tok, &filter); !s.ok()) return ReportError(s);
  int n_generated = 0;
  std::vector<int32_t> history = *tokens;
  Result<std::string> generated = GenerateAndPrint(
      ctx, tok, f, sampler, filter ? &*filter : nullptr, logits, history, &n_generated);
  if (!generated.ok()) return ReportError(generated.status());
  Print("\n");
  const auto t2 = Clock::now();
  const double prompt_s = std::chrono::duration<double>(t1 - t0).count();
  const double gen_s = std::chrono::duration<double>(t2 - t1).count();
  if (Status s = ReportRun(f, ctx, tokens->size(), n_generated, prompt_s, gen_s); !s.ok()) {
    return ReportError(s);
  }
  return kExitOk;
}

int Run(const RunFlags& f) {
  Result<RunInputs> in = ReadInputs(f);
  if (!in.ok()) return ReportError(in.status());
  Result<KvTypes> kv_types = ResolveKvTypes(f.kv_type);
  if (!kv_types.ok()) return ReportError(kv_types.status());
  Result<LoadOptions> load = LoadOptionsOf(f.storage, *kv_types);
  if (!load.ok()) return ReportError(load.status());
  Result<std::unique_ptr<Model>> model = Model::Load(f.model, *load);
  if (!model.ok()) return ReportError(model.status());
  const Model& m = *model.value();
  const Tokenizer& tok = *m.tokenizer();
  if (Status s = CheckLogitBias(in->logit_bias, m.hparams().n_vocab); !s.ok()) {
    return ReportError(s);
  }
  Result<std::unique_ptr<Context>> ctx = CreateContext(f, m);
  if (!ctx.ok()) return ReportError(ctx.status());
  PrintStoragePlan(**ctx);
  Sampler sampler(SamplingOf(f, in->logit_bias));
  if (!f.chat && !f.conversation) {
    return Complete(f, **ctx, sampler, *in, PromptText{in->prompt, tok.add_bos(), ChatPrompt()});
  }
  Result<ChatTemplate> tmpl = LoadChatTemplate(f, m);
  if (!tmpl.ok()) return ReportError(tmpl.status());
  if (f.conversation) {
    std::fprintf(stderr, "moetier: chat template %s (from %s)\n", std::string(tmpl->name()).c_str(),
                 tmpl->origin().c_str());
    return Converse(f, **ctx, tok, *tmpl, in->kwargs, sampler, in->prompt);
  }
  Result<PromptText> chat_prompt = RenderChatPrompt(f, *tmpl, in->prompt, in->kwargs);
  if (!chat_prompt.ok()) return ReportError(chat_prompt.status());
  std::fprintf(stderr, "moetier: chat template %s (from %s)\n", std::string(tmpl->name()).c_str(),
               tmpl->origin().c_str());
  return Complete(f, **ctx, sampler, *in, *chat_prompt);
}

}  // namespace

CommandMain SetupRun(CLI::App& sub) {
  auto f = std::make_shared<RunFlags>();
  sub.add_option("-m,--model", f->model, "GGUF model (or the first shard of a split set)")
      ->required();
  CLI::Option* prompt = sub.add_option("-p,--prompt", f->prompt, "Prompt text");
  sub.add_option("-f,--file", f->prompt_file, "Read the prompt from a file");
  sub.add_option("-n,--n-predict", f->n_predict, "Tokens to generate (-1: until end of text)")
      ->default_str("-1");
  sub.add_option("-c,--ctx-size", f->n_ctx, "Context size (default 4096, at most the model's)");
  sub.add_option("-b,--batch-size", f->n_batch, "Prompt tokens per forward pass")
      ->default_str("512");
  AddThreadFlags(sub, f->n_threads, f->pin_threads);
  sub.add_option("--temp", f->sampling.temperature, "Temperature (0: greedy)")->default_str("0.8");
  sub.add_option("--top-k", f->sampling.top_k, "Top-k (0: off)")->default_str("40");
  sub.add_option("--top-p", f->sampling.top_p, "Top-p (1: off)")->default_str("0.95");
  sub.add_option("--min-p", f->sampling.min_p, "Min-p (0: off)")->default_str("0.05");
  sub.add_option("--repeat-penalty", f->sampling.repeat_penalty, "Repetition penalty (1: off)")
      ->default_str("1.0");
  sub.add_option("--presence-penalty", f->sampling.presence_penalty,
                 "Subtracted from the logit of every token in the last n (0: off)")
      ->default_str("0.0");
  sub.add_option("--frequency-penalty", f->sampling.frequency_penalty,
                 "Times its count in the last n, subtracted from a token's logit (0: off)")
      ->default_str("0.0");
  sub.add_option("--repeat-last-n", f->sampling.repeat_last_n, "Tokens the penalties look at")
      ->default_str("64");
  sub.add_option("-l,--logit-bias", f->logit_bias,
                 "TOKEN_ID+BIAS or TOKEN_ID-BIAS added to a token's logit (-inf: never it); "
                 "repeatable");
  sub.add_option("-s,--seed", f->seed, "Sampling seed (-1: random)")->default_str("-1");
  sub.add_flag("--chat", f->chat, "Apply the model's chat template to the prompt");
  sub.add_flag("--conversation", f->conversation,  // also -cnv, as llama-cli (main.cc)
               "Converse: a user turn per line of stdin (until its end or /exit), answers "
               "with the chat template; -p or -f, if given, is the first turn");
  sub.add_option("--chat-template", f->chat_template,
                 "Built-in template to use with --chat: chatml, tulu, llama2, deepseek3, harmony "
                 "(gpt-oss), glm4.5");
  sub.add_option("--system-prompt", f->system_prompt, "System message for --chat");
  sub.add_option("--chat-template-kwargs", f->chat_template_kwargs,
                 "Chat template variables for --chat as JSON, e.g. "
                 "'{\"enable_thinking\": false}' (a Qwen3 model answers without thinking)");
  sub.add_option("-r,--reverse-prompt,--stop", f->stops, "Stop when this text is generated");
  sub.add_flag("--ignore-eos", f->ignore_eos, "Keep generating after end-of-text tokens");
  sub.add_option("--grammar", f->grammar, "GBNF grammar the output must follow");
  sub.add_option("--grammar-file", f->grammar_file, "Read the GBNF grammar from a file");
  sub.add_option("-j,--json-schema", f->json_schema,
                 "JSON schema the output must satisfy (e.g. '{}' for any JSON value)");
  sub.add_option("--json-schema-file", f->json_schema_file, "Read the JSON schema from a file");
  sub.add_flag("--no-display-prompt", f->no_display_prompt, "Do not echo the prompt");
  AddKvTypeFlags(sub, f->kv_type);
  sub.add_option("--dump-logits", f->dump_logits,
                 "Write the logits of every prompt token to a float32 .npy file");
  AddStorageFlags(sub, &f->storage);
  return [f, prompt]() {
    f->prompt_given = prompt->count() > 0;
    return Run(*f);
  };
}

}  // namespace mt::cli
