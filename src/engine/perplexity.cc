#include "engine/perplexity.h"

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstring>

#include "base/check.h"

namespace mt {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the KL base file is written in host order; llama.cpp's files are little-endian");

constexpr char kMagic[8] = {'_', 'l', 'o', 'g', 'i', 't', 's', '_'};
constexpr uint64_t kHeaderBytes = sizeof(kMagic) + 3 * sizeof(int32_t);
constexpr float kLogProbFloor = 16.0f;  // log-probs below max - 16 are clamped (and ignored)

// printf into a string: llama.cpp's output formats are printf formats, kept verbatim so the
// text (widths, "nan", rounding) is the same.
__attribute__((format(printf, 1, 2))) std::string Printf(const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);  // %f of 1e300 is 300+ digits
  va_end(args);
  MT_CHECK(n >= 0);
  std::string out(static_cast<size_t>(n) + 1, '\0');
  std::vsnprintf(out.data(), out.size(), format, again);
  va_end(again);
  out.resize(static_cast<size_t>(n));
  return out;
}

float RecordFloat(std::span<const uint16_t> record, int index) {
  float v;
  std::memcpy(&v, record.data() + 2 * index, sizeof(v));
  return v;
}

// ln sum_i exp(l_i - max): the exps in float, the sum in double, as llama.cpp.
double LogSumExpShifted(std::span<const float> logits, float max_logit) {
  double sum = 0.0;
  for (float l : logits) sum += std::exp(l - max_logit);
  return std::log(sum);
}

std::string StrError(int err) { return std::strerror(err); }

// llama.cpp's interpolated percentile of sorted values (fraction in float, as there).
float Percentile(const std::vector<float>& values, float fraction) {
  if (fraction <= 0) return values.front();
  if (fraction >= 1) return values.back();
  float p = fraction * (values.size() - 1);
  size_t ip = static_cast<size_t>(p);
  p -= ip;
  return (1 - p) * values[ip] + p * values[std::min(ip + 1, values.size() - 1)];
}

float Median(const std::vector<float>& v) {
  return v.size() % 2 == 0 ? 0.5f * (v[v.size() / 2] + v[v.size() / 2 - 1]) : v[v.size() / 2];
}

}  // namespace

// ---- Pure math ----

double TokenNll(std::span<const float> logits, int32_t token) {
  MT_CHECK(token >= 0 && static_cast<size_t>(token) < logits.size());
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  return -((logits[token] - max_logit) - LogSumExpShifted(logits, max_logit));
}

size_t KlRecordWords(int32_t n_vocab) { return 2 * ((static_cast<size_t>(n_vocab) + 1) / 2) + 4; }

double CompressLogProbs(std::span<const float> logits, int32_t token, std::span<uint16_t> record) {
  const size_t n_vocab = logits.size();
  MT_CHECK(n_vocab > 0 && token >= 0 && static_cast<size_t>(token) < n_vocab);
  MT_CHECK(record.size() == KlRecordWords(static_cast<int32_t>(n_vocab)));
  float max_logit = logits[0];
  float min_logit = logits[0];
  for (float l : logits) {
    max_logit = std::max(max_logit, l);
    min_logit = std::min(min_logit, l);
  }
  min_logit = std::max(min_logit, max_logit - kLogProbFloor);
  const float log_sum_exp = static_cast<float>(LogSumExpShifted(logits, max_logit));
  const float min_log_prob = min_logit - max_logit - log_sum_exp;
  const float scale = (max_logit - min_logit) / 65535.0f;
  std::memcpy(record.data(), &scale, sizeof(scale));
  std::memcpy(record.data() + 2, &min_log_prob, sizeof(min_log_prob));
  std::span<uint16_t> q = record.subspan(4);
  std::fill(q.begin(), q.end(), uint16_t{0});  // also the padding word, if any
  if (scale != 0.0f) {
    const float inv_scale = 1.0f / scale;
    for (size_t i = 0; i < n_vocab; ++i) {
      // Round half to even, as llama.cpp's float trick does (the default rounding mode).
      if (logits[i] > min_logit) {
        q[i] = static_cast<uint16_t>(std::nearbyint(inv_scale * (logits[i] - min_logit)));
      }
    }
  }
  return max_logit + log_sum_exp - logits[token];
}

