// Experts in the layout the kernels read fastest (kernels/matmul.h, WeightLayout). The
// numbers are the same in either layout, bit for bit; only the byte order differs. The
// in-memory tiers (resident copies, stream cache slots) repack an expert once, as it
// arrives, from whatever the file holds (GGUF rows, or a pack's panels); mmap mode computes
// from the file's bytes as they are.
#pragma once

#include <cstdint>

#include "experts/expert_layout.h"

namespace mt {

// The matrices of an expert whose parts at gate/up/down went through RepackExpert: those
// the kernels prefer as kPanels (PanelsPreferred) say so, the others are GGUF rows.
ExpertMatrices RepackedMatrices(const ExpertLayout& layout, uint32_t layer, const uint8_t* gate,
                                const uint8_t* up, const uint8_t* down);

// Rewrites in place the parts of an expert (in the file's layout, at gate/up/down, in
// writable memory) into the layout the kernels read fastest (CopyForKernels): GGUF rows
// into kPanels where preferred, a pack's panels back into rows where not. Sizes and
// offsets do not change.
void RepackExpert(const ExpertLayout& layout, uint32_t layer, uint8_t* gate, uint8_t* up,
                  uint8_t* down);

// True if layer's experts are in the file already in the layout the kernels read fastest,
// so that RepackExpert leaves their bytes as they are (a pack written for this CPU).
bool InKernelLayout(const ExpertLayout& layout, uint32_t layer);

}  // namespace mt
