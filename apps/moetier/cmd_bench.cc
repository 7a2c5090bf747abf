// moetier bench -m MODEL [-p 128] [-n 32] [-d 0] [-r 3] [-t N] [--seqs 1,8] [--json]
// Prints a llama-bench style markdown table (test pp<N> / tg<N>, t/s as mean ± sd) and the
// roofline measured in the same run.
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/cpu_features.h"
#include "base/file_io.h"
#include "base/memory_info.h"
#include "base/read_bandwidth.h"
#include "base/units.h"
#include "command.h"
#include "engine/bench.h"
#include "engine/context.h"
#include "engine/model.h"
#include "io/read_trace.h"
#include "kernels/isa.h"
#include "storage_flags.h"

namespace mt::cli {
namespace {

struct BenchFlags {
  std::string model;
  int n_prompt = 128;
  int n_gen = 32;
  int n_depth = 0;
  int reps = 3;
  int n_threads = 0;
  bool pin_threads = false;
  KvTypeFlags kv_type;
  std::string seqs = "1";
  bool json = false;
  uint64_t seed = 1;
  StorageFlags storage;
  std::string read_trace;  // stream mode: where to write the timed decode's expert reads
};

// llama.cpp's names for the file types synth writes (general.file_type).
std::string FileTypeLabel(uint64_t ftype) {
  switch (ftype) {
    case 0:
      return "all F32";
    case 1:
      return "F16";
    case 2:
      return "Q4_0";
    case 7:
      return "Q8_0";
    case 15:
      return "Q4_K - Medium";
    case 18:
      return "Q6_K";
    case 32:
      return "BF16";
    case 38:
      return "MXFP4 MoE";
    default:
      return fmt::format("ftype {}", ftype);
  }
}

int Run(const BenchFlags& f) {
  std::vector<int> seqs;
  {
    std::stringstream ss(f.seqs);
    std::string item;
    while (std::getline(ss, item, ',')) {
      try {
        int v = std::stoi(item);
        if (v < 1 || v > 256) throw std::out_of_range(item);
        seqs.push_back(v);
      } catch (const std::exception&) {
        return ReportError(InvalidArgument("--seqs: '{}' is not a list of counts 1..256", f.seqs));
      }
    }
  }
  if (f.reps < 1 || f.n_prompt < 0 || f.n_gen < 0 || f.n_depth < 0) {
    return ReportError(InvalidArgument("-r must be >= 1, -p, -n and -d >= 0"));
  }
  Result<KvTypes> kv_types = ResolveKvTypes(f.kv_type);
  if (!kv_types.ok()) return ReportError(kv_types.status());
  Result<std::unique_ptr<Model>> model = Model::Load(f.model, LoadOptions{});
  if (!model.ok()) return ReportError(model.status());
  const Model& m = *model.value();
  ContextOptions o;
  o.kv_types = kv_types.value();
  const int64_t positions = int64_t{f.n_depth} + std::max({f.n_prompt, f.n_gen, 1});
  if (positions > m.hparams().n_ctx_train) {
    return ReportError(InvalidArgument(
        "-d {} with -p {} / -n {} needs {} positions; the model's training context has {}",
        f.n_depth, f.n_prompt, f.n_gen, positions, m.hparams().n_ctx_train));
  }
  o.n_ctx = static_cast<uint32_t>(positions);
  o.n_seq_max = static_cast<uint32_t>(*std::max_element(seqs.begin(), seqs.end()));
  // A batched decode step is one forward pass of n_seq tokens, so the batch must hold them;
  // the -d fill runs in batches of up to 512 (one token at a time would take minutes).
  o.n_batch = std::max({static_cast<uint32_t>(std::max(f.n_prompt, 1)), o.n_seq_max,
                        static_cast<uint32_t>(std::min(f.n_depth, 512))});
  o.n_threads = f.n_threads;
  o.pin_threads = f.pin_threads;
  if (Status s = ResolveStorageFlags(f.storage, &o); !s.ok()) return ReportError(s);
  // --read-trace: the stream tier's engine wrapped in one that records the reads.
  TracingEngine* tracer = nullptr;  // owned by the stream tier, which outlives its use here
  if (!f.read_trace.empty()) {
    o.storage.make_io = [&tracer, io = o.storage.io,
                         depth = o.storage.io_queue_depth]() -> Result<std::unique_ptr<IoEngine>> {
      Result<std::unique_ptr<IoEngine>> inner = CreateIoEngine(io, depth);
      if (!inner.ok()) return inner.status();
      auto traced = std::make_unique<TracingEngine>(std::move(inner).value());
      tracer = traced.get();
      return std::unique_ptr<IoEngine>(std::move(traced));
    };
  }
  Result<std::unique_ptr<Context>> ctx = Context::Create(m, o);
  if (!ctx.ok()) return ReportError(ctx.status().WithContext(f.model));
  if (!f.read_trace.empty() && tracer == nullptr) {
    return ReportError(
        InvalidArgument("--read-trace needs the experts streamed (--moe-storage "
                        "stream); here they are {}",
                        (*ctx)->expert_store().name()));
  }
  if (!f.read_trace.empty() && f.n_gen == 0) {
    return ReportError(InvalidArgument("--read-trace records the reads of the tg test; -n is 0"));
  }
  if (!f.json) PrintStoragePlan(**ctx);
  {
    // Time steady-state decode: on a VM whose host backs fresh memory lazily, populating a
    // few GiB of expert cache takes seconds of a core, which a short run would measure.
    const auto t0 = std::chrono::steady_clock::now();
    (*ctx)->expert_store().WaitForMemory();
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (waited >= 0.1) {
      std::fprintf(stderr, "moetier: waited %.1f s for the expert cache's memory\n", waited);
    }
  }

  std::vector<BenchSample> samples;
  if (f.n_prompt > 0) {
    Result<BenchSample> s = BenchPrefill(**ctx, f.n_prompt, f.n_depth, f.reps, f.seed);
    if (!s.ok()) return ReportError(s.status());
    samples.push_back(s.value());
  }
  if (f.n_gen > 0) {
    for (size_t i = 0; i < seqs.size(); ++i) {
      const int n_seq = seqs[i];
      // The tier statistics and the bytes read cover the measured repetitions of the first
      // decode test in --seqs (not its cold warm-up), as its tok/s does.
      uint64_t read0 = 0;
      auto t0 = std::chrono::steady_clock::now();
      auto restart_counters = [&] {
        (*ctx)->expert_store().ResetStats();
        if (tracer != nullptr && i == 0) tracer->SetRecording(true);
        read0 = ProcessStorageReadBytes();
        t0 = std::chrono::steady_clock::now();
      };
      Result<BenchSample> s =
          BenchDecode(**ctx, f.n_gen, n_seq, f.n_depth, f.reps, f.seed, restart_counters);
      if (!s.ok()) return ReportError(s.status());
      if (tracer != nullptr && i == 0) {
        tracer->SetRecording(false);
        Result<std::string> text = FormatReadTrace(tracer->trace());
        if (!text.ok()) return ReportError(text.status());
        if (Status st = WriteFileAtomically(f.read_trace, *text); !st.ok()) return ReportError(st);
      }
      samples.push_back(s.value());
      samples.back().storage_read_bytes = ProcessStorageReadBytes() - read0;
      if (i == 0) {
        const double secs =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const uint64_t tokens = uint64_t(f.n_gen) * f.reps * n_seq;
        if (Status st = ReportTierStats(f.storage, **ctx, secs, tokens); !st.ok()) {
          return ReportError(st);
        }
      }
    }
  }
  // The bandwidth probe runs after the context is gone, in at most a quarter of the budget,
  // so it never pushes a memory-limited run over its limit.
  const std::string tier = (*ctx)->expert_store().name();
  const uint64_t probe_bytes =
      std::min<uint64_t>(uint64_t{1} << 30, (*ctx)->storage_plan().budget / 4);
  ctx.value().reset();
  ThreadPool pool(f.n_threads, f.pin_threads);
  const double membw = MeasureReadBandwidth(pool, probe_bytes, 5);
  const TokenCost cost = TokenCostOf(m, o.kv_types);

  uint64_t n_params = 0;
  for (const GgufTensor& t : m.gguf().tensors()) n_params += t.n_elements;
  const std::string label =
      fmt::format("{} {}", m.hparams().arch,
                  FileTypeLabel(m.gguf().metadata().FindUint("general.file_type").value_or(999)));
  const int threads = pool.size();

  if (f.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const BenchSample& s : samples) {
      j.push_back({{"model", label},
                   {"model_bytes", m.gguf().total_file_bytes()},
                   {"params", n_params},
                   {"threads", threads},
                   {"test", s.test},
                   {"n_prompt", s.n_prompt},
                   {"n_gen", s.n_gen},
                   {"n_depth", s.n_depth},
                   {"n_seq", s.n_seq},
                   {"tps", s.tps},
                   {"avg_ts", s.mean},
                   {"stddev_ts", s.sd},
                   {"weight_bytes_per_token", cost.bytes},
                   {"type_k", KvTypeName(o.kv_types.k)},
                   {"type_v", KvTypeName(o.kv_types.v)},
                   {"kv_bytes_per_position", cost.kv_bytes_per_position},
                   {"state_bytes_per_token", cost.state_bytes},
                   {"mem_read_gbps", membw},
                   {"isa", IsaName(ActiveIsa())},
                   {"storage_read_bytes", s.storage_read_bytes},
                   {"tokens_decoded", uint64_t(s.n_gen) * s.n_seq * f.reps},
                   {"expert_tier", tier}});
    }
    fmt::print("{}\n", j.dump(2));
    return kExitOk;
  }
  size_t test_width = 8;  // as wide as the longest name ("tg32-b8 @ d4096")
  for (const BenchSample& s : samples) test_width = std::max(test_width, s.test.size());
  fmt::print("| {:<30} | {:>10} | {:>10} | {:<7} | {:>7} | {:>{}} | {:>16} |\n", "model", "size",
             "params", "backend", "threads", "test", test_width, "t/s");
  fmt::print("| {:-<30} | {:->10}: | {:->9}: | {:-<7} | {:->6}: | {:->{}}: | {:->15}: |\n", "", "",
             "", "", "", "", test_width - 1, "");
  for (const BenchSample& s : samples) {
    fmt::print("| {:<30} | {:>10} | {:>8.2f} B | {:<7} | {:>7} | {:>{}} | {:>16} |\n", label,
               HumanBytes(m.gguf().total_file_bytes()), n_params / 1e9, "CPU", threads, s.test,
               test_width, fmt::format("{:.2f} ± {:.2f}", s.mean, s.sd));
  }
  fmt::print("\n");
  for (const BenchSample& s : samples) {
    if (s.n_gen > 0 && s.n_seq == 1) {
      // Generated token i attends to n_depth + i + 1 positions: n_depth + (n_gen + 1) / 2 on
      // average.
      const auto kv =
          static_cast<uint64_t>(cost.kv_bytes_per_position * (s.n_depth + (s.n_gen + 1) / 2.0));
      const double gbps = double(cost.bytes + kv + cost.state_bytes) * s.mean / 1e9;
      const std::string state = cost.state_bytes == 0 ? ""
                                                      : fmt::format(" and {} of recurrent state",
                                                                    HumanBytes(cost.state_bytes));
      fmt::print(
          "roofline: {} reads {} of weights and {} of KV cache ({}){} per token; achieved "
          "{:.1f} GB/s; memory read bandwidth measured now {:.1f} GB/s ({} threads); "
          "ratio {:.0f} %\n",
          s.test, HumanBytes(cost.bytes), HumanBytes(kv), KvTypesName(o.kv_types), state, gbps,
          membw, threads, 100 * gbps / membw);
    }
    if (s.n_prompt > 0) {
      const double ops = 2.0 * (double(cost.macs_per_token) * s.n_prompt + cost.macs_head);
      fmt::print(
          "prefill: {} achieves {:.0f} GOP/s ({:.2f} G multiply-adds per token; int8 for "
          "quantized weights)\n",
          s.test, ops * s.mean / s.n_prompt / 1e9, cost.macs_per_token / 1e9);
    }
  }
  fmt::print("kernels: {} ({}), experts: {}\n", IsaName(ActiveIsa()), GetCpuFeatures().ToString(),
             tier);
  return kExitOk;
}

}  // namespace

