// Perplexity and KL divergence exactly as llama.cpp's llama-perplexity defines them, so the
// numbers printed and the files written are interchangeable with it.
//
// Chunks. The whole text is tokenized once (BOS first when the vocabulary adds one). It is
// cut into n_chunk = min(--chunks, n_tokens / n_ctx) chunks of n_ctx tokens; at least
// 2 * n_ctx tokens are required. Each chunk is evaluated from an empty KV cache, with its
// first token replaced by BOS when the vocabulary adds BOS. Only the second half is
// scored: the logits at positions first = n_ctx / 2 .. n_ctx - 2 predict the tokens at
// first + 1 .. n_ctx - 1, so each chunk scores n_ctx - 1 - first tokens.
//
// Perplexity. With nll = -ln softmax(logits)[next token] over the `count` scored tokens,
// PPL = exp(mean nll) and llama.cpp's "+/-" is PPL * sqrt((mean(nll^2) - mean(nll)^2) /
// (count - 1)) (the standard error of the mean nll, carried through exp).
//
// KL-divergence base file (llama.cpp's --kl-divergence-base; host byte order, which is
// little-endian on every machine moetier supports):
//   char    magic[8] = "_logits_"
//   int32   n_ctx, n_vocab, n_chunk
//   int32   tokens[n_chunk * n_ctx]   the text's tokens (without the BOS replacement)
//   then for each chunk, for each scored position, one record of KlRecordWords(n_vocab)
//   uint16: float scale, float min_log_prob (each stored as 2 uint16), q[n_vocab], then
//   zero padding to an even count of q. log p(i) = scale * q[i] + min_log_prob.
// The compression: with m = max logit, lo = max(min logit, m - 16), lse = ln sum exp(l - m),
//   scale = (m - lo) / 65535, min_log_prob = lo - m - lse,
//   q[i] = round_half_even((l[i] - lo) / scale) if l[i] > lo else 0  (all 0 when scale = 0),
// i.e. log-probabilities below max - 16 are clamped to the floor.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace mt {

class Context;

// ---- Pure math (no model) ----

// -ln softmax(logits)[token]: exps of logit - max in float, summed in double (as llama.cpp's
// plain perplexity path computes it). `token` must be in range.
double TokenNll(std::span<const float> logits, int32_t token);

// uint16 words in one base-file record: 4 (the two floats) + n_vocab rounded up to even.
size_t KlRecordWords(int32_t n_vocab);

// Writes the compressed log-softmax of `logits` (n_vocab) into `record`
// (KlRecordWords(n_vocab) words; padding zeroed) and returns -ln p(token), computed in
// float as llama.cpp does when it writes a base file.
double CompressLogProbs(std::span<const float> logits, int32_t token, std::span<uint16_t> record);

// log p(i) decoded from a record: scale * q[i] + min_log_prob.
float RecordLogProb(std::span<const uint16_t> record, int32_t i);

// Running perplexity over scored tokens.
struct PplStats {
  double sum_nll = 0.0;
  double sum_nll2 = 0.0;
  int64_t count = 0;

  void Add(double nll) {
    sum_nll += nll;
    sum_nll2 += nll * nll;
    ++count;
  }
  double Ppl() const;  // exp(sum_nll / count)
  // llama.cpp's "+/-" (see the top of this file). nullopt when the variance is not positive
  // or count < 2, where llama.cpp prints "Unexpected negative standard deviation of log(prob)".
  std::optional<double> Uncertainty() const;
};

// "Final estimate: PPL = 12.3456 +/- 0.12345\n" (llama.cpp's line), or "" when there is no
// uncertainty to give.
std::string PplFinalLine(const PplStats& stats);

// Mean and llama.cpp's uncertainty of a sum: (sum / n, sqrt((sum2 / n - mean^2) / (n - 1)));
// the uncertainty is 0 unless the variance is positive and n > 10. (0, 0) for n = 0.
struct MeanUnc {
  double mean = 0.0;
  double unc = 0.0;
};
MeanUnc MeanAndUncertainty(double sum, double sum2, int64_t count);
// llama.cpp's covariance of the two means: (sum_ab / n - (sum_a / n)(sum_b / n)) / (n - 1);
// 0 for n < 10.
double Covariance(double sum_a, double sum_b, double sum_ab, int64_t count);

// Running KL-divergence statistics of a model Q against base log-probs, with llama.cpp's
// definitions. Per scored token t with Q's logits l and the base record:
//   nll      = max l + lse(l) - l[t]                 (float)
//   nll_base = -log p_base(t)                        (decoded from the record)
//   kld      = sum over i with log p_base(i) > -16 of p_base(i) (log p_base(i) - log p_Q(i))
//   same top: the first argmax of l equals the first argmax of log p_base
//   p_diff   = p_Q(t) - p_base(t)
struct KldStats {
  double sum_nll = 0.0;
  double sum_nll2 = 0.0;
  double sum_nll_base = 0.0;
  double sum_nll_base2 = 0.0;
  double sum_nll_nll_base = 0.0;
  double sum_kld = 0.0;
  double sum_kld2 = 0.0;
  double sum_p_diff = 0.0;
  double sum_p_diff2 = 0.0;
  double sum_p_diff4 = 0.0;
  float max_p_diff = 0.0f;
  int64_t n_same_top = 0;
  int64_t count = 0;

  // Adds one token; returns (kld, p_diff) of it. `record` has KlRecordWords(logits.size()).
  std::pair<double, float> Add(std::span<const float> logits, std::span<const uint16_t> record,
                               int32_t token);
};

