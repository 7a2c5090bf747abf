#include "experts/expert_layout.h"

#include <algorithm>

#include "base/check.h"
#include "experts/record_checksum.h"
#include "kernels/panel_layout.h"

namespace mt {
namespace {

uint64_t PartBytes(const ExpertSpec& s, ExpertPart part) {
  switch (part) {
    case kGate:
      return s.gate_bytes();
    case kUp:
      return s.up_bytes();
    default:
      return s.down_bytes();
  }
}

}  // namespace

void ExpertLayout::AddLayer(const ExpertSpec& spec, const std::array<ExpertPartTensor, 3>& parts) {
  MT_CHECK(kind_ == Kind::kTensorMajor && spec.n_ff > 0);
  specs_.push_back(spec);
  parts_.push_back(parts);
}

void ExpertLayout::AddEmptyLayer() {
  specs_.push_back(ExpertSpec{});
  if (kind_ == Kind::kTensorMajor) {
    parts_.push_back({});
  } else {
    record_shapes_.push_back({});
    records_.push_back({});
  }
}

uint32_t ExpertLayout::n_expert_layers() const {
  uint32_t n = 0;
  for (uint32_t il = 0; il < n_layer(); ++il) n += has_experts(il);
  return n;
}

void ExpertLayout::AddRecordLayer(const ExpertSpec& spec, const RecordShape& shape,
                                  std::vector<ExpertRecord> records) {
  MT_CHECK(kind_ == Kind::kRecords && records.size() == n_expert_ && spec.n_ff > 0);
  for (int p = 0; p < kNumExpertParts; ++p) {
    MT_CHECK(shape.part_offset[p] + PartBytes(spec, static_cast<ExpertPart>(p)) <= shape.length);
  }
  specs_.push_back(spec);
  record_shapes_.push_back(shape);
  records_.push_back(std::move(records));
}

ByteExtent ExpertLayout::extent(uint32_t layer, uint32_t expert, ExpertPart part) const {
  if (has_records()) {
    const ExpertRecord& r = records_[layer][expert];
    return {r.file, r.offset + record_shapes_[layer].part_offset[part],
            PartBytes(specs_[layer], part)};
  }
  const ExpertPartTensor& pt = parts_[layer][part];
  return {pt.file, pt.offset + uint64_t{expert} * pt.expert_bytes, pt.expert_bytes};
}

const uint8_t* ExpertLayout::mapped(uint32_t layer, uint32_t expert, ExpertPart part) const {
  if (has_records()) {
    return records_[layer][expert].mapped + record_shapes_[layer].part_offset[part];
  }
  const ExpertPartTensor& pt = parts_[layer][part];
  return pt.mapped + uint64_t{expert} * pt.expert_bytes;
}

const RecordShape& ExpertLayout::record_shape(uint32_t layer) const {
  MT_CHECK(has_records());
  return record_shapes_[layer];
}

const ExpertRecord& ExpertLayout::record(uint32_t layer, uint32_t expert) const {
  MT_CHECK(has_records());
  return records_[layer][expert];
}

ByteExtent ExpertLayout::record_extent(uint32_t layer, uint32_t expert) const {
  const ExpertRecord& r = record(layer, expert);
  return {r.file, r.offset, record_shapes_[layer].length};
}

Status ExpertLayout::CheckRecordSum(uint32_t layer, uint32_t expert, uint64_t sum) const {
  const ExpertRecord& r = record(layer, expert);
  if (sum == r.checksum) return Status::Ok();
  return Corrupt(
      "{}: layer {} expert {}: the record at offset {} ({} bytes) fails its checksum "
      "(xxh3 {:016x}, expected {:016x}); run moetier pack --verify",
      files_[r.file], layer, expert, r.offset, record_shapes_[layer].length, sum, r.checksum);
}

Status ExpertLayout::CheckMappedRecord(uint32_t layer, uint32_t expert) const {
  return CheckRecordSum(layer, expert,
                        RecordChecksum(record(layer, expert).mapped, record_shapes_[layer].length));
}

uint64_t ExpertLayout::max_record_bytes() const {
  uint64_t m = 0;
  for (const RecordShape& s : record_shapes_) m = std::max(m, s.length);
  return m;
}

std::vector<std::span<const uint8_t>> ExpertLayout::MappedRanges() const {
  std::vector<std::span<const uint8_t>> ranges;
  for (uint32_t il = 0; il < n_layer(); ++il) {
    if (!has_experts(il)) continue;
    if (has_records()) {
      for (const ExpertRecord& r : records_[il]) {
        ranges.emplace_back(r.mapped, record_shapes_[il].length);
      }
    } else {
      for (const ExpertPartTensor& pt : parts_[il]) {
        ranges.emplace_back(pt.mapped, pt.expert_bytes * n_expert_);
      }
    }
  }
  return ranges;
}

uint64_t ExpertLayout::max_expert_bytes() const {
  uint64_t m = 0;
  for (const ExpertSpec& s : specs_) m = std::max(m, s.bytes());
  return m;
}

uint64_t ExpertLayout::total_bytes() const {
  uint64_t t = 0;
  for (const ExpertSpec& s : specs_) t += s.bytes() * n_expert_;
  return t;
}

ExpertMatrices ExpertLayout::Matrices(uint32_t layer, const uint8_t* gate, const uint8_t* up,
                                      const uint8_t* down) const {
  const ExpertSpec& s = specs_[layer];
  ExpertMatrices m;
  m.gate = {s.gate_type, gate, s.n_ff, s.n_embd, RowBytes(s.gate_type, s.n_embd)};
  m.up = {s.up_type, up, s.n_ff, s.n_embd, RowBytes(s.up_type, s.n_embd)};
  m.down = {s.down_type, down, s.n_embd, s.n_ff, RowBytes(s.down_type, s.n_ff)};
  if (weight_layout_ == WeightLayout::kPanels) {
    for (WeightMatrix* w : {&m.gate, &m.up, &m.down}) {
      if (HasPanelForm(w->type, w->rows)) w->layout = WeightLayout::kPanels;
    }
  }
  return m;
}

}  // namespace mt
