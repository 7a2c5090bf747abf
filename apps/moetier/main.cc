// The moetier command line: `moetier <command> [flags]`. Commands are listed in kCommands.
#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>

#include "command.h"
#include "engine/context.h"

namespace mt::cli {

int ReportError(const Status& status) {
  std::string line = status.message();
  for (char& c : line) {
    if (c == '\n') c = ' ';
  }
  std::fprintf(stderr, "moetier: error: %s\n", line.c_str());
  return status.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitError;
}

void AddThreadFlags(CLI::App& sub, int& n_threads, bool& pin_threads) {
  sub.add_option("-t,--threads", n_threads,
                 "Threads (default and most: the CPUs this process may use, after taskset "
                 "and a cgroup CPU quota)");
  sub.add_flag("--pin", pin_threads,
               "Pin thread i to the i-th CPU this process may use (taskset/cpuset respected)");
}

void AddKvTypeFlags(CLI::App& sub, KvTypeFlags& flags) {
  sub.add_option("--kv-type", flags.both, "KV cache type of K and V: f16, f32 or q8_0")
      ->default_str("f16");
  // -ctk and -ctv are renamed to these by main (CLI11 takes no multi-letter one-dash names).
  sub.add_option("--cache-type-k", flags.k, "llama.cpp's -ctk: K cache type (default --kv-type)");
  sub.add_option("--cache-type-v", flags.v, "llama.cpp's -ctv: V cache type (default --kv-type)");
}

Result<KvTypes> ResolveKvTypes(const KvTypeFlags& flags) {
  // As llama.cpp: -ctk and -ctv each set one side; the other keeps the default (f16, or
  // --kv-type's type).
  auto parse = [&](const std::string& one, const char* flag) -> Result<KvElemType> {
    const std::string& name = one.empty() ? flags.both : one;
    Result<KvElemType> type = ParseKvType(name.empty() ? "f16" : name);
    if (!type.ok() && !one.empty()) {
      return InvalidArgument("{} must be f16, f32 or q8_0, not '{}'", flag, one);
    }
    return type;
  };
  KvElemType k = MT_TRY(parse(flags.k, "-ctk"));
  KvElemType v = MT_TRY(parse(flags.v, "-ctv"));
  return KvTypes{k, v};
}

namespace {

constexpr CommandDef kCommands[] = {
    {"inspect", "Show a GGUF model: metadata, tensors, and the dense/expert memory plan",
     SetupInspect},
    {"synth", "Write a synthetic model in the exact GGUF layout of a real architecture",
     SetupSynth},
    {"run", "Generate text from a prompt", SetupRun},
    {"tokenize", "Show the tokens of a text", SetupTokenize},
    {"perplexity", "Perplexity and KL divergence, as llama-perplexity", SetupPerplexity},
    {"bench", "Prefill and decode speed, as llama-bench, with the memory roofline", SetupBench},
    {"profile", "Record which experts the router picks on a set of prompts", SetupProfile},
    {"serve", "OpenAI-compatible HTTP server with continuous batching", SetupServe},
    {"pack",
     "Rewrite a model as an expert-major pack (one aligned, checksummed record per "
     "expert), or --verify one",
     SetupPack},
    {"devices", "List the Vulkan devices (also: moetier --list-devices)", SetupDevices},
};

}  // namespace
}  // namespace mt::cli

int main(int argc, char** argv) {
  using namespace mt::cli;
  CLI::App app{"moetier: run Mixture-of-Experts GGUF models larger than memory", "moetier"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "moetier 0.1.0");
  CommandMain selected;
  std::string names;
  for (const CommandDef& def : kCommands)
    names += (names.empty() ? "" : ", ") + std::string(def.name);
  // llama.cpp's `--list-devices` is the `devices` command here.
  if (argc >= 2 && std::string_view(argv[1]) == "--list-devices")
    argv[1] = const_cast<char*>("devices");
  if (argc == 1) {
    std::fprintf(stderr, "moetier: usage error: a command is required (%s; see moetier --help)\n",
                 names.c_str());
    return kExitUsage;
  }
  if (argv[1][0] != '-' &&
      !std::any_of(std::begin(kCommands), std::end(kCommands),
                   [&](const CommandDef& d) { return std::string_view(argv[1]) == d.name; })) {
    std::fprintf(stderr, "moetier: usage error: unknown command '%s' (commands: %s)\n", argv[1],
                 names.c_str());
    return kExitUsage;
  }
  for (const CommandDef& def : kCommands) {
    CLI::App* sub = app.add_subcommand(def.name, def.description);
    CommandMain run = def.setup(*sub);
    sub->callback([&selected, run] { selected = run; });
  }
  // llama.cpp spells a few options with one dash and several letters, which CLI11 reads as
  // bundled one-letter flags: give them their long names first.
  static constexpr std::pair<std::string_view, const char*> kLlamaSpellings[] = {
      {"-cnv", "--conversation"}, {"-ctk", "--cache-type-k"}, {"-ctv", "--cache-type-v"}};
  for (int i = 1; i < argc; ++i) {
    for (const auto& [spelling, name] : kLlamaSpellings) {
      if (argv[i] == spelling) argv[i] = const_cast<char*>(name);
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    std::fprintf(stderr, "moetier: usage error: %s (see moetier --help)\n", what.c_str());
    return kExitUsage;
  }
  return selected ? selected() : kExitUsage;
}
