// libFuzzer target for the expert layout of a GGUF (model/expert_layout_gguf.h), above all
// the metadata of an expert-major pack: moetier.expert_layout, moetier.expert_checksums,
// moetier.expert_weights and the per-expert tensors that make up each record. Any bytes that the
// GGUF reader accepts give a layout or a one-line error, never a crash; a layout's every extent and
// record lies inside the file, and each record is hashed whole, so ASan checks the bounds it
// promised.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "experts/record_checksum.h"
#include "gguf/gguf.h"
#include "kernels/panel_layout.h"
#include "model/expert_layout_gguf.h"
#include "model/tensor_names.h"

namespace {

volatile uint64_t g_sink = 0;

void Fail(const char* what) {
  std::fprintf(stderr, "pack_layout_fuzz: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string kName = "fuzz.gguf";
  mt::Result<mt::GgufModel> m = mt::GgufModel::Parse(std::span<const uint8_t>(data, size), kName);
  if (!m.ok()) return 0;  // the reader's own target covers this
  // The layer count the hyperparameters would give: one past the highest blk.N; a layer has
  // experts when some tensor of it is named as a routed expert's (so layers without any,
  // as DeepSeek's leading dense ones, are covered too).
  int n_layer = 0;
  for (const mt::GgufTensor& t : m->tensors()) {
    n_layer = std::max(n_layer, mt::LayerOfTensorName(t.name) + 1);
  }
  if (n_layer > 4096) return 0;
  std::vector<bool> has_experts(static_cast<size_t>(n_layer), false);
  for (const mt::GgufTensor& t : m->tensors()) {
    const int il = mt::LayerOfTensorName(t.name);
    if (il >= 0 && mt::IsRoutedExpertTensorName(t.name)) has_experts[il] = true;
  }
  mt::Result<mt::ExpertLayout> layout = mt::ExpertLayoutFromGguf(m.value(), has_experts);
  if (!layout.ok()) {
    const std::string& msg = layout.status().message();
    if (msg.empty() || msg.find('\n') != std::string::npos) Fail("error is not one line");
    return 0;
  }
  const mt::ExpertLayout& l = layout.value();
  if (l.n_layer() != static_cast<uint32_t>(n_layer) || l.files().size() != 1) Fail("shape");
  uint64_t sum = 0;
  for (uint32_t il = 0; il < l.n_layer(); ++il) {
    if (l.has_experts(il) != has_experts[il]) Fail("layers with experts");
    for (uint32_t e = 0; e < l.n_expert() && l.has_experts(il); ++e) {
      for (int p = 0; p < mt::kNumExpertParts; ++p) {
        const auto part = static_cast<mt::ExpertPart>(p);
        const mt::ByteExtent x = l.extent(il, e, part);
        if (x.file != 0 || x.length == 0 || x.offset + x.length > size) Fail("part extent");
        if (l.mapped(il, e, part) != data + x.offset) Fail("part mapping");
        sum += data[x.offset] + data[x.offset + x.length - 1];
      }
      if (!l.has_records()) continue;
      const mt::ByteExtent r = l.record_extent(il, e);
      if (r.offset % mt::kPackAlignment != 0 || r.offset + r.length > size) Fail("record extent");
      sum += mt::RecordChecksum(l.record(il, e).mapped, r.length) == l.record(il, e).checksum;
    }
  }
  // A panels pack's parts turn back into rows within their own bytes (ASan checks it).
  if (l.weight_layout() == mt::WeightLayout::kPanels && l.n_expert() > 0) {
    for (uint32_t il = 0; il < l.n_layer(); ++il) {
      if (!l.has_experts(il)) continue;
      const mt::ExpertMatrices m = l.Matrices(il, l.mapped(il, 0, mt::kGate),
                                              l.mapped(il, 0, mt::kUp), l.mapped(il, 0, mt::kDown));
      for (const mt::WeightMatrix* w : {&m.gate, &m.up, &m.down}) {
        if (w->layout != mt::WeightLayout::kPanels) continue;
        std::vector<uint8_t> rows(w->data, w->data + w->row_bytes * w->rows);
        mt::PanelsToRows(w->type, w->rows, w->cols, rows.data(), rows.data());
        sum += rows.front();
      }
    }
  }
  g_sink = sum;
  return 0;
}
