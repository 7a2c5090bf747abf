// moetier synth -o OUT.gguf --preset P [--type T] [--seed N] [--tokenizer tokenizer.json]
//               [--router-skew S] [--split-max-size SIZE] [--layers N] [--legacy-mla]
#include <unistd.h>

#include <algorithm>
#include <numeric>

#include "base/units.h"
#include "command.h"
#include "synth/file_type.h"
#include "synth/presets.h"
#include "synth/synth.h"

namespace mt::cli {
namespace {

struct SynthFlags {
  SynthOptions options;
  std::string split_max_size;
  bool quiet = false;
};

void PrintSynthResult(const SynthResult& r, const SynthOptions& o) {
  fmt::print("wrote {} ({} file{}, {})\n", r.paths.front(), r.paths.size(),
             r.paths.size() == 1 ? "" : "s", HumanBytes(r.bytes));
  fmt::print("  preset {}: {} layers{}, n_embd {}, {} experts top-{}, n_ff_exp {}, vocab {}\n",
             o.preset, r.hp.n_layer,
             r.hp.n_layer_dense_lead > 0
                 ? fmt::format(" ({} without experts)", r.hp.n_layer_dense_lead)
                 : std::string(),
             r.hp.n_embd, r.hp.n_expert, r.hp.n_expert_used, r.hp.n_ff_exp, r.hp.n_vocab);
  fmt::print("  type {}, seed {}, tokenizer: {}\n", o.file_type, o.seed, r.tokenizer_source);
  const RoutingReport& rt = r.routing;
  auto [min_used, max_used] = std::minmax_element(rt.experts_used.begin(), rt.experts_used.end());
  auto mean = [](const std::vector<double>& v) {
    return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / v.size();
  };
  fmt::print(
      "  routing (skew {}, router offset scale {:.3f}; {} sampled tokens, routers applied "
      "to the normalised embeddings):\n",
      o.router_skew, r.router_offset_scale, rt.n_tokens);
  fmt::print("    experts used per layer: {}..{} of {}\n", *min_used, *max_used, r.hp.n_expert);
  fmt::print("    share of the top 10% of experts: {:.1f}%  (top 20%: {:.1f}%)\n",
             100 * mean(rt.top10_share), 100 * mean(rt.top20_share));
  fmt::print("    reuse between consecutive tokens: {:.1f}%  (uniform random: {:.1f}%)\n",
             100 * mean(rt.reuse), 100.0 * r.hp.n_expert_used / r.hp.n_expert);
}

}  // namespace

CommandMain SetupSynth(CLI::App& sub) {
  auto flags = std::make_shared<SynthFlags>();
  SynthOptions& o = flags->options;
  sub.add_option("-o,--output", o.output_path, "Output file (.gguf)")->required();
  sub.add_option("--preset", o.preset, "Model shape: " + SynthPresetNames())->required();
  sub.add_option("--type", o.file_type, "File type: " + FileTypeNames())->default_str("q4_k_m");
  sub.add_option("--seed", o.seed, "Seed of the weights")->default_str("1");
  sub.add_option("--tokenizer", o.tokenizer_json,
                 "A Hugging Face tokenizer.json to embed (default: the preset's)");
  sub.add_option("--router-skew", o.router_skew,
                 "Routing skew: 0 uniform, 1 like trained MoE models (top 20% of experts take "
                 "about half of the activations)")
      ->default_str("0");
  sub.add_option("--layers", o.n_layers,
                 "Write only the first N layers (a slice of a large model)");
  sub.add_flag("--legacy-mla", o.legacy_mla,
               "deepseek2: the legacy layout with attn_kv_b instead of attn_k_b/attn_v_b");
  sub.add_option("--split-max-size", flags->split_max_size,
                 "Write a split set with shards of at most SIZE (e.g. 2G)");
  sub.add_option("-t,--threads", o.n_threads, "Threads (default: all cores)");
  sub.add_flag("-q,--quiet", flags->quiet, "No progress line");
  sub.add_flag("--dry-run", o.dry_run,
               "Print each tensor's type as the file type's mix chooses it; write nothing");
  return [flags]() {
    SynthOptions o = flags->options;
    if (!flags->split_max_size.empty()) {
      Result<uint64_t> size = ParseBytes(flags->split_max_size);
      if (!size.ok()) return ReportError(size.status().WithContext("--split-max-size"));
      o.split_max_bytes = size.value();
    }
    o.show_progress = !flags->quiet && isatty(STDERR_FILENO);
    Result<SynthResult> r = Synthesize(o);
    if (!r.ok()) return ReportError(r.status());
    if (o.dry_run) {
      for (const auto& [name, type] : r->tensor_types) fmt::print("{} {}\n", name, TypeName(type));
      return kExitOk;
    }
    PrintSynthResult(r.value(), o);
    return kExitOk;
  };
}

}  // namespace mt::cli
