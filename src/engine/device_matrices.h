// Which dense matrices a device will own, known before the model is loaded, so that the
// host keeps no copy of them (LoadOptions::left_to_device).
#pragma once

#include <vector>

#include "engine/context.h"
#include "engine/model.h"

namespace mt {

// The dense matrices the device's parts upload for a Context with `options`: the attention
// of the layers GpuGqaAttention, GpuMlaAttention and GpuDeltaNetAttention take (DeltaNet's
// qkv, gate, b/a and output projections), the output head and the SwiGLU blocks (shared
// experts, dense FFNs), each where its own check passes. Empty without --device or without
// that device. A part refused later (its KV cache or recurrent states past one binding) runs
// on the CPU from the mapping.
std::vector<const WeightMatrix*> DeviceOwnedMatrices(const Model& model,
                                                     const ContextOptions& options);

// The load options a Context with `options` wants: the matrices above left to the device.
LoadOptions LoadOptionsFor(const ContextOptions& options, LoadOptions base = {});

}  // namespace mt
