// Microbenchmark of the matmul (kernels/matmul.h) and attention (kernels/attention.h) kernels.
// Not a test: it measures.
//
//   .../panels: the same with the matrix repacked (WeightLayout::kPanels), where the active
//       variant prefers it; repack/...: the repacking itself, in place, GB/s of weights.
//   gemv/<isa>/<type>/<rows>x<cols>[/panels][/t2]  one token; the weights cycle through copies
//       filling >= 256 MiB, so they stream from DRAM as in decode. Counter GB/s = weight
//       bytes read per second of CPU time (the machine may be shared); /t2: rows split over
//       2 threads (mt::ThreadPool), per second of wall time.
//   gemv_hot/...                           the same on one copy (cache-resident): the
//       kernel's compute roof.
//   gemm4_dram/..., gemm8_dram/...         4 (8) tokens with the weights streaming from DRAM
//       as in gemv (an expert's share of 32 decoded sequences, and the busy end of it); GB/s
//       as gemv. Near gemv's GB/s: the products hide under the memory reads; near gemm4's
//       (gemm8's) time: they do not.
//   gemm<n>/<isa>/<type>/<rows>x<cols>     n tokens (4: an expert's share of 32 decoded
//       sequences; 16: a typical expert batch in prefill; 128). Counter GOP/s = 2 * rows * cols * n
//       / s (one multiply-add = 2 ops).
//   quantize/<isa>/<fmt>/<cols>            activation quantization, GB/s of float input.
//   read_bandwidth[/t2]                    1 GiB read as base/read_bandwidth.h reads (DRAM roof).
//   attend/<isa>/<f16|f32|q8_0>/<n_pos>    AttendHead (kernels/attention.h), one query over
//       n_pos positions of a 128-dim head (olmoe, qwen3moe); the cache is cache-resident.
//       Counter GB/s = K and V bytes read per second.
//   attend_run/<isa>/<type>/<n_pos>        AttendTokens: a prompt's 4 tokens x a GQA group's 4
//       heads over n_pos positions (prefill at depth).
// Shapes: rows x cols of gate/up experts (n_ff x n_embd) 768x2048, 1024x2048, 1536x4096,
// 2048x7168 and the transposed down shapes.
//
// Run e.g.: kernels_bench --benchmark_filter='gemv/avx512/q4_K' --benchmark_repetitions=5
//           --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/read_bandwidth.h"
#include "base/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "quant/float16.h"
#include "quant/quantize.h"

