// Builds the ExpertLayout of a tensor-major GGUF: expert e of layer l is slice e of the
// stacked blk.l.ffn_{gate,up,down}_exps tensors, in whichever shard each tensor lives.
#pragma once

#include "base/status.h"
#include "experts/expert_layout.h"

namespace mt {

class GgufModel;

// Errors name the tensor that is missing or malformed.
Result<ExpertLayout> ExpertLayoutFromGguf(const GgufModel& model, uint32_t n_layer);

}  // namespace mt