float RecordLogProb(std::span<const uint16_t> record, int32_t i) {
  return RecordFloat(record, 0) * record[4 + i] + RecordFloat(record, 1);
}

double PplStats::Ppl() const { return std::exp(sum_nll / count); }

std::optional<double> PplStats::Uncertainty() const {
  if (count < 2) return std::nullopt;
  const double mean = sum_nll / count;
  const double var = sum_nll2 / count - mean * mean;
  if (!(var > 0)) return std::nullopt;
  return std::sqrt(var / (count - 1)) * Ppl();
}

std::string PplFinalLine(const PplStats& stats) {
  std::optional<double> unc = stats.Uncertainty();
  if (!unc) return "";
  return Printf("Final estimate: PPL = %.4lf +/- %.5lf\n", stats.Ppl(), *unc);
}

MeanUnc MeanAndUncertainty(double sum, double sum2, int64_t count) {
  if (count < 1) return {};
  const double f = sum / count;
  double df = sum2 / count - f * f;
  df = df > 0 && count > 10 ? std::sqrt(df / (count - 1)) : 0.0;
  return {f, df};
}

double Covariance(double sum_a, double sum_b, double sum_ab, int64_t count) {
  if (count < 10) return 0.0;
  return (sum_ab / count - (sum_a / count) * (sum_b / count)) / (count - 1);
}

std::pair<double, float> KldStats::Add(std::span<const float> logits,
                                       std::span<const uint16_t> record, int32_t token) {
  const size_t n_vocab = logits.size();
  MT_CHECK(token >= 0 && static_cast<size_t>(token) < n_vocab);
  MT_CHECK(record.size() == KlRecordWords(static_cast<int32_t>(n_vocab)));
  size_t imax = 0;
  for (size_t i = 1; i < n_vocab; ++i) {
    if (logits[i] > logits[imax]) imax = i;
  }
  const float max_logit = logits[imax];
  const float log_sum_exp = static_cast<float>(LogSumExpShifted(logits, max_logit));
  const float scale = RecordFloat(record, 0);
  const float min_log_prob = RecordFloat(record, 1);
  std::span<const uint16_t> q = record.subspan(4);

  const float nll = max_logit + log_sum_exp - logits[token];
  sum_nll += nll;
  sum_nll2 += nll * nll;
  const float nll_base = -(scale * q[token] + min_log_prob);
  sum_nll_base += nll_base;
  sum_nll_base2 += nll_base * nll_base;
  sum_nll_nll_base += nll * nll_base;

  // KL(base || Q) = sum_i p_base(i) (log p_base(i) - log p_Q(i)), log p_Q(i) = l_i - log_z;
  // base log-probs at the clamp floor (<= -16) are left out, as llama.cpp does.
  const float log_z = max_logit + log_sum_exp;
  double kld = 0.0;
  size_t imax_base = 0;
  float log_p_base_max = 0.0f;
  for (size_t i = 0; i < n_vocab; ++i) {
    const float log_p_base = scale * q[i] + min_log_prob;
    if (i == 0 || log_p_base > log_p_base_max) {
      log_p_base_max = log_p_base;
      imax_base = i;
    }
    if (log_p_base > -kLogProbFloor) {
      kld += std::exp(log_p_base) * (log_p_base - logits[i] + log_z);
    }
  }
  sum_kld += kld;
  sum_kld2 += kld * kld;
  ++count;
  if (imax == imax_base) ++n_same_top;

  const float p_diff = std::exp(-nll) - std::exp(-nll_base);
  sum_p_diff += p_diff;
  const double p_diff2 = p_diff * p_diff;
  sum_p_diff2 += p_diff2;
  sum_p_diff4 += p_diff2 * p_diff2;
  max_p_diff = std::max(max_p_diff, std::fabs(p_diff));
  return {kld, p_diff};
}