namespace mt {
namespace {

constexpr uint64_t kWorkingSet = 256ull << 20;

const GgmlType kTypes[] = {GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kQ8_0,
                           GgmlType::kQ4_0, GgmlType::kMXFP4, GgmlType::kF16, GgmlType::kBF16,
                           GgmlType::kF32, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                           GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kIQ4_XS, GgmlType::kIQ4_NL,
                           // The IQ lattice types.
                           GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS, GgmlType::kIQ2_S,
                           GgmlType::kIQ3_XXS, GgmlType::kIQ3_S, GgmlType::kIQ1_S,
                           GgmlType::kIQ1_M};

const std::pair<int64_t, int64_t> kShapes[] = {{768, 2048},  {1024, 2048}, {1536, 4096},
                                               {2048, 7168}, {2048, 768},  {2048, 1024},
                                               {4096, 1536}, {7168, 2048}};

// One quantized matrix per (type, rows, cols), made once.
const std::vector<uint8_t>& Matrix(GgmlType type, int64_t rows, int64_t cols) {
  static std::map<std::tuple<GgmlType, int64_t, int64_t>, std::vector<uint8_t>> cache;
  auto& m = cache[{type, rows, cols}];
  if (m.empty()) {
    std::mt19937 rng(1);
    std::normal_distribution<float> g(0.0f, 0.02f);
    std::vector<float> row(cols);
    const uint64_t rb = RowBytes(type, cols);
    m.resize(rows * rb);
    for (int64_t r = 0; r < rows; ++r) {
      for (auto& v : row) v = g(rng);
      QuantizeRow(type, row.data(), m.data() + r * rb, cols, QuantEffort::kFast);
    }
  }
  return m;
}

std::vector<float> Input(int64_t n_tok, int64_t cols) {
  std::mt19937 rng(2);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(n_tok * cols);
  for (auto& v : x) v = g(rng);
  return x;
}

// Weights and buffers as the engine holds them: 2 MiB aligned, on transparent huge pages
// (base/aligned_buffer.h).
struct AlignedBytes {
  explicit AlignedBytes(size_t n)
      : buf(std::move(AlignedBuffer::Allocate(n).value())), p(buf.data()) {}
  AlignedBuffer buf;
  uint8_t* p;
};

// The matrix in `layout` (kPanels: repacked for the active variant).
std::vector<uint8_t> InLayout(GgmlType type, int64_t rows, int64_t cols, WeightLayout layout) {
  std::vector<uint8_t> m = Matrix(type, rows, cols);
  if (layout == WeightLayout::kPanels) RepackToPanels(type, rows, cols, m.data(), m.data());
  return m;
}

void Gemv(benchmark::State& state, Isa isa, GgmlType type, int64_t rows, int64_t cols, int threads,
          bool hot, WeightLayout layout, int64_t n_tok) {
  const std::vector<uint8_t> m = InLayout(type, rows, cols, layout);
  const uint64_t bytes = m.size();
  const int64_t copies = hot ? 1 : std::max<int64_t>(2, (kWorkingSet + bytes - 1) / bytes);
  AlignedBytes ws(copies * bytes);
  for (int64_t i = 0; i < copies; ++i) std::memcpy(ws.p + i * bytes, m.data(), bytes);
  const std::vector<float> x = Input(n_tok, cols);
  Activations a;
  a.Prepare(ActFormatFor(type), n_tok, cols);
  a.QuantizeTokens(isa, x.data(), cols, 0, n_tok);
  std::vector<float> y(rows * n_tok);
  ThreadPool pool(threads);
  WeightMatrix w{type, nullptr, rows, cols, RowBytes(type, cols), layout};
  int64_t i = 0;
  for (auto _ : state) {
    w.data = ws.p + (i++ % copies) * bytes;
    if (threads == 1) {
      MatMul(isa, w, a, y.data(), rows, 0, rows);
    } else {
      pool.ParallelFor(
          rows, [&](int64_t r0, int64_t r1, int) { MatMul(isa, w, a, y.data(), rows, r0, r1); },
          16);
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(bytes) * state.iterations() / 1e9,
                                              benchmark::Counter::kIsRate);
}

void Gemm(benchmark::State& state, Isa isa, GgmlType type, int64_t rows, int64_t cols,
          int64_t n_tok, WeightLayout layout) {
  const std::vector<uint8_t> m = InLayout(type, rows, cols, layout);
  const std::vector<float> x = Input(n_tok, cols);
  Activations a;
  a.Prepare(ActFormatFor(type), n_tok, cols);
  a.QuantizeTokens(isa, x.data(), cols, 0, n_tok);
  std::vector<float> y(n_tok * rows);
  const WeightMatrix w{type, m.data(), rows, cols, RowBytes(type, cols), layout};
  for (auto _ : state) {
    MatMul(isa, w, a, y.data(), rows, 0, rows);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GOP/s"] = benchmark::Counter(2.0 * rows * cols * n_tok * state.iterations() / 1e9,
                                               benchmark::Counter::kIsRate);
}

// RepackToPanels in place (what a stream slot pays when an expert arrives), GB/s of weights.
void RepackBench(benchmark::State& state, GgmlType type, int64_t rows, int64_t cols) {
  std::vector<uint8_t> m = Matrix(type, rows, cols);
  for (auto _ : state) {
    RepackToPanels(type, rows, cols, m.data(), m.data());
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(
      static_cast<double>(m.size()) * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

void QuantizeBench(benchmark::State& state, Isa isa, ActFormat f, int64_t cols) {
  const int64_t n_tok = 64;
  const std::vector<float> x = Input(n_tok, cols);
  Activations a;
  a.Prepare(f, n_tok, cols);
  for (auto _ : state) {
    a.QuantizeTokens(isa, x.data(), cols, 0, n_tok);
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(4.0 * n_tok * cols * state.iterations() / 1e9,
                                              benchmark::Counter::kIsRate);
}

// The DRAM roof: a plain sum of 64-bit words (4 chains) over 1 GiB.
void ReadBandwidth(benchmark::State& state, int threads) {
  const int64_t n_lines = (int64_t{1} << 30) / 64;
  AlignedBytes buf(n_lines * 64);
  auto* v = reinterpret_cast<uint64_t*>(buf.p);
  for (int64_t i = 0; i < n_lines * 8; ++i) v[i] = i;
  ThreadPool pool(threads);
  std::vector<uint64_t> sums(threads);
  for (auto _ : state) {
    pool.ParallelFor(n_lines, [&](int64_t b, int64_t e, int th) {
      sums[th] ^= ReadAllBytes(v + b * 8, static_cast<uint64_t>(e - b) * 64);
    });
    benchmark::DoNotOptimize(sums.data());
  }
  state.counters["GB/s"] =
      benchmark::Counter(64.0 * n_lines * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

void Attend(benchmark::State& state, Isa isa, KvElemType type, int64_t n_pos) {
  const int d = 128;
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> q(d), out(d), scratch(kAttendTile), row(d);
  for (auto& x : q) x = g(rng);
  const int64_t row_bytes = KvBytes(type, d);
  std::vector<uint8_t> k(n_pos * row_bytes), v(n_pos * row_bytes);
  for (std::vector<uint8_t>* c : {&k, &v}) {
    for (int64_t j = 0; j < n_pos; ++j) {
      for (float& x : row) x = g(rng);
      StoreKv(row.data(), d, type, c->data() + j * row_bytes);
    }
  }
  for (auto _ : state) {
    AttendHead(isa, q.data(), k.data(), v.data(), type, d, d, n_pos, d, d, 0.088f, out.data(),
               scratch.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GB/s"] = benchmark::Counter(2.0 * n_pos * row_bytes * state.iterations() / 1e9,
                                              benchmark::Counter::kIsRate);
}

// A prompt's run at depth, as the engine attends it (AttendTokens): 4 consecutive tokens, each
// with the 4 query heads of a GQA group, over n_pos positions of a 128-dim head.
void AttendRun(benchmark::State& state, Isa isa, KvElemType type, int64_t n_pos) {
  const int d = 128, n_head = 4, n_tok = 4;
  std::mt19937 rng(4);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> q(n_tok * n_head * d), out(q.size()), row(d);
  std::vector<float> scratch(n_tok * n_head * kAttendTile);
  for (auto& x : q) x = g(rng);
  const int64_t rows = n_pos + n_tok, row_bytes = KvBytes(type, d);
  std::vector<uint8_t> k(rows * row_bytes), v(rows * row_bytes);
  for (std::vector<uint8_t>* c : {&k, &v}) {
    for (int64_t j = 0; j < rows; ++j) {
      for (float& x : row) x = g(rng);
      StoreKv(row.data(), d, type, c->data() + j * row_bytes);
    }
  }
  const AttendQueries qs{q.data(), n_head * d, d, out.data(), n_head * d, d, n_head, n_tok, n_pos};
  for (auto _ : state) {
    AttendTokens(isa, qs, k.data(), v.data(), type, d, d, d, d, 0.088f, scratch.data());
    benchmark::DoNotOptimize(out.data());
  }
}

std::string Shape(int64_t rows, int64_t cols) {
  return std::to_string(rows) + "x" + std::to_string(cols);
}

void RegisterAll() {
  for (int threads : {1, 2}) {
    auto* b = benchmark::RegisterBenchmark(threads == 1 ? "read_bandwidth" : "read_bandwidth/t2",
                                           ReadBandwidth, threads);
    b->Unit(benchmark::kMillisecond);
    if (threads > 1) b->UseRealTime();
  }
  for (Isa isa : kAllIsas) {
    if (!IsaSupported(isa)) continue;
    const std::string in(IsaName(isa));
    for (KvElemType type : {KvElemType::kF16, KvElemType::kF32, KvElemType::kQ8_0}) {
      for (int64_t n_pos : {128, 1024}) {
        const std::string tn = type == KvElemType::kF16   ? "f16"
                               : type == KvElemType::kF32 ? "f32"
                                                          : "q8_0";
        benchmark::RegisterBenchmark(
            ("attend/" + in + "/" + tn + "/" + std::to_string(n_pos)).c_str(), Attend, isa, type,
            n_pos)
            ->Unit(benchmark::kMicrosecond);
        benchmark::RegisterBenchmark(
            ("attend_run/" + in + "/" + tn + "/" + std::to_string(n_pos)).c_str(), AttendRun, isa,
            type, n_pos)
            ->Unit(benchmark::kMicrosecond);
      }
    }
    for (ActFormat f : {ActFormat::kQ8_0, ActFormat::kQ8_K}) {
      const std::string fn = f == ActFormat::kQ8_0 ? "q8_0" : "q8_K";
      benchmark::RegisterBenchmark(("quantize/" + in + "/" + fn + "/2048").c_str(), QuantizeBench,
                                   isa, f, 2048);
    }
    for (GgmlType type : kTypes) {
      for (auto [rows, cols] : kShapes) {
        for (WeightLayout layout : {WeightLayout::kRows, WeightLayout::kPanels}) {
          const bool panels = layout == WeightLayout::kPanels;
          if (panels && !(isa == ActiveIsa() && PanelsPreferred(type, rows))) continue;
          const std::string name = in + "/" + std::string(TypeName(type)) + "/" +
                                   Shape(rows, cols) + (panels ? "/panels" : "");
          if (panels) {
            benchmark::RegisterBenchmark(("repack/" + name).c_str(), RepackBench, type, rows, cols)
                ->Unit(benchmark::kMicrosecond);
          }
          benchmark::RegisterBenchmark(("gemv/" + name).c_str(), Gemv, isa, type, rows, cols, 1,
                                       false, layout, 1)
              ->Unit(benchmark::kMicrosecond);
          benchmark::RegisterBenchmark(("gemv/" + name + "/t2").c_str(), Gemv, isa, type, rows,
                                       cols, 2, false, layout, 1)
              ->Unit(benchmark::kMicrosecond)
              ->UseRealTime();
          benchmark::RegisterBenchmark(("gemv_hot/" + name).c_str(), Gemv, isa, type, rows, cols, 1,
                                       true, layout, 1)
              ->Unit(benchmark::kMicrosecond);
          for (int64_t n : {4, 8}) {
            benchmark::RegisterBenchmark(("gemm" + std::to_string(n) + "_dram/" + name).c_str(),
                                         Gemv, isa, type, rows, cols, 1, false, layout, n)
                ->Unit(benchmark::kMicrosecond);
          }
          for (int64_t n : {4, 8, 16, 128}) {
            benchmark::RegisterBenchmark(("gemm" + std::to_string(n) + "/" + name).c_str(), Gemm,
                                         isa, type, rows, cols, n, layout)
                ->Unit(benchmark::kMicrosecond);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace mt

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  mt::RegisterAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
