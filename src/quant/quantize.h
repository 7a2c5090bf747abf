// Quantizers: floats -> ggml blocks. Deterministic (same input, same bytes) and thread-safe.
// They aim at low error, not at matching llama.cpp's quantizer bit for bit; what must match
// ggml exactly is the block layout (checked by the dequantizers' tests). The exceptions are
// Q2_K, Q3_K, IQ4_NL and IQ4_XS, which run llama.cpp's own algorithms (as llama-quantize does
// without an importance matrix) and give its bytes, in both efforts (quant/lowbit.h).
#pragma once

#include <cstdint>

#include "quant/ggml_type.h"

namespace mt {

// True for types that QuantizeRow supports: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
// Q4_K, Q5_K, Q6_K, MXFP4, Q2_K, Q3_K, IQ4_NL, IQ4_XS, and the IQ lattice types IQ2_XXS,
// IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M (quant/quantize_iq.h: a simpler search than
// llama.cpp's, which needs an importance matrix).
bool CanQuantize(GgmlType type);

// How hard QuantizeRow works for a low error. Both give blocks the dequantizers read the same
// way; only the chosen scales and codes differ.
enum class QuantEffort {
  // Several candidate scales per block (or sub-block), each refitted by least squares; the
  // one with the least squared error wins. About 3-10 M values/s per core for Q4_0, Q4_1,
  // Q5_0, Q5_1 and the K-quants.
  kBest,
  // One direct scale per block (or sub-block), no search: from the block's min and max, the
  // step that puts them a quarter step beyond the end codes, with every stored scale rounded
  // *up* (f16 scales, 6-/8-bit sub-scales) so that the grid still covers the block. Hence
  // nothing clips and every finite element comes back within half a step (plus float
  // rounding). MXFP4 takes the smallest exponent whose grid reaches the block's largest
  // magnitude, so nothing clips either and an element x comes back within max(|x|, amax / 3)
  // / 4. 150-400 M values/s per core (one x86-64 core, baseline SSE2 build);
  // RMS error at most 1.2 times kBest's on Gaussian data (quantize_test.cc).
  // F32, F16, BF16 and Q8_0 have no search and give the same bytes in both modes.
  kFast,
};

// Quantizes `n` floats from `src` into RowBytes(type, n) bytes at `dst`. `n` must be a
// multiple of the type's block size and the type must satisfy CanQuantize (checked).
// Non-finite input gives structurally valid (if meaningless) blocks, never a crash.
void QuantizeRow(GgmlType type, const float* src, void* dst, int64_t n,
                 QuantEffort effort = QuantEffort::kBest);

}  // namespace mt