// llama.cpp's KL-divergence table: the header line, and one row per chunk (1-based) with
// the running PPL(Q), ln(PPL(Q)/PPL(base)), KL divergence, RMS of p_diff and same-top
// percentage, each with its uncertainty. Lines end in '\n'.
std::string KlTableHeader();
std::string KlTableRow(int chunk, const KldStats& stats);
// The "====== Perplexity statistics ======", KL divergence and token probability blocks,
// with percentiles of the per-token values (sorted here). "" when fewer than 100 tokens were
// scored (llama.cpp prints no statistics then).
std::string KlSummary(const KldStats& stats, std::vector<float> kld_values,
                      std::vector<float> p_diff_values);

// ---- Chunk planning ----

struct ChunkPlan {
  int32_t n_ctx = 0;
  int32_t n_chunk = 0;
  int32_t first = 0;     // n_ctx / 2: the first position whose logits are scored
  int32_t n_scored = 0;  // n_ctx - 1 - first: scored tokens per chunk
};

// Errors (kInvalidArgument): n_ctx < 2, max_chunks == 0, or fewer than 2 * n_ctx tokens (the
// message says how many are needed and how many there are). max_chunks < 0: all chunks.
Result<ChunkPlan> PlanChunks(size_t n_tokens, int32_t n_ctx, int32_t max_chunks);

// ---- The base file ----

class KlBaseWriter {
 public:
  // Creates `path` and writes the header and the n_chunk * n_ctx `tokens`. Errors name the
  // path (cannot create, write failed).
  static Result<KlBaseWriter> Create(const std::string& path, int32_t n_ctx, int32_t n_vocab,
                                     int32_t n_chunk, std::span<const int32_t> tokens);
  // Appends one record (KlRecordWords(n_vocab) words), in file order.
  Status Append(std::span<const uint16_t> record);
  // Checks that n_chunk * n_scored records were appended, flushes and closes.
  Status Finish();

 private:
  struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  KlBaseWriter(std::string path, std::FILE* file, int64_t n_records, size_t record_words)
      : path_(std::move(path)), file_(file), n_records_(n_records), record_words_(record_words) {}

  std::string path_;
  std::unique_ptr<std::FILE, FileCloser> file_;
  int64_t n_records_ = 0;  // records the header promises
  int64_t n_written_ = 0;
  size_t record_words_ = 0;
};

class KlBaseReader {
 public:
  // Reads and checks the header and tokens, and that the file size is exactly what the
  // header implies. Errors (one line, naming the path and the byte offset where it applies):
  // missing/unreadable file, wrong magic, n_ctx < 2, n_vocab < 1 or n_chunk < 1, a truncated
  // or over-long file (expected and actual size), a token id outside [0, n_vocab).
  static Result<KlBaseReader> Open(const std::string& path);

  // Whether this file fits the model being evaluated: the same n_vocab, and n_ctx no larger
  // than `max_n_ctx` (the -c the user gave). Errors name both values.
  Status CheckCompatible(int32_t model_n_vocab, int32_t max_n_ctx) const;

  // The next record in file order (chunk by chunk, scored position by position).
  Status ReadRecord(std::span<uint16_t> record);

  const std::string& path() const { return path_; }
  int32_t n_ctx() const { return n_ctx_; }
  int32_t n_vocab() const { return n_vocab_; }
  int32_t n_chunk() const { return n_chunk_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }  // (n_chunk * n_ctx)

 private:
  struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  KlBaseReader() = default;

  std::string path_;
  std::unique_ptr<std::FILE, FileCloser> file_;
  int32_t n_ctx_ = 0;
  int32_t n_vocab_ = 0;
  int32_t n_chunk_ = 0;
  std::vector<int32_t> tokens_;  // (n_chunk * n_ctx)
  uint64_t offset_ = 0;          // of the next record
};

// ---- Drivers (need a model; in perplexity_driver.cc, so perplexity.cc builds alone) ----

struct PerplexityOptions {
  int32_t n_ctx = 512;      // -c: tokens per chunk
  int32_t n_chunks = -1;    // --chunks: at most this many chunks; -1 = all
  int32_t n_batch = 2048;   // -b: tokens per Eval call (capped at n_ctx)
  std::string kl_base_out;  // --kl-divergence-base in perplexity mode: write the file here
};

// Where the drivers write: `result` gets what llama.cpp prints on stdout (the running
// "[1]12.3456," values, the KL table and statistics, and the final estimate); `info` gets
// progress lines (llama.cpp's stderr). Either may be empty.
struct PerplexityOutput {
  std::function<void(const std::string&)> result;
  std::function<void(const std::string&)> info;
};

struct PerplexityResult {
  ChunkPlan plan;
  PplStats stats;
};

// Perplexity of `tokens` (the tokenized text, BOS first if the vocabulary adds one) in
// chunks of options.n_ctx; `bos` replaces each chunk's first token when set. ctx.n_ctx()
// must be >= options.n_ctx; ctx's KV cache is cleared before every chunk. Writes the base
// file when options.kl_base_out is set. Errors: too few tokens (see PlanChunks), Eval
// errors, base-file write errors.
Result<PerplexityResult> RunPerplexity(Context& ctx, std::span<const int32_t> tokens,
                                       std::optional<int32_t> bos, const PerplexityOptions& options,
                                       const PerplexityOutput& out);

// KL divergence of ctx's model against the base file: evaluates the file's tokens in its
// chunks (n_ctx from the file; ctx.n_ctx() must be >= it), compares against each record
// and prints the table and the statistics. The caller has run CheckCompatible.
Result<KldStats> RunKlDivergence(Context& ctx, KlBaseReader& base, std::optional<int32_t> bos,
                                 int32_t n_batch, const PerplexityOutput& out);

}  // namespace mt