std::string KlTableHeader() {
  return "chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence       "
         "       Δp RMS            Same top p\n";
}

std::string KlTableRow(int chunk, const KldStats& s) {
  std::string row = Printf("%4d", chunk);
  const MeanUnc log_ppl = MeanAndUncertainty(s.sum_nll, s.sum_nll2, s.count);
  const double ppl = std::exp(log_ppl.mean);
  row += Printf("    %9.4lf ± %9.4lf", ppl, ppl * log_ppl.unc);
  const MeanUnc log_ppl_base = MeanAndUncertainty(s.sum_nll_base, s.sum_nll_base2, s.count);
  const double cov = Covariance(s.sum_nll, s.sum_nll_base, s.sum_nll_nll_base, s.count);
  const double ratio = log_ppl.mean - log_ppl_base.mean;
  const double ratio_unc =
      std::sqrt(log_ppl.unc * log_ppl.unc + log_ppl_base.unc * log_ppl_base.unc - 2.0 * cov);
  row += Printf("    %10.5lf ± %10.5lf", ratio, ratio_unc);
  const MeanUnc kld = MeanAndUncertainty(s.sum_kld, s.sum_kld2, s.count);
  row += Printf("    %10.5lf ± %10.5lf", kld.mean, kld.unc);
  const MeanUnc mse = MeanAndUncertainty(s.sum_p_diff2, s.sum_p_diff4, s.count);
  const double rms = std::sqrt(mse.mean);
  row += Printf("    %6.3lf ± %6.3lf %%", 100.0 * rms, 100.0 * (0.5 / rms * mse.unc));
  const double top = 1.0 * s.n_same_top / s.count;
  row += Printf("    %6.3lf ± %6.3lf %%", 100.0 * top,
                100.0 * std::sqrt(top * (1 - top) / (s.count - 1)));
  return row + "\n";
}

