// The 16-row panel form of K-quant matrices (WeightLayout::kPanels), in portable code.
//
// The AVX-512 K-quant kernels read a matrix fastest as panels: each 16 rows keep their bytes
// (16 * row_bytes, in place) with every 16-byte chunk of a super-block transposed, so that
// one vector load gives the same 4 bytes of all 16 rows. Expert-major packs may store
// experts this way (moetier.expert_weights = "panels16"), which makes the form a file
// format: it is defined here, independent of the CPU, and every CPU can turn it back into
// GGUF rows. For a panel of rows i = 0..15, super-block s and block bytes B (Q4_K 144, Q5_K
// 176, Q6_K 210, Q2_K 84, Q3_K 110, IQ4_XS 136), each 4-byte word of a block (offsets
// o = 0, 4, .. <= B - 4) sits with the same word of the other 15 rows:
//   panel[16 * (s * B + o) + 4 * i + b] = row_i[s * B + o + b], b = 0..3;
// and where B % 4 == 2 (Q6_K, Q3_K: the f16 d at the block's end) the last 2 bytes likewise:
//   panel[16 * (s * B + B - 2) + 2 * i + b] = row_i[s * B + B - 2 + b], b = 0..1.
// (So a 16-byte chunk at o = 0, 16, .. is 4 vectors of 64 bytes, one per word.)
#pragma once

#include <cstdint>

#include "quant/ggml_type.h"

namespace mt {

// True if a `type` matrix of `rows` rows has a panel form: Q4_K, Q5_K, Q6_K, Q2_K, Q3_K,
// IQ4_XS, rows a positive multiple of 16. (Whether this CPU's kernels read it: PanelsPreferred,
// kernels/matmul.h.)
bool HasPanelForm(GgmlType type, int64_t rows);

// Converts a rows x cols matrix between GGUF rows and panels; dst may be src (both
// rows * RowBytes(type, cols) bytes). Require HasPanelForm(type, rows).
void RowsToPanels(GgmlType type, int64_t rows, int64_t cols, const uint8_t* src, uint8_t* dst);
void PanelsToRows(GgmlType type, int64_t rows, int64_t cols, const uint8_t* src, uint8_t* dst);

}  // namespace mt
