#include "pack/pack.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <unordered_set>

#include "experts/record_checksum.h"
#include "gguf/gguf.h"
#include "kernels/panel_layout.h"
#include "model/arch.h"
#include "model/expert_layout_gguf.h"
#include "model/hparams.h"
#include "model/tensor_names.h"

namespace mt {
namespace {

namespace fs = std::filesystem;

constexpr TensorRole kStacked[3] = {TensorRole::kFfnGateExps, TensorRole::kFfnUpExps,
                                    TensorRole::kFfnDownExps};
constexpr uint64_t kChunkBytes = uint64_t{64} << 20;  // dense tensors are written in chunks

uint64_t AlignUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// A progress line on stderr, refreshed at most twice a second.
class ProgressLine {
 public:
  ProgressLine(bool enabled, const char* what, uint64_t total)
      : enabled_(enabled), what_(what), total_(total) {}
  void Add(uint64_t bytes) {
    done_ += bytes;
    const auto now = std::chrono::steady_clock::now();
    if (!enabled_ || (now - last_ < std::chrono::milliseconds(500) && done_ < total_)) return;
    last_ = now;
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double rate = secs > 0 ? done_ / secs : 0;
    const double eta = rate > 0 ? (total_ - done_) / rate : 0;
    std::fprintf(stderr, "\r%s: %5.1f%%  %.2f / %.2f GB  %.0f MB/s  ETA %.0f s   ", what_,
                 100.0 * done_ / std::max<uint64_t>(total_, 1), done_ / 1e9, total_ / 1e9,
                 rate / 1e6, eta);
    if (done_ >= total_) std::fputc('\n', stderr);
  }

