// moetier profile -m MODEL -f PROMPTS.txt -o stats.json [-n N] [-c CTX]
// Runs every prompt (one per line) and records how often the router picks each
// (layer, expert), for --placement and --routing-stats.
#include <algorithm>
#include <sstream>

#include "base/file_io.h"
#include "command.h"
#include "engine/context.h"
#include "engine/model.h"
#include "storage_flags.h"

namespace mt::cli {
namespace {

struct ProfileFlags {
  std::string model;
  std::string prompts;
  std::string output;
  int n_gen = 0;
  uint32_t n_ctx = 2048;
  int n_threads = 0;
  bool pin_threads = false;
  StorageFlags storage;
};

int Run(const ProfileFlags& f) {
  Result<std::string> text = ReadWholeFile(f.prompts);
  if (!text.ok()) return ReportError(text.status());
  std::vector<std::string> prompts;
  std::istringstream lines(text.value());
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) prompts.push_back(line);
  }
  if (prompts.empty()) {
    return ReportError(InvalidArgument("{}: no prompts (one per line)", f.prompts));
  }
  Result<std::unique_ptr<Model>> model = Model::Load(f.model, LoadOptions{});
  if (!model.ok()) return ReportError(model.status());
  const Model& m = *model.value();
  ContextOptions o;
  o.n_ctx = std::min(f.n_ctx, m.hparams().n_ctx_train);
  o.n_threads = f.n_threads;
  o.pin_threads = f.pin_threads;
  if (Status s = ResolveStorageFlags(f.storage, &o); !s.ok()) return ReportError(s);
  o.routing_stats_file.clear();  // a profile starts from zero
  Result<std::unique_ptr<Context>> ctx = Context::Create(m, o);
  if (!ctx.ok()) return ReportError(ctx.status().WithContext(f.model));
  if (f.n_gen < 0 || static_cast<uint32_t>(f.n_gen) >= (*ctx)->n_ctx()) {
    return ReportError(
        InvalidArgument("-n {} must be in [0, {}) (the context size)", f.n_gen, (*ctx)->n_ctx()));
  }
  if (m.tokenizer() == nullptr) {
    return ReportError(NotFound("{}: the model has no tokenizer", f.model));
  }
  const Tokenizer& tok = *m.tokenizer();
  std::vector<float> logits;
  for (const std::string& p : prompts) {
    Result<std::vector<int32_t>> ids = tok.Encode(p, tok.add_bos(), true);
    if (!ids.ok()) return ReportError(ids.status());
    std::vector<int32_t> t = ids.value();
    if (t.size() + f.n_gen > (*ctx)->n_ctx()) t.resize((*ctx)->n_ctx() - f.n_gen);
    if (t.empty()) continue;
    (*ctx)->ClearKv();
    if (Status s = (*ctx)->Eval(t, LogitsFor::kLast, &logits); !s.ok()) return ReportError(s);
    for (int i = 0; i < f.n_gen; ++i) {  // greedy continuation
      const int32_t next =
          static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      const int32_t one[1] = {next};
      if (Status s = (*ctx)->Eval(one, LogitsFor::kLast, &logits); !s.ok()) return ReportError(s);
    }
  }
  const RoutingStats& rs = (*ctx)->routing_stats();
  if (Status s = rs.Save(f.output); !s.ok()) return ReportError(s);
  // Summary: how concentrated the routing is.
  const HParams& hp = m.hparams();
  double top10 = 0;
  uint32_t moe_layers = 0;  // layers with experts (DeepSeek's leading dense ones have none)
  for (uint32_t l = 0; l < hp.n_layer; ++l) {
    if (!m.parts().layers[l].has_experts()) continue;
    ++moe_layers;
    std::vector<uint64_t> c(hp.n_expert);
    for (uint32_t e = 0; e < hp.n_expert; ++e) c[e] = rs.count(l, e);
    std::sort(c.begin(), c.end(), std::greater<>());
    uint64_t all = 0, top = 0;
    for (uint32_t e = 0; e < hp.n_expert; ++e) {
      all += c[e];
      if (e < std::max<uint32_t>(1, hp.n_expert / 10)) top += c[e];
    }
    top10 += all ? double(top) / all : 0;
  }
  fmt::print(
      "wrote {}: {} tokens from {} prompts; the top 10% of experts take {:.1f}% of the "
      "activations (mean over {} layers with experts)\n",
      f.output, rs.tokens(), prompts.size(), 100 * top10 / std::max(moe_layers, 1u), moe_layers);
  return kExitOk;
}

}  // namespace

CommandMain SetupProfile(CLI::App& sub) {
  auto f = std::make_shared<ProfileFlags>();
  sub.add_option("-m,--model", f->model, "GGUF model")->required();
  sub.add_option("-f,--file", f->prompts, "Prompts, one per line")->required();
  sub.add_option("-o,--output", f->output, "Routing statistics (JSON)")->required();
  sub.add_option("-n,--n-predict", f->n_gen, "Greedy tokens to generate after each prompt")
      ->default_str("0");
  sub.add_option("-c,--ctx-size", f->n_ctx, "Context size")->default_str("2048");
  AddThreadFlags(sub, f->n_threads, f->pin_threads);
  AddStorageFlags(sub, &f->storage);
  return [f]() { return Run(*f); };
}

}  // namespace mt::cli
