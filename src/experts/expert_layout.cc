#include "experts/expert_layout.h"


namespace mt {

ByteExtent ExpertLayout::extent(uint32_t layer, uint32_t expert, ExpertPart part) const {
  const ExpertPartTensor& pt = parts_[layer][part];
  return {pt.file, pt.offset + uint64_t{expert} * pt.expert_bytes, pt.expert_bytes};
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
  return m;
}

}  // namespace mt
