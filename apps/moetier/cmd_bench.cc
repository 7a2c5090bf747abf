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

// --seqs: a comma-separated list of counts 1..256.
Result<std::vector<int>> ParseSeqs(const std::string& text) {
  std::vector<int> seqs;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      int v = std::stoi(item);
      if (v < 1 || v > 256) throw std::out_of_range(item);
      seqs.push_back(v);
    } catch (const std::exception&) {
      return InvalidArgument("--seqs: '{}' is not a list of counts 1..256", text);
    }
  }
  return seqs;
}

// --read-trace: the stream tier's engine wrapped in one that records the reads. *tracer is
// set when the tier creates its engine (it owns it, and outlives its use here); it stays
// null when the experts are not streamed.
void TraceReads(ContextOptions* o, TracingEngine** tracer) {
  o->storage.make_io = [tracer, io = o->storage.io,
                        depth = o->storage.io_queue_depth]() -> Result<std::unique_ptr<IoEngine>> {
    std::unique_ptr<IoEngine> inner = MT_TRY(CreateIoEngine(io, depth));
    auto traced = std::make_unique<TracingEngine>(std::move(inner));
    *tracer = traced.get();
    return std::unique_ptr<IoEngine>(std::move(traced));
  };
}

// The context the tests need: positions for -d and the longest test, a sequence per
// decoded stream, a batch that holds a prefill, a decode step or a -d fill.
Result<ContextOptions> BenchContextOptions(const BenchFlags& f, const Model& m, KvTypes kv_types,
                                           const std::vector<int>& seqs, TracingEngine** tracer) {
  ContextOptions o;
  o.kv_types = kv_types;
  const int64_t positions = int64_t{f.n_depth} + std::max({f.n_prompt, f.n_gen, 1});
  if (positions > m.hparams().n_ctx_train) {
    return InvalidArgument(
        "-d {} with -p {} / -n {} needs {} positions; the model's training context has {}",
        f.n_depth, f.n_prompt, f.n_gen, positions, m.hparams().n_ctx_train);
  }
  o.n_ctx = static_cast<uint32_t>(positions);
  o.n_seq_max = static_cast<uint32_t>(*std::max_element(seqs.begin(), seqs.end()));
  // A batched decode step is one forward pass of n_seq tokens, so the batch must hold them;
  // the -d fill runs in batches of up to 512 (one token at a time would take minutes).
  o.n_batch = std::max({static_cast<uint32_t>(std::max(f.n_prompt, 1)), o.n_seq_max,
                        static_cast<uint32_t>(std::min(f.n_depth, 512))});
  o.n_threads = f.n_threads;
  o.pin_threads = f.pin_threads;
  if (Status s = ResolveStorageFlags(f.storage, &o); !s.ok()) return s;
  if (!f.read_trace.empty()) TraceReads(&o, tracer);
  return o;
}

// --read-trace needs the stream tier (which created `tracer`) and a tg test to record.
Status CheckReadTrace(const BenchFlags& f, Context& ctx, const TracingEngine* tracer) {
  if (f.read_trace.empty()) return Status::Ok();
  if (tracer == nullptr) {
    return InvalidArgument(
        "--read-trace needs the experts streamed (--moe-storage stream); here they are {}",
        ctx.expert_store().name());
  }
  if (f.n_gen == 0) {
    return InvalidArgument("--read-trace records the reads of the tg test; -n is 0");
  }
  return Status::Ok();
}

// Time steady-state decode: on a VM whose host backs fresh memory lazily, populating a few
// GiB of expert cache takes seconds of a core, which a short run would measure.
void WaitForExpertMemory(Context& ctx) {
  const auto t0 = std::chrono::steady_clock::now();
  ctx.expert_store().WaitForMemory();
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (waited >= 0.1) {
    std::fprintf(stderr, "moetier: waited %.1f s for the expert cache's memory\n", waited);
  }
}

