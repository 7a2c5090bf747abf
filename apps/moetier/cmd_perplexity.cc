// moetier perplexity -m MODEL -f TEXT [-c CTX] [--chunks N] [-b BATCH] [-t THREADS]
//                    [--kl-divergence-base FILE] [--kl-divergence]
// llama-perplexity's perplexity and KL-divergence modes (flags, output and base files are
// llama.cpp's; see src/engine/perplexity.h). Results go to stdout, progress to stderr; an
// error is a single line on stderr.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "base/file_io.h"
#include "command.h"
#include "engine/context.h"
#include "engine/model.h"
#include "engine/perplexity.h"
#include "storage_flags.h"
#include "tokenizer/tokenizer.h"

namespace mt::cli {
namespace {

struct PerplexityFlags {
  std::string model;
  std::string text_file;
  int32_t n_ctx = 512;
  int32_t n_chunks = -1;
  int32_t n_batch = 2048;
  int n_threads = 0;
  bool pin_threads = false;
  KvTypeFlags kv_type;
  std::string kl_base;
  bool kl_divergence = false;
  StorageFlags storage;
};

Result<std::string> ReadText(const std::string& path) { return ReadWholeFile(path); }

PerplexityOutput StdOutput() {
  PerplexityOutput out;
  out.result = [](const std::string& s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  };
  out.info = [](const std::string& s) { std::fwrite(s.data(), 1, s.size(), stderr); };
  return out;
}

// The base file is written after the whole evaluation: refuse a destination that cannot be
// created before any of that work starts, with the same message the writer would give.
Status CheckCreatable(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  if (access(dir.c_str(), W_OK | X_OK) != 0) {
    return IoError("{}: cannot create the KL-divergence base file: {}", path, std::strerror(errno));
  }
  return Status::Ok();
}

// The token that replaces each chunk's first token, when the vocabulary adds BOS.
std::optional<int32_t> ChunkBos(const Tokenizer& tok) {
  return tok.add_bos() ? tok.bos_id() : std::nullopt;
}

Result<std::unique_ptr<Context>> MakeContext(const Model& model, const PerplexityFlags& f,
                                             int32_t n_ctx) {
  ContextOptions o;
  o.n_ctx = static_cast<uint32_t>(n_ctx);
  o.n_batch = static_cast<uint32_t>(std::min(f.n_batch, n_ctx));
  o.n_threads = f.n_threads;
  o.pin_threads = f.pin_threads;
  o.kv_types = MT_TRY(ResolveKvTypes(f.kv_type));
  MT_RETURN_IF_ERROR(ResolveStorageFlags(f.storage, &o));
  Result<std::unique_ptr<Context>> ctx = Context::Create(model, o);
  if (ctx.ok()) PrintStoragePlan(**ctx);
  return ctx;
}

int RunPerplexityMode(const Model& model, const Tokenizer& tok, const PerplexityFlags& f) {
  if (f.text_file.empty()) {
    return ReportError(InvalidArgument("perplexity needs the text to score: -f FILE"));
  }
  Result<std::string> text = ReadText(f.text_file);
  if (!text.ok()) return ReportError(text.status());
  Result<std::vector<int32_t>> tokens = tok.Encode(text.value(), tok.add_bos(), false);
  if (!tokens.ok()) return ReportError(tokens.status().WithContext(f.text_file));
  // Check the text before building the context, so the error names the file.
  Result<ChunkPlan> plan = PlanChunks(tokens->size(), f.n_ctx, f.n_chunks);
  if (!plan.ok()) return ReportError(plan.status().WithContext(f.text_file));

  if (!f.kl_base.empty()) {
    Status creatable = CheckCreatable(f.kl_base);
    if (!creatable.ok()) return ReportError(creatable);
  }
  Result<std::unique_ptr<Context>> ctx = MakeContext(model, f, f.n_ctx);
  if (!ctx.ok()) return ReportError(ctx.status());
  PerplexityOptions o;
  o.n_ctx = f.n_ctx;
  o.n_chunks = f.n_chunks;
  o.n_batch = f.n_batch;
  o.kl_base_out = f.kl_base;
  Result<PerplexityResult> r = RunPerplexity(**ctx, tokens.value(), ChunkBos(tok), o, StdOutput());
  if (!r.ok()) return ReportError(r.status());
  return kExitOk;
}

int RunKlDivergenceMode(const Model& model, const Tokenizer& tok, const PerplexityFlags& f) {
  if (f.kl_base.empty()) {
    return ReportError(InvalidArgument(
        "--kl-divergence needs the base model's log-probabilities: --kl-divergence-base FILE"));
  }
  Result<KlBaseReader> base = KlBaseReader::Open(f.kl_base);
  if (!base.ok()) return ReportError(base.status());
  Status fits = base->CheckCompatible(static_cast<int32_t>(model.hparams().n_vocab), f.n_ctx);
  if (!fits.ok()) return ReportError(fits);
  Result<std::unique_ptr<Context>> ctx = MakeContext(model, f, base->n_ctx());
  if (!ctx.ok()) return ReportError(ctx.status());
  Result<KldStats> r = RunKlDivergence(**ctx, *base, ChunkBos(tok), f.n_batch, StdOutput());
  if (!r.ok()) return ReportError(r.status());
  return kExitOk;
}

int Run(const PerplexityFlags& f) {
  if (f.n_ctx < 2) return ReportError(InvalidArgument("-c must be at least 2 (got {})", f.n_ctx));
  if (f.n_batch < 1) return ReportError(InvalidArgument("-b must be positive (got {})", f.n_batch));
  if (f.n_chunks == 0 || f.n_chunks < -1) {
    return ReportError(InvalidArgument("--chunks must be positive or -1 (got {})", f.n_chunks));
  }
  if (!f.kl_divergence && f.text_file.empty()) {
    return ReportError(InvalidArgument("perplexity needs the text to score: -f FILE"));
  }
  Result<KvTypes> kv_types = ResolveKvTypes(f.kv_type);
  if (!kv_types.ok()) return ReportError(kv_types.status());
  Result<LoadOptions> load = LoadOptionsOf(f.storage, *kv_types);
  if (!load.ok()) return ReportError(load.status());
  Result<std::unique_ptr<Model>> model = Model::Load(f.model, *load);
  if (!model.ok()) return ReportError(model.status());
  const Tokenizer* tok = (*model)->tokenizer();
  if (tok == nullptr) return ReportError(NotFound("{}: the model has no tokenizer", f.model));
  return f.kl_divergence ? RunKlDivergenceMode(**model, *tok, f)
                         : RunPerplexityMode(**model, *tok, f);
}

}  // namespace

CommandMain SetupPerplexity(CLI::App& sub) {
  auto flags = std::make_shared<PerplexityFlags>();
  PerplexityFlags& f = *flags;
  sub.add_option("-m,--model", f.model, "Model file (.gguf)")->required();
  sub.add_option("-f,--file", f.text_file, "Text to score (not needed with --kl-divergence)");
  sub.add_option("-c,--ctx-size", f.n_ctx, "Tokens per chunk")->default_str("512");
  sub.add_option("--chunks", f.n_chunks, "Score at most N chunks (-1: all)")->default_str("-1");
  sub.add_option("-b,--batch-size", f.n_batch, "Tokens per forward pass")->default_str("2048");
  AddThreadFlags(sub, f.n_threads, f.pin_threads);
  AddKvTypeFlags(sub, f.kv_type);
  sub.add_option("--kl-divergence-base,--save-all-logits", f.kl_base,
                 "Log-probabilities file: written while computing perplexity, or read with "
                 "--kl-divergence (llama.cpp's format)");
  sub.add_flag("--kl-divergence", f.kl_divergence,
               "Compute the KL divergence to the log-probabilities in --kl-divergence-base");
  AddStorageFlags(sub, &flags->storage);
  return [flags]() { return Run(*flags); };
}

}  // namespace mt::cli
