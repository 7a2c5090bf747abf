// Expert-major packs: `moetier pack` rewrites a MoE GGUF so that each routed expert is one
// contiguous, 4 KiB-aligned, checksummed record (gate | up | down), the unit the stream
// tier reads with one request. The format is defined in model/expert_layout_gguf.h; the
// engine loads a pack in every storage mode exactly as the original (bit-identical logits).
//
// Kernel layout: by default the parts that have a 16-row panel form (Q4_K, Q5_K, Q6_K;
// kernels/panel_layout.h) are stored as panels, the form the AVX-512 kernels read, so one
// file is the mmap arena, the O_DIRECT read unit and the kernels' input, and loading repacks
// nothing. Other CPUs turn them back into rows as they load (resident, stream); mmap mode
// there needs a pack written with rows (PackOptions::weights, `moetier pack --rows`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "experts/expert_layout.h"

namespace mt {

struct PackOptions {
  uint64_t split_max_bytes = 0;  // > 0: a split set OUT-0000K-of-0000N.gguf; records stay whole
  bool show_progress = false;    // a progress line on stderr (for terminals)
  // How to store the parts that have a panel form: kPanels (default) or GGUF kRows. The
  // input may hold either (a pack); parts are converted as needed.
  WeightLayout weights = WeightLayout::kPanels;
};

struct PackResult {
  std::vector<std::string> paths;  // the written file(s)
  uint64_t file_bytes = 0;         // their total size
  uint32_t n_layer = 0;
  uint32_t n_expert = 0;
  uint64_t n_dense_tensors = 0;   // copied unchanged
  uint64_t expert_bytes = 0;      // payload of all records (parts, no padding)
  uint64_t max_record_bytes = 0;  // the longest record (padding between parts included)
};

// The record shape a pack gives experts of `spec`: gate at 0, up and down each at the next
// 4096 multiple after the part before; length ends at the down part's last byte.
RecordShape PackRecordShape(const ExpertSpec& spec);

// Packs the GGUF (or split set) at `input`, which may be tensor-major or already a pack, into
// `output`. Reads the expert bytes twice (checksums go in the header, before the data), with
// bounded memory: the input is mapped read-only and the writer streams through a fixed
// buffer. Atomic: the output appears only complete (GgufWriter's temp file, fsync, rename).
// Errors name the file and the tensor or key: an input that is not a MoE model moetier can
// lay out, unwritable output, or an input whose expert bytes changed while it was read.
Result<PackResult> PackModel(const std::string& input, const std::string& output,
                             const PackOptions& options);

// One record's verification.
struct RecordCheck {
  uint32_t layer = 0;
  uint32_t expert = 0;
  std::string file;       // the shard holding the record
  uint64_t offset = 0;    // absolute byte offset of the record in `file`
  uint64_t length = 0;    // record bytes hashed
  uint64_t expected = 0;  // from moetier.expert_checksums
  uint64_t actual = 0;    // RecordChecksum of the bytes now in the file

  bool ok() const { return expected == actual; }
};

struct VerifyResult {
  std::vector<std::string> files;
  uint32_t n_layer = 0;
  uint32_t n_expert = 0;
  uint64_t bytes = 0;                // record bytes read
  std::vector<RecordCheck> records;  // (n_layer * n_expert) layer-major

  std::vector<RecordCheck> Mismatches() const;
};

// Recomputes the checksum of every expert record of the pack at `path` (the first shard of
// a set). A mismatch is a result, not an error; errors are a file that cannot be opened, is
// not a pack (no moetier.expert_layout), or is malformed or truncated (naming the tensor,
// key, layer and expert). Dense tensors carry no checksum and are not read.
Result<VerifyResult> VerifyPack(const std::string& path, bool show_progress = false);

}  // namespace mt