std::string KlSummary(const KldStats& s, std::vector<float> kld_values,
                      std::vector<float> p_diff_values) {
  if (s.count < 100 || kld_values.empty() || p_diff_values.empty()) return "";
  std::sort(kld_values.begin(), kld_values.end());
  std::sort(p_diff_values.begin(), p_diff_values.end());
  std::string out = "====== Perplexity statistics ======\n";
  const MeanUnc log_ppl = MeanAndUncertainty(s.sum_nll, s.sum_nll2, s.count);
  const double ppl = std::exp(log_ppl.mean);
  const double ppl_unc = ppl * log_ppl.unc;
  out += Printf("Mean PPL(Q)                   : %10.6lf ± %10.6lf\n", ppl, ppl_unc);
  const MeanUnc log_ppl_base = MeanAndUncertainty(s.sum_nll_base, s.sum_nll_base2, s.count);
  const double ppl_base = std::exp(log_ppl_base.mean);
  const double ppl_base_unc = ppl_base * log_ppl_base.unc;
  out += Printf("Mean PPL(base)                : %10.6lf ± %10.6lf\n", ppl_base, ppl_base_unc);
  const double cov = Covariance(s.sum_nll, s.sum_nll_base, s.sum_nll_nll_base, s.count);
  out += Printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2lf%%\n",
                100.0 * cov / (log_ppl.unc * log_ppl_base.unc));
  const double ratio = log_ppl.mean - log_ppl_base.mean;
  const double ratio_unc =
      std::sqrt(log_ppl.unc * log_ppl.unc + log_ppl_base.unc * log_ppl_base.unc - 2.0 * cov);
  out += Printf("Mean ln(PPL(Q)/PPL(base))     : %10.6lf ± %10.6lf\n", ratio, ratio_unc);
  const double ppl_ratio = std::exp(ratio);
  out += Printf("Mean PPL(Q)/PPL(base)         : %10.6lf ± %10.6lf\n", ppl_ratio,
                ppl_ratio * ratio_unc);
  const double ppl_cov = ppl * ppl_base * cov;
  out += Printf("Mean PPL(Q)-PPL(base)         : %10.6lf ± %10.6lf\n", ppl - ppl_base,
                std::sqrt(ppl_unc * ppl_unc + ppl_base_unc * ppl_base_unc - 2.0 * ppl_cov));
  out += "\n";

  out += "====== KL divergence statistics ======\n";
  const MeanUnc kld = MeanAndUncertainty(s.sum_kld, s.sum_kld2, s.count);
  out += Printf("Mean    KLD: %10.6lf ± %10.6lf\n", kld.mean, kld.unc);
  const std::vector<float>& k = kld_values;
  out += Printf("Maximum KLD: %10.6f\n", k.back());
  out += Printf("99.9%%   KLD: %10.6f\n", Percentile(k, 0.999f));
  out += Printf("99.0%%   KLD: %10.6f\n", Percentile(k, 0.990f));
  out += Printf("95.0%%   KLD: %10.6f\n", Percentile(k, 0.950f));
  out += Printf("90.0%%   KLD: %10.6f\n", Percentile(k, 0.900f));
  out += Printf("Median  KLD: %10.6f\n", Median(k));
  out += Printf("10.0%%   KLD: %10.6f\n", Percentile(k, 0.100f));
  out += Printf(" 5.0%%   KLD: %10.6f\n", Percentile(k, 0.050f));
  out += Printf(" 1.0%%   KLD: %10.6f\n", Percentile(k, 0.010f));
  out += Printf(" 0.1%%   KLD: %10.6f\n", Percentile(k, 0.001f));
  out += Printf("Minimum KLD: %10.6f\n", k.front());
  out += "\n";

  out += "====== Token probability statistics ======\n";
  const MeanUnc p_diff = MeanAndUncertainty(s.sum_p_diff, s.sum_p_diff2, s.count);
  out += Printf("Mean    Δp: %6.3lf ± %5.3lf %%\n", 100.0 * p_diff.mean, 100.0 * p_diff.unc);
  const std::vector<float>& d = p_diff_values;
  out += Printf("Maximum Δp: %6.3lf%%\n", 100.0 * d.back());
  out += Printf("99.9%%   Δp: %6.3lf%%\n", 100.0 * Percentile(d, 0.999f));
  out += Printf("99.0%%   Δp: %6.3lf%%\n", 100.0 * Percentile(d, 0.990f));
  out += Printf("95.0%%   Δp: %6.3lf%%\n", 100.0 * Percentile(d, 0.950f));
  out += Printf("90.0%%   Δp: %6.3lf%%\n", 100.0 * Percentile(d, 0.900f));
  out += Printf("75.0%%   Δp: %6.3lf%%\n", 100.0 * Percentile(d, 0.750f));
  out += Printf("Median  Δp: %6.3lf%%\n", 100.0 * Median(d));
  out += Printf("25.0%%   Δp: %6.3lf%%\n", 100.0 * Percentile(d, 0.250f));
  out += Printf("10.0%%   Δp: %6.3lf%%\n", 100.0 * Percentile(d, 0.100f));
  out += Printf(" 5.0%%   Δp: %6.3lf%%\n", 100.0 * Percentile(d, 0.050f));
  out += Printf(" 1.0%%   Δp: %6.3lf%%\n", 100.0 * Percentile(d, 0.010f));
  out += Printf(" 0.1%%   Δp: %6.3lf%%\n", 100.0 * Percentile(d, 0.001f));
  out += Printf("Minimum Δp: %6.3lf%%\n", 100.0 * d.front());
  const MeanUnc mse = MeanAndUncertainty(s.sum_p_diff2, s.sum_p_diff4, s.count);
  const double rms = std::sqrt(mse.mean);
  out += Printf("RMS Δp    : %6.3lf ± %5.3lf %%\n", 100.0 * rms, 100.0 * (0.5 / rms * mse.unc));
  const double top = 1.0 * s.n_same_top / s.count;
  out += Printf("Same top p: %6.3lf ± %5.3lf %%\n", 100.0 * top,
                100.0 * std::sqrt(top * (1.0 - top) / (s.count - 1)));
  return out;
}

