// Quantizers of the IQ lattice types (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M;
// quant/blocks_iq.h), called by QuantizeRow (quant/quantize.h), which checks the arguments.
//
// llama.cpp quantizes these with an importance matrix and a search over neighbouring grid
// points; moetier (for synth, which has no importance matrix) uses a simpler search with the
// same ingredients, plain squared error as the measure:
//  - signs: each element's own (IQ2/IQ3; where only 7 sign bits are stored, the parity rule
//    flips the sign of the group's smallest magnitude when the count of negatives is odd);
//  - nearest grid point: each coordinate rounded to its nearest level; if that lattice point is
//    on the grid it is the nearest grid point, else the nearest of the grid points at the two
//    smallest distances from it (lists made once per grid, on first use);
//  - per 16 or 32 elements, the scale with the least squared error among candidates around
//    max |x| / (top level), each refitted by least squares for the codes it gave (kBest: 16
//    candidates, kFast: 4); IQ1 tries both signs of its delta;
//  - the super-block's f16 d from the largest scale, the odd sub-scales L rounded to it, one
//    least-squares refit of d, then every code chosen again against the final scales.
// Deterministic (a pure function of the input) and thread-safe. Non-finite input gives valid
// blocks (every index within its grid), never undefined behaviour.
#pragma once

#include <cstdint>

#include "quant/ggml_type.h"
#include "quant/quantize.h"

namespace mt {

// True for the seven types above.
bool IsIqLatticeType(GgmlType type);

// Quantizes n floats (n a multiple of 256) into RowBytes(type, n) bytes at dst.
void QuantizeIqRow(GgmlType type, const float* x, uint8_t* dst, int64_t n, QuantEffort effort);

}  // namespace mt
