// The model-facing half of perplexity.h: RunPerplexity and RunKlDivergence. The math and
// file formats are in perplexity.cc, which builds without the engine (tests, fuzzing).
#include <algorithm>
#include <chrono>

#include "base/check.h"
#include "engine/context.h"
#include "engine/perplexity.h"

namespace mt {
namespace {

void Emit(const std::function<void(const std::string&)>& sink, const std::string& text) {
  if (sink) sink(text);
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// "<who>: X.XX seconds per pass - ETA [H hours ]M.MM minutes", as llama.cpp estimates it.
std::string EtaLine(const char* who, double seconds_per_chunk, int32_t n_chunk) {
  std::string line = fmt::format("{}: {:.2f} seconds per pass - ETA ", who, seconds_per_chunk);
  int total_seconds = static_cast<int>(seconds_per_chunk * n_chunk);
  if (total_seconds >= 60 * 60) {
    line += fmt::format("{} hours ", total_seconds / (60 * 60));
    total_seconds %= 60 * 60;
  }
  return line + fmt::format("{:.2f} minutes\n", total_seconds / 60.0);
}

// Evaluates one chunk from an empty KV cache in Eval calls of n_batch tokens, its first
// token replaced by `bos` when set, and calls score(position, logits row) for each scored
// position in order. Batches with no scored position ask only for the last logits.
template <typename Score>
Status EvalChunk(Context& ctx, std::span<const int32_t> chunk_tokens, std::optional<int32_t> bos,
                 const ChunkPlan& plan, int32_t n_batch, std::vector<int32_t>& chunk,
                 std::vector<float>& logits, Score&& score) {
  chunk.assign(chunk_tokens.begin(), chunk_tokens.end());
  if (bos) chunk[0] = *bos;
  const size_t n_vocab = ctx.n_vocab();
  ctx.ClearKv();
  for (int32_t b0 = 0; b0 < plan.n_ctx; b0 += n_batch) {
    const int32_t b1 = std::min(b0 + n_batch, plan.n_ctx);
    const int32_t lo = std::max(b0, plan.first);      // scored positions of this batch:
    const int32_t hi = std::min(b1, plan.n_ctx - 1);  // [lo, hi)
    std::span<const int32_t> batch(chunk.data() + b0, static_cast<size_t>(b1 - b0));
    MT_RETURN_IF_ERROR(ctx.Eval(batch, lo < hi ? LogitsFor::kAll : LogitsFor::kLast, &logits));
    for (int32_t p = lo; p < hi; ++p) {
      std::span<const float> row(logits.data() + static_cast<size_t>(p - b0) * n_vocab, n_vocab);
      MT_RETURN_IF_ERROR(score(p, row));
    }
  }
  return Status::Ok();
}

}  // namespace

Result<PerplexityResult> RunPerplexity(Context& ctx, std::span<const int32_t> tokens,
                                       std::optional<int32_t> bos, const PerplexityOptions& options,
                                       const PerplexityOutput& out) {
  const ChunkPlan plan = MT_TRY(PlanChunks(tokens.size(), options.n_ctx, options.n_chunks));
  if (ctx.n_ctx() < static_cast<uint32_t>(plan.n_ctx)) {
    return InvalidArgument("the context holds {} positions, a chunk needs {}", ctx.n_ctx(),
                           plan.n_ctx);
  }
  const int32_t n_vocab = static_cast<int32_t>(ctx.n_vocab());
  const int32_t n_batch = std::clamp(options.n_batch, 1, plan.n_ctx);
  std::optional<KlBaseWriter> writer;  // created first: a bad path fails before any output
  if (!options.kl_base_out.empty()) {
    KlBaseWriter w =
        MT_TRY(KlBaseWriter::Create(options.kl_base_out, plan.n_ctx, n_vocab, plan.n_chunk,
                                    tokens.first(static_cast<size_t>(plan.n_chunk) * plan.n_ctx)));
    writer.emplace(std::move(w));
    Emit(out.info, fmt::format("perplexity: saving all logits to {}\n", options.kl_base_out));
  }
  Emit(out.info, fmt::format("perplexity: have {} tokens\n", tokens.size()));
  Emit(out.info, fmt::format("perplexity: calculating perplexity over {} chunks, n_ctx={}, "
                             "batch_size={}, n_seq=1\n",
                             plan.n_chunk, plan.n_ctx, n_batch));

  PerplexityResult result;
  result.plan = plan;
  std::vector<int32_t> chunk;
  std::vector<float> logits;
  std::vector<uint16_t> record(KlRecordWords(n_vocab));
  for (int32_t c = 0; c < plan.n_chunk; ++c) {
    const auto t0 = std::chrono::steady_clock::now();
    const size_t start = static_cast<size_t>(c) * plan.n_ctx;
    Status st = EvalChunk(ctx, tokens.subspan(start, plan.n_ctx), bos, plan, n_batch, chunk, logits,
                          [&](int32_t p, std::span<const float> row) {
                            const int32_t next = tokens[start + p + 1];
                            if (!writer) {
                              result.stats.Add(TokenNll(row, next));
                              return Status::Ok();
                            }
                            // llama.cpp takes the nll from the compression in this mode.
                            result.stats.Add(CompressLogProbs(row, next, record));
                            return writer->Append(record);
                          });
    if (!st.ok()) return st.WithContext(fmt::format("chunk {}", c + 1));
    if (c == 0) Emit(out.info, EtaLine("perplexity", Seconds(t0), plan.n_chunk));
    Emit(out.result, fmt::format("[{}]{:.4f},", c + 1, result.stats.Ppl()));
  }
  Emit(out.result, "\n");
  if (writer) MT_RETURN_IF_ERROR(writer->Finish());
  const std::string final_line = PplFinalLine(result.stats);
  if (!final_line.empty()) {
    Emit(out.result, final_line);
  } else {
    Emit(out.info, "Unexpected negative standard deviation of log(prob)\n");
  }
  return result;
}

Result<KldStats> RunKlDivergence(Context& ctx, KlBaseReader& base, std::optional<int32_t> bos,
                                 int32_t n_batch, const PerplexityOutput& out) {
  ChunkPlan plan;
  plan.n_ctx = base.n_ctx();
  plan.n_chunk = base.n_chunk();
  plan.first = plan.n_ctx / 2;
  plan.n_scored = plan.n_ctx - 1 - plan.first;
  if (ctx.n_ctx() < static_cast<uint32_t>(plan.n_ctx)) {
    return InvalidArgument("the context holds {} positions, {} was computed with n_ctx {}",
                           ctx.n_ctx(), base.path(), plan.n_ctx);
  }
  if (static_cast<int32_t>(ctx.n_vocab()) != base.n_vocab()) {
    return InvalidArgument("{}: inconsistent vocabulary: the file has n_vocab {}, the model {}",
                           base.path(), base.n_vocab(), ctx.n_vocab());
  }
  n_batch = std::clamp(n_batch, 1, plan.n_ctx);
  Emit(out.info, fmt::format("kl_divergence: computing over {} chunks, n_ctx={}, batch_size={}, "
                             "n_seq=1\n",
                             plan.n_chunk, plan.n_ctx, n_batch));

  KldStats stats;
  const size_t n_total = static_cast<size_t>(plan.n_chunk) * plan.n_scored;
  std::vector<float> kld_values;
  std::vector<float> p_diff_values;
  kld_values.reserve(n_total);
  p_diff_values.reserve(n_total);
  std::vector<int32_t> chunk;
  std::vector<float> logits;
  std::vector<uint16_t> record(KlRecordWords(base.n_vocab()));
  const std::vector<int32_t>& tokens = base.tokens();
  for (int32_t c = 0; c < plan.n_chunk; ++c) {
    const auto t0 = std::chrono::steady_clock::now();
    const size_t start = static_cast<size_t>(c) * plan.n_ctx;
    Status st = EvalChunk(ctx, std::span<const int32_t>(tokens).subspan(start, plan.n_ctx), bos,
                          plan, n_batch, chunk, logits, [&](int32_t p, std::span<const float> row) {
                            MT_RETURN_IF_ERROR(base.ReadRecord(record));
                            auto [kld, p_diff] = stats.Add(row, record, tokens[start + p + 1]);
                            kld_values.push_back(static_cast<float>(kld));
                            p_diff_values.push_back(p_diff);
                            return Status::Ok();
                          });
    if (!st.ok()) return st.WithContext(fmt::format("chunk {}", c + 1));
    if (c == 0) {
      Emit(out.info, EtaLine("kl_divergence", Seconds(t0), plan.n_chunk));
      Emit(out.result, "\n" + KlTableHeader());
    }
    Emit(out.result, KlTableRow(c + 1, stats));
  }
  Emit(out.result, "\n");
  Emit(out.result, KlSummary(stats, std::move(kld_values), std::move(p_diff_values)));
  return stats;
}

}  // namespace mt