// ---- Chunk planning ----

Result<ChunkPlan> PlanChunks(size_t n_tokens, int32_t n_ctx, int32_t max_chunks) {
  if (n_ctx < 2) return InvalidArgument("the context size must be at least 2 (got -c {})", n_ctx);
  if (max_chunks == 0) return InvalidArgument("--chunks must be positive or -1 (all)");
  if (n_tokens < 2 * static_cast<size_t>(n_ctx)) {
    return InvalidArgument(
        "you need at least {} tokens to evaluate perplexity with a context of {}; the text "
        "tokenizes to only {} tokens",
        2 * static_cast<int64_t>(n_ctx), n_ctx, n_tokens);
  }
  ChunkPlan plan;
  plan.n_ctx = n_ctx;
  const size_t n_max = n_tokens / n_ctx;
  plan.n_chunk = static_cast<int32_t>(
      max_chunks < 0 ? n_max : std::min(n_max, static_cast<size_t>(max_chunks)));
  plan.first = n_ctx / 2;
  plan.n_scored = n_ctx - 1 - plan.first;
  return plan;
}

// ---- The base file ----

Result<KlBaseWriter> KlBaseWriter::Create(const std::string& path, int32_t n_ctx, int32_t n_vocab,
                                          int32_t n_chunk, std::span<const int32_t> tokens) {
  MT_CHECK(n_ctx >= 2 && n_vocab >= 1 && n_chunk >= 1);
  MT_CHECK(tokens.size() == static_cast<size_t>(n_ctx) * n_chunk);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f)
    return IoError("{}: cannot create the KL-divergence base file: {}", path, StrError(errno));
  const int64_t n_records = static_cast<int64_t>(n_chunk) * (n_ctx - 1 - n_ctx / 2);
  KlBaseWriter w(path, f, n_records, KlRecordWords(n_vocab));
  const int32_t header[3] = {n_ctx, n_vocab, n_chunk};
  if (std::fwrite(kMagic, 1, sizeof(kMagic), f) != sizeof(kMagic) ||
      std::fwrite(header, sizeof(int32_t), 3, f) != 3 ||
      std::fwrite(tokens.data(), sizeof(int32_t), tokens.size(), f) != tokens.size()) {
    return IoError("{}: write failed: {}", path, StrError(errno));
  }
  return w;
}

Status KlBaseWriter::Append(std::span<const uint16_t> record) {
  MT_CHECK(record.size() == record_words_);
  MT_CHECK_MSG(n_written_ < n_records_, "more records than the header promises");
  if (std::fwrite(record.data(), sizeof(uint16_t), record.size(), file_.get()) != record.size()) {
    return IoError("{}: write failed: {}", path_, StrError(errno));
  }
  ++n_written_;
  return Status::Ok();
}

Status KlBaseWriter::Finish() {
  MT_CHECK_MSG(n_written_ == n_records_, "fewer records than the header promises");
  std::FILE* f = file_.release();
  if (std::fflush(f) != 0 || std::ferror(f)) {
    std::fclose(f);
    return IoError("{}: write failed: {}", path_, StrError(errno));
  }
  if (std::fclose(f) != 0) return IoError("{}: close failed: {}", path_, StrError(errno));
  return Status::Ok();
}