 private:
  bool enabled_;
  const char* what_;
  uint64_t total_;
  uint64_t done_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_{};
};

uint64_t PartBytes(const ExpertSpec& s, int part) {
  return part == kGate ? s.gate_bytes() : part == kUp ? s.up_bytes() : s.down_bytes();
}

// The bytes part p of expert (il, e) of `in` has in the output: the input's, turned into
// `weights` (through `buffer`) where the part has a panel form stored the other way.
std::span<const uint8_t> OutputPart(const ExpertLayout& in, uint32_t il, uint32_t e, int p,
                                    WeightLayout weights, std::vector<uint8_t>& buffer) {
  const uint8_t* src = in.mapped(il, e, static_cast<ExpertPart>(p));
  const uint64_t n = PartBytes(in.spec(il), p);
  const ExpertMatrices m = in.Matrices(il, src, src, src);
  const WeightMatrix& w = p == kGate ? m.gate : p == kUp ? m.up : m.down;
  if (!HasPanelForm(w.type, w.rows) || w.layout == weights) return {src, n};
  buffer.resize(n);
  if (weights == WeightLayout::kPanels) {
    RowsToPanels(w.type, w.rows, w.cols, src, buffer.data());
  } else {
    PanelsToRows(w.type, w.rows, w.cols, src, buffer.data());
  }
  return buffer;
}

// Hashes (and with `writer`, writes) expert (il, e) of `in` as the record of `shape` it
// becomes: its output parts with zeros in between, never assembled. Returns the checksum.
Result<uint64_t> EmitRecord(const ExpertLayout& in, uint32_t il, uint32_t e,
                            const RecordShape& shape, WeightLayout weights, RecordHasher& h,
                            std::vector<uint8_t>& buffer, GgufWriter* writer) {
  h.Reset();
  uint64_t at = 0;
  for (int p = 0; p < kNumExpertParts; ++p) {
    const std::span<const uint8_t> bytes = OutputPart(in, il, e, p, weights, buffer);
    h.UpdateZeros(shape.part_offset[p] - at);
    h.Update(bytes);
    if (writer != nullptr) MT_RETURN_IF_ERROR(writer->Write(bytes));
    at = shape.part_offset[p] + bytes.size();
  }
  return h.Digest();
}

// The names of the tensors that hold `layout`'s experts in `model`.
std::unordered_set<std::string> ExpertTensorNames(const ExpertLayout& layout) {
  std::unordered_set<std::string> names;
  for (uint32_t il = 0; il < layout.n_layer(); ++il) {
    if (!layout.has_experts(il)) continue;
    for (int p = 0; p < kNumExpertParts; ++p) {
      if (!layout.has_records()) {
        names.insert(TensorName(kStacked[p], static_cast<int>(il)));
        continue;
      }
      for (uint32_t e = 0; e < layout.n_expert(); ++e) {
        names.insert(PerExpertTensorName(kStacked[p], static_cast<int>(il), static_cast<int>(e)));
      }
    }
  }
  return names;
}

struct OpenedModel {
  GgufModel gguf;
  ExpertLayout layout;
};

// Opens a GGUF and builds its expert layout (either kind, or a pack only).
Result<OpenedModel> OpenModel(const std::string& path, bool require_pack) {
  GgufModel gguf = MT_TRY(GgufModel::Open(path));
  if (require_pack && !IsExpertMajorPack(gguf.metadata())) {
    return NotFound("{}: not an expert-major pack (no key {}); make one with moetier pack", path,
                    kKeyExpertLayout);
  }
  Result<HParams> hp = ReadHParams(gguf.metadata());
  if (!hp.ok()) return hp.status().WithContext(path);
  Result<ExpertLayout> layout = ExpertLayoutFromGguf(gguf, ExpertLayers(DescribeModel(hp.value())));
  if (!layout.ok()) return layout.status().WithContext(path);
  return OpenedModel{std::move(gguf), std::move(layout.value())};
}

// An error if one of `outputs` is one of the input's files: the rename at the end would
// replace the model being packed (the same file by another name included).
Status CheckNotInput(const GgufModel& in, const std::vector<std::string>& outputs) {
  for (const std::string& out : outputs) {
    for (const GgufShard& shard : in.shards()) {
      std::error_code ec;
      if (std::filesystem::equivalent(out, shard.path, ec)) {
        return InvalidArgument(
            "{}: the output is the input model {}; write the pack to another "
            "path",
            out, shard.path);
      }
    }
  }
  return Status::Ok();
}

}  // namespace

RecordShape PackRecordShape(const ExpertSpec& spec) {
  RecordShape shape;
  uint64_t at = 0;
  for (int p = 0; p < kNumExpertParts; ++p) {
    shape.part_offset[p] = AlignUp(at, kPackAlignment);
    at = shape.part_offset[p] + PartBytes(spec, p);
  }
  shape.length = at;
  return shape;
}

Result<PackResult> PackModel(const std::string& input, const std::string& output,
                             const PackOptions& options) {
  OpenedModel opened = MT_TRY(OpenModel(input, /*require_pack=*/false));
  const GgufModel& in = opened.gguf;
  MT_RETURN_IF_ERROR(CheckNotInput(in, {output}));
  const ExpertLayout& layout = opened.layout;
  const uint32_t n_layer = layout.n_layer(), n_expert = layout.n_expert();

  PackResult result;
  result.n_layer = n_layer;
  result.n_expert = n_expert;
  result.expert_bytes = layout.total_bytes();
  std::vector<RecordShape> shapes(n_layer);
  for (uint32_t il = 0; il < n_layer; ++il) {
    shapes[il] = PackRecordShape(layout.spec(il));
    result.max_record_bytes = std::max(result.max_record_bytes, shapes[il].length);
  }

  // Pass 1: the checksums, which the header carries before any data.
  RecordHasher hasher;
  std::vector<uint8_t> part_buffer;  // one converted part (bounded memory)
  std::vector<GgufValue> sums;
  sums.reserve(uint64_t{n_layer} * n_expert);
  {
    ProgressLine progress(options.show_progress, "pack: checksums", result.expert_bytes);
    for (uint32_t il = 0; il < n_layer; ++il) {
      for (uint32_t e = 0; e < n_expert; ++e) {
        if (!layout.has_experts(il)) {
          sums.push_back(GgufValue::Uint64(0));  // a layer without experts has no records
          continue;
        }
        uint64_t sum = MT_TRY(
            EmitRecord(layout, il, e, shapes[il], options.weights, hasher, part_buffer, nullptr));
        sums.push_back(GgufValue::Uint64(sum));
        progress.Add(layout.spec(il).bytes());
      }
    }
  }

  GgufWriterOptions wo;
  wo.alignment = kPackAlignment;
  wo.split_max_bytes = options.split_max_bytes;
  GgufWriter writer(output, wo);
  GgufMetadata& md = writer.metadata();
  for (const GgufMetadata::Entry& entry : in.metadata().entries()) {
    md.AppendNew(entry.key, entry.value);  // split.* keys are the writer's to set
  }
  md.Set("general.alignment", GgufValue::Uint32(kPackAlignment));
  md.Set(std::string(kKeyExpertLayout), GgufValue::String(std::string(kExpertMajor)));
  md.Set(std::string(kKeyExpertChecksums), GgufValue::Array(GgufType::kUint64, std::move(sums)));
  md.Set(std::string(kKeyExpertWeights),
         GgufValue::String(std::string(options.weights == WeightLayout::kPanels ? kWeightsPanels
                                                                                : kWeightsRows)));

  // Dense tensors first, in file order and unchanged; then the records.
  const std::unordered_set<std::string> expert_names = ExpertTensorNames(layout);
  std::vector<const GgufTensor*> dense;
  uint64_t dense_bytes = 0;
  for (const GgufTensor& t : in.tensors()) {
    if (expert_names.count(t.name)) continue;
    dense.push_back(&t);
    dense_bytes += t.n_bytes;
    MT_RETURN_IF_ERROR(writer.AddTensor(t.name, t.type, t.shape));
  }
  result.n_dense_tensors = dense.size();
  for (uint32_t il = 0; il < n_layer; ++il) {
    if (!layout.has_experts(il)) continue;
    const ExpertSpec& s = layout.spec(il);
    const std::vector<uint64_t> shape[3] = {
        {s.n_embd, s.n_ff}, {s.n_embd, s.n_ff}, {s.n_ff, s.n_embd}};
    const GgmlType type[3] = {s.gate_type, s.up_type, s.down_type};
    for (uint32_t e = 0; e < n_expert; ++e) {
      for (int p = 0; p < kNumExpertParts; ++p) {
        // up and down stay in the gate's shard: a record is never split.
        MT_RETURN_IF_ERROR(writer.AddTensor(
            PerExpertTensorName(kStacked[p], static_cast<int>(il), static_cast<int>(e)), type[p],
            shape[p], /*keep_with_previous=*/p > 0));
      }
    }
  }
  MT_RETURN_IF_ERROR(writer.Begin());
  MT_RETURN_IF_ERROR(CheckNotInput(in, writer.output_paths()));  // a split set's shard names

  // Pass 2: the data. Each record is hashed again as it is written, so the file's bytes are
  // the ones its checksums describe even if the input changed between the passes (else the
  // output never appears).
  ProgressLine progress(options.show_progress, "pack: writing", dense_bytes + result.expert_bytes);
  for (const GgufTensor* t : dense) {
    for (uint64_t off = 0; off < t->n_bytes; off += kChunkBytes) {
      const uint64_t n = std::min(kChunkBytes, t->n_bytes - off);
      MT_RETURN_IF_ERROR(writer.Write({t->data + off, n}));
      progress.Add(n);
    }
  }
  const GgufArray& written_sums = *md.FindArray(kKeyExpertChecksums);
  for (uint32_t il = 0; il < n_layer; ++il) {
    for (uint32_t e = 0; e < n_expert && layout.has_experts(il); ++e) {
      uint64_t sum = MT_TRY(
          EmitRecord(layout, il, e, shapes[il], options.weights, hasher, part_buffer, &writer));
      if (sum != *written_sums.items[uint64_t{il} * n_expert + e].AsUint()) {
        return IoError("{}: layer {} expert {} changed while it was being packed", input, il, e);
      }
      progress.Add(layout.spec(il).bytes());
    }
  }
  MT_RETURN_IF_ERROR(writer.Finish());
  result.paths = writer.output_paths();
  std::error_code ec;
  for (const std::string& p : result.paths) result.file_bytes += fs::file_size(p, ec);
  return result;
}

std::vector<RecordCheck> VerifyResult::Mismatches() const {
  std::vector<RecordCheck> bad;
  for (const RecordCheck& r : records) {
    if (!r.ok()) bad.push_back(r);
  }
  return bad;
}

Result<VerifyResult> VerifyPack(const std::string& path, bool show_progress) {
  OpenedModel opened = MT_TRY(OpenModel(path, /*require_pack=*/true));
  const ExpertLayout& layout = opened.layout;
  VerifyResult result;
  result.files = layout.files();
  result.n_layer = layout.n_layer();
  result.n_expert = layout.n_expert();
  uint64_t total = 0;
  for (uint32_t il = 0; il < layout.n_layer(); ++il) {
    total += layout.record_shape(il).length * layout.n_expert();  // 0 without experts
  }
  ProgressLine progress(show_progress, "verify", total);
  result.records.reserve(uint64_t{layout.n_layer()} * layout.n_expert());
  for (uint32_t il = 0; il < layout.n_layer(); ++il) {
    for (uint32_t e = 0; e < layout.n_expert() && layout.has_experts(il); ++e) {
      const ExpertRecord& rec = layout.record(il, e);
      const uint64_t length = layout.record_shape(il).length;
      result.records.push_back({il, e, layout.files()[rec.file], rec.offset, length, rec.checksum,
                                RecordChecksum(rec.mapped, length)});
      result.bytes += length;
      progress.Add(length);
    }
  }
  return result;
}

}  // namespace mt
