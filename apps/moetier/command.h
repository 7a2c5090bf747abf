// The moetier CLI is a table of subcommands (main.cc). Each lives in cmd_<name>.cc and
// exposes a Setup function: it adds its flags to `sub` and returns the function that runs
// the command once the flags are parsed. Exit codes: 0 ok, 1 error, 2 usage error.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "base/status.h"
#include "kernels/attention.h"

namespace mt::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;

using CommandMain = std::function<int()>;
using CommandSetup = CommandMain (*)(CLI::App& sub);

struct CommandDef {
  const char* name;
  const char* description;
  CommandSetup setup;
};

// Prints "moetier: error: <message>" as one line on stderr and returns the exit code for
// the status: 2 for invalid arguments, 1 otherwise.
int ReportError(const Status& status);

// -t/--threads and --pin, the same for every command that computes.
void AddThreadFlags(CLI::App& sub, int& n_threads, bool& pin_threads);

// The KV cache types: --kv-type for K and V, and llama.cpp's -ctk/--cache-type-k and
// -ctv/--cache-type-v, each for its side alone (the other keeps --kv-type's, default f16).
struct KvTypeFlags {
  std::string both;
  std::string k;
  std::string v;
};
void AddKvTypeFlags(CLI::App& sub, KvTypeFlags& flags);
// f16 for what was not given; an InvalidArgument naming the flag for a bad name.
Result<KvTypes> ResolveKvTypes(const KvTypeFlags& flags);

CommandMain SetupInspect(CLI::App& sub);
CommandMain SetupSynth(CLI::App& sub);
CommandMain SetupRun(CLI::App& sub);
CommandMain SetupTokenize(CLI::App& sub);
CommandMain SetupPerplexity(CLI::App& sub);
CommandMain SetupBench(CLI::App& sub);
CommandMain SetupProfile(CLI::App& sub);
CommandMain SetupServe(CLI::App& sub);
CommandMain SetupPack(CLI::App& sub);
CommandMain SetupDevices(CLI::App& sub);

}  // namespace mt::cli