Result<KlBaseReader> KlBaseReader::Open(const std::string& path) {
  KlBaseReader r;
  r.path_ = path;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    const int err = errno;
    if (err == ENOENT) return NotFound("{}: no such file", path);
    return IoError("{}: cannot open: {}", path, StrError(err));
  }
  r.file_.reset(f);
  struct stat st;
  if (fstat(fileno(f), &st) != 0) return IoError("{}: cannot stat: {}", path, StrError(errno));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < kHeaderBytes) {
    return Corrupt("{}: truncated: {} bytes, a KL-divergence base file has a {}-byte header", path,
                   size, kHeaderBytes);
  }
  char magic[sizeof(kMagic)];
  int32_t header[3];
  if (std::fread(magic, 1, sizeof(magic), f) != sizeof(magic) ||
      std::fread(header, sizeof(int32_t), 3, f) != 3) {
    return IoError("{}: read failed at offset 0", path);
  }
  if (std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) {
    return Corrupt("{}: offset 0: not a file of log-probabilities (no \"_logits_\" magic)", path);
  }
  r.n_ctx_ = header[0];
  r.n_vocab_ = header[1];
  r.n_chunk_ = header[2];
  if (r.n_ctx_ < 2) return Corrupt("{}: offset 8: n_ctx {} is below 2", path, r.n_ctx_);
  if (r.n_vocab_ < 1) return Corrupt("{}: offset 12: n_vocab {} is below 1", path, r.n_vocab_);
  if (r.n_chunk_ < 1) return Corrupt("{}: offset 16: n_chunk {} is below 1", path, r.n_chunk_);
  // Exact size implied by the header (128-bit: the product of three int32 can overflow).
  const unsigned __int128 n_tokens = static_cast<unsigned __int128>(r.n_ctx_) * r.n_chunk_;
  const unsigned __int128 n_records =
      static_cast<unsigned __int128>(r.n_chunk_) * (r.n_ctx_ - 1 - r.n_ctx_ / 2);
  const unsigned __int128 expected =
      kHeaderBytes + 4 * n_tokens + n_records * KlRecordWords(r.n_vocab_) * sizeof(uint16_t);
  if (expected != size) {
    const bool longer = size > expected;
    const uint64_t need = expected > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(expected);
    return Corrupt("{}: {}: {} bytes, but n_ctx {}, n_vocab {}, n_chunk {} need {} bytes", path,
                   longer ? "longer than its header says" : "truncated", size, r.n_ctx_, r.n_vocab_,
                   r.n_chunk_, need);
  }
  r.tokens_.resize(static_cast<size_t>(n_tokens));
  if (std::fread(r.tokens_.data(), sizeof(int32_t), r.tokens_.size(), f) != r.tokens_.size()) {
    return IoError("{}: read failed at offset {}", path, kHeaderBytes);
  }
  for (size_t i = 0; i < r.tokens_.size(); ++i) {
    if (r.tokens_[i] < 0 || r.tokens_[i] >= r.n_vocab_) {
      return Corrupt("{}: offset {}: token id {} is outside the vocabulary (n_vocab {})", path,
                     kHeaderBytes + 4 * i, r.tokens_[i], r.n_vocab_);
    }
  }
  r.offset_ = kHeaderBytes + 4 * r.tokens_.size();
  return r;
}

Status KlBaseReader::CheckCompatible(int32_t model_n_vocab, int32_t max_n_ctx) const {
  if (n_vocab_ != model_n_vocab) {
    return InvalidArgument("{}: inconsistent vocabulary: the file has n_vocab {}, the model {}",
                           path_, n_vocab_, model_n_vocab);
  }
  if (n_ctx_ > max_n_ctx) {
    return InvalidArgument(
        "{}: has been computed with n_ctx {}, while the current context is {}; increase it "
        "with -c and retry",
        path_, n_ctx_, max_n_ctx);
  }
  return Status::Ok();
}

Status KlBaseReader::ReadRecord(std::span<uint16_t> record) {
  MT_CHECK(record.size() == KlRecordWords(n_vocab_));
  if (std::fread(record.data(), sizeof(uint16_t), record.size(), file_.get()) != record.size()) {
    return IoError("{}: offset {}: failed reading log-probs", path_, offset_);
  }
  offset_ += record.size() * sizeof(uint16_t);
  return Status::Ok();
}

}  // namespace mt