CommandMain SetupBench(CLI::App& sub) {
  auto f = std::make_shared<BenchFlags>();
  sub.add_option("-m,--model", f->model, "GGUF model")->required();
  sub.add_option("-p,--n-prompt", f->n_prompt, "Prompt tokens for the pp test (0: skip)")
      ->default_str("128");
  sub.add_option("-n,--n-gen", f->n_gen, "Generated tokens for the tg test (0: skip)")
      ->default_str("32");
  sub.add_option("-d,--n-depth", f->n_depth,
                 "Positions already in the KV cache when each test runs (filled first, not "
                 "timed), as llama-bench's -d")
      ->default_str("0");
  sub.add_option("-r,--repetitions", f->reps, "Repetitions of each test")->default_str("3");
  AddThreadFlags(sub, f->n_threads, f->pin_threads);
  AddKvTypeFlags(sub, f->kv_type);
  sub.add_option("--seqs", f->seqs, "Sequences decoded together in the tg tests, e.g. 1,8")
      ->default_str("1");
  sub.add_flag("--json", f->json, "Print JSON");
  AddStorageFlags(sub, &f->storage);
  sub.add_option("--read-trace", f->read_trace,
                 "stream: write the expert reads of the first tg test's timed repetitions to "
                 "this file, for io_bench --replay");
  return [f]() { return Run(*f); };
}

}  // namespace mt::cli