// One tg test of `n_seq` sequences. The first (`first`) also reports the tier statistics and
// writes the read trace: they and the bytes read cover the measured repetitions (not the cold
// warm-up), as its tok/s does.
Result<BenchSample> RunDecodeTest(const BenchFlags& f, Context& ctx, int n_seq, bool first,
                                  TracingEngine* tracer) {
  uint64_t read0 = 0;
  auto t0 = std::chrono::steady_clock::now();
  auto restart_counters = [&] {
    ctx.expert_store().ResetStats();
    if (GpuExpertTier* gpu = ctx.gpu_experts()) gpu->ResetStats();
    if (tracer != nullptr && first) tracer->SetRecording(true);
    read0 = ProcessStorageReadBytes();
    t0 = std::chrono::steady_clock::now();
  };
  BenchSample s =
      MT_TRY(BenchDecode(ctx, f.n_gen, n_seq, f.n_depth, f.reps, f.seed, restart_counters));
  if (tracer != nullptr && first) {
    tracer->SetRecording(false);
    std::string text = MT_TRY(FormatReadTrace(tracer->trace()));
    MT_RETURN_IF_ERROR(WriteFileAtomically(f.read_trace, text));
  }
  s.storage_read_bytes = ProcessStorageReadBytes() - read0;
  if (first) {
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const uint64_t tokens = uint64_t(f.n_gen) * f.reps * n_seq;
    MT_RETURN_IF_ERROR(ReportTierStats(f.storage, ctx, secs, tokens));
  }
  return s;
}

// The pp test (unless -p 0), then a tg test per --seqs entry (unless -n 0).
Result<std::vector<BenchSample>> RunTests(const BenchFlags& f, const std::vector<int>& seqs,
                                          Context& ctx, TracingEngine* tracer) {
  std::vector<BenchSample> samples;
  if (f.n_prompt > 0) {
    BenchSample s = MT_TRY(BenchPrefill(ctx, f.n_prompt, f.n_depth, f.reps, f.seed));
    samples.push_back(std::move(s));
  }
  if (f.n_gen > 0) {
    for (size_t i = 0; i < seqs.size(); ++i) {
      BenchSample s = MT_TRY(RunDecodeTest(f, ctx, seqs[i], i == 0, tracer));
      samples.push_back(std::move(s));
    }
  }
  return samples;
}

// What the report states besides the samples: the model, the machine, the costs per token.
struct BenchReport {
  std::string label;  // "ARCH FILE_TYPE", e.g. "qwen3moe Q4_K - Medium"
  uint64_t model_bytes = 0;
  uint64_t n_params = 0;
  int threads = 0;
  KvTypes kv_types;
  TokenCost cost;
  double membw = 0;             // GB/s, memory read bandwidth measured after the tests
  std::string tier;             // the experts' store
  std::string backend = "CPU";  // llama-bench's column: "CPU", or "Vulkan" with a device
};

// Gathers the report, destroying `ctx` before the bandwidth probe: it runs after the context
// is gone, in at most a quarter of the budget, so it never pushes a memory-limited run over
// its limit.
BenchReport MeasureReport(const BenchFlags& f, const Model& m, KvTypes kv_types,
                          std::unique_ptr<Context> ctx) {
  BenchReport r;
  r.tier = ctx->expert_store().name();
  if (const Context::DeviceParts d = ctx->device_parts(); !d.name.empty()) {
    r.backend = "Vulkan";
    r.tier += fmt::format(" on the CPU; on {}: attention of {} layers, {}the output head", d.name,
                          d.attention_layers, d.output_head ? "" : "not ");
  }
  if (const GpuExpertTier* gpu = ctx->gpu_experts()) {
    r.tier += fmt::format(", {} experts ({})", gpu->n_experts(), HumanBytes(gpu->weight_bytes()));
  }
  const uint64_t probe_bytes =
      std::min<uint64_t>(uint64_t{1} << 30, ctx->storage_plan().budget / 4);
  ctx.reset();
  ThreadPool pool(f.n_threads, f.pin_threads);
  r.membw = MeasureReadBandwidth(pool, probe_bytes, 5);
  r.kv_types = kv_types;
  r.cost = TokenCostOf(m, kv_types);
  for (const GgufTensor& t : m.gguf().tensors()) r.n_params += t.n_elements;
  r.label =
      fmt::format("{} {}", m.hparams().arch,
                  FileTypeLabel(m.gguf().metadata().FindUint("general.file_type").value_or(999)));
  r.model_bytes = m.gguf().total_file_bytes();
  r.threads = pool.size();
  return r;
}

