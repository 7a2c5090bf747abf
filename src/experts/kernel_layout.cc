#include "experts/kernel_layout.h"

#include "kernels/matmul.h"

namespace mt {

namespace {

// What CopyForKernels made of w.
void MarkPanels(WeightMatrix& w) {
  w.layout = PanelsPreferred(w.type, w.rows) ? WeightLayout::kPanels : WeightLayout::kRows;
}

}  // namespace

ExpertMatrices RepackedMatrices(const ExpertLayout& layout, uint32_t layer, const uint8_t* gate,
                                const uint8_t* up, const uint8_t* down) {
  ExpertMatrices m = layout.Matrices(layer, gate, up, down);
  MarkPanels(m.gate);
  MarkPanels(m.up);
  MarkPanels(m.down);
  return m;
}

void RepackExpert(const ExpertLayout& layout, uint32_t layer, uint8_t* gate, uint8_t* up,
                  uint8_t* down) {
  const ExpertMatrices m = layout.Matrices(layer, gate, up, down);
  for (auto [w, data] : {std::pair{&m.gate, gate}, {&m.up, up}, {&m.down, down}}) {
    CopyForKernels(*w, data);  // in place
  }
}

bool InKernelLayout(const ExpertLayout& layout, uint32_t layer) {
  const ExpertMatrices m = layout.Matrices(layer, nullptr, nullptr, nullptr);
  const ExpertMatrices r = RepackedMatrices(layout, layer, nullptr, nullptr, nullptr);
  return m.gate.layout == r.gate.layout && m.up.layout == r.up.layout &&
         m.down.layout == r.down.layout;
}

}  // namespace mt
