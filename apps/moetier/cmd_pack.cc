// moetier pack IN.gguf -o OUT.gguf [--split-max-size SIZE] [--rows] [-q]: rewrite a MoE GGUF
//   as an expert-major pack (one aligned, checksummed record per expert, K-quants as 16-row
//   panels unless --rows; model/expert_layout_gguf.h).
// moetier pack --verify FILE: recompute every record's checksum; mismatches name the layer
//   and expert, and exit 1.
#include <unistd.h>

#include "base/units.h"
#include "command.h"
#include "pack/pack.h"

namespace mt::cli {
namespace {

struct PackFlags {
  std::string input;
  std::string output;
  std::string split_max_size;
  std::string verify;
  bool rows = false;
  bool quiet = false;
};

// Errors about the files (not the flags) exit 1 whatever their code.
int FileError(const Status& s) {
  ReportError(s);
  return kExitError;
}

int Verify(const PackFlags& f) {
  Result<VerifyResult> r = VerifyPack(f.verify, !f.quiet && isatty(STDERR_FILENO));
  if (!r.ok()) return FileError(r.status());
  const std::vector<RecordCheck> bad = r->Mismatches();
  for (const RecordCheck& c : bad) {
    fmt::print(
        "layer {} expert {}: checksum mismatch: {} offset {} ({} bytes): expected {:016x}, "
        "found {:016x}\n",
        c.layer, c.expert, c.file, c.offset, c.length, c.expected, c.actual);
  }
  if (!bad.empty()) {
    return FileError(
        Corrupt("{}: {} of {} expert records do not match their checksums (first: "
                "layer {} expert {})",
                f.verify, bad.size(), r->records.size(), bad.front().layer, bad.front().expert));
  }
  fmt::print("ok: {}: {} expert records ({} layers x {} experts, {}) match their checksums\n",
             f.verify, r->records.size(), r->n_layer, r->n_expert, HumanBytes(r->bytes));
  return kExitOk;
}

int Pack(const PackFlags& f) {
  PackOptions o;
  if (!f.split_max_size.empty()) {
    Result<uint64_t> size = ParseBytes(f.split_max_size);
    if (!size.ok()) return ReportError(size.status().WithContext("--split-max-size"));
    if (size.value() == 0) return ReportError(InvalidArgument("--split-max-size must be above 0"));
    if (!f.output.ends_with(".gguf")) {
      return ReportError(InvalidArgument("a split set's output must end in .gguf: {}", f.output));
    }
    o.split_max_bytes = size.value();
  }
  o.show_progress = !f.quiet && isatty(STDERR_FILENO);
  o.weights = f.rows ? WeightLayout::kRows : WeightLayout::kPanels;
  Result<PackResult> r = PackModel(f.input, f.output, o);
  if (!r.ok()) return FileError(r.status());
  fmt::print("wrote {} ({} file{}, {})\n", r->paths.front(), r->paths.size(),
             r->paths.size() == 1 ? "" : "s", HumanBytes(r->file_bytes));
  fmt::print(
      "  {} layers x {} experts: one record each, {}-aligned, xxh3-64 checksums; "
      "records up to {}; experts {}, K-quants as {}\n",
      r->n_layer, r->n_expert, HumanBytes(4096), HumanBytes(r->max_record_bytes),
      HumanBytes(r->expert_bytes), f.rows ? "GGUF rows" : "16-row panels");
  fmt::print("  {} dense tensors copied unchanged\n", r->n_dense_tensors);
  return kExitOk;
}

}  // namespace

CommandMain SetupPack(CLI::App& sub) {
  auto flags = std::make_shared<PackFlags>();
  sub.add_option("input", flags->input, "GGUF model (or the first shard of a split set)");
  sub.add_option("-o,--output", flags->output, "Output pack (.gguf)");
  sub.add_option("--split-max-size", flags->split_max_size,
                 "Write a split set with shards of at most SIZE (e.g. 2G); records stay whole");
  sub.add_option("--verify", flags->verify,
                 "Check every expert record of the pack FILE against its checksum")
      ->type_name("FILE");
  sub.add_flag("--rows", flags->rows,
               "Store expert weights as GGUF rows, not as the 16-row panels the AVX-512 kernels "
               "read (for mmap mode on CPUs without AVX-512)");
  sub.add_flag("-q,--quiet", flags->quiet, "No progress line");
  return [flags]() {
    const PackFlags& f = *flags;
    if (!f.verify.empty()) {
      if (!f.input.empty() || !f.output.empty() || !f.split_max_size.empty() || f.rows) {
        return ReportError(
            InvalidArgument("--verify takes only the pack: moetier pack --verify "
                            "FILE"));
      }
      return Verify(f);
    }
    if (f.input.empty() || f.output.empty()) {
      return ReportError(
          InvalidArgument("usage: moetier pack IN.gguf -o OUT.gguf, or moetier "
                          "pack --verify FILE"));
    }
    return Pack(f);
  };
}

}  // namespace mt::cli