// --json: one object per sample.
void PrintJson(const BenchFlags& f, const std::vector<BenchSample>& samples, const BenchReport& r) {
  nlohmann::json j = nlohmann::json::array();
  for (const BenchSample& s : samples) {
    j.push_back({{"model", r.label},
                 {"model_bytes", r.model_bytes},
                 {"params", r.n_params},
                 {"backend", r.backend},
                 {"threads", r.threads},
                 {"test", s.test},
                 {"n_prompt", s.n_prompt},
                 {"n_gen", s.n_gen},
                 {"n_depth", s.n_depth},
                 {"n_seq", s.n_seq},
                 {"tps", s.tps},
                 {"avg_ts", s.mean},
                 {"stddev_ts", s.sd},
                 {"weight_bytes_per_token", r.cost.bytes},
                 {"type_k", KvTypeName(r.kv_types.k)},
                 {"type_v", KvTypeName(r.kv_types.v)},
                 {"kv_bytes_per_position", r.cost.kv_bytes_per_position},
                 {"state_bytes_per_token", r.cost.state_bytes},
                 {"mem_read_gbps", r.membw},
                 {"isa", IsaName(ActiveIsa())},
                 {"storage_read_bytes", s.storage_read_bytes},
                 {"tokens_decoded", uint64_t(s.n_gen) * s.n_seq * f.reps},
                 {"expert_tier", r.tier}});
  }
  fmt::print("{}\n", j.dump(2));
}

// llama-bench's markdown table.
void PrintTable(const std::vector<BenchSample>& samples, const BenchReport& r) {
  size_t test_width = 8;  // as wide as the longest name ("tg32-b8 @ d4096")
  for (const BenchSample& s : samples) test_width = std::max(test_width, s.test.size());
  fmt::print("| {:<30} | {:>10} | {:>10} | {:<7} | {:>7} | {:>{}} | {:>16} |\n", "model", "size",
             "params", "backend", "threads", "test", test_width, "t/s");
  fmt::print("| {:-<30} | {:->10}: | {:->9}: | {:-<7} | {:->6}: | {:->{}}: | {:->15}: |\n", "", "",
             "", "", "", "", test_width - 1, "");
  for (const BenchSample& s : samples) {
    fmt::print("| {:<30} | {:>10} | {:>8.2f} B | {:<7} | {:>7} | {:>{}} | {:>16} |\n", r.label,
               HumanBytes(r.model_bytes), r.n_params / 1e9, r.backend, r.threads, s.test,
               test_width, fmt::format("{:.2f} ± {:.2f}", s.mean, s.sd));
  }
  fmt::print("\n");
}

// Each sample against the machine: a single-sequence tg test's bytes per token against the
// measured read bandwidth (the roofline), a pp test's multiply-adds per second.
void PrintRoofline(const std::vector<BenchSample>& samples, const BenchReport& r) {
  const TokenCost& cost = r.cost;
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
          s.test, HumanBytes(cost.bytes), HumanBytes(kv), KvTypesName(r.kv_types), state, gbps,
          r.membw, r.threads, 100 * gbps / r.membw);
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
             r.tier);
}

int Run(const BenchFlags& f) {
  Result<std::vector<int>> seqs = ParseSeqs(f.seqs);
  if (!seqs.ok()) return ReportError(seqs.status());
  if (f.reps < 1 || f.n_prompt < 0 || f.n_gen < 0 || f.n_depth < 0) {
    return ReportError(InvalidArgument("-r must be >= 1, -p, -n and -d >= 0"));
  }
  Result<KvTypes> kv_types = ResolveKvTypes(f.kv_type);
  if (!kv_types.ok()) return ReportError(kv_types.status());
  Result<LoadOptions> load = LoadOptionsOf(f.storage, *kv_types);
  if (!load.ok()) return ReportError(load.status());
  Result<std::unique_ptr<Model>> model = Model::Load(f.model, *load);
  if (!model.ok()) return ReportError(model.status());
  const Model& m = *model.value();

  TracingEngine* tracer = nullptr;  // with --read-trace, once the stream tier made its engine
  Result<ContextOptions> o = BenchContextOptions(f, m, *kv_types, *seqs, &tracer);
  if (!o.ok()) return ReportError(o.status());
  Result<std::unique_ptr<Context>> ctx = Context::Create(m, *o);
  if (!ctx.ok()) return ReportError(ctx.status().WithContext(f.model));
  if (Status s = CheckReadTrace(f, **ctx, tracer); !s.ok()) return ReportError(s);
  if (!f.json) PrintStoragePlan(**ctx);
  WaitForExpertMemory(**ctx);

  Result<std::vector<BenchSample>> samples = RunTests(f, *seqs, **ctx, tracer);
  if (!samples.ok()) return ReportError(samples.status());
  const BenchReport report = MeasureReport(f, m, o->kv_types, std::move(ctx).value());
  if (f.json) {
    PrintJson(f, *samples, report);
  } else {
    PrintTable(*samples, report);
    PrintRoofline(*samples, report);
  }
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
