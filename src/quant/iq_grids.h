// The lattice code books of the IQ types (quant/blocks_iq.h): ggml's grids (ggml-common.h
// iq2xxs_grid, iq2xs_grid, iq2s_grid, iq3xxs_grid, iq3s_grid, iq1s_grid) and its sign table
// (ksigns_iq2xs), as format data. Immutable, thread-safe, plain arrays (the per-ISA kernel
// files may read them: no inline code here).
//
// A grid point has 8 coordinates (IQ2, IQ1) or 4 (IQ3), each one of a few levels:
//   IQ2 grids:  8, 25, 43             (3 levels; the 256 / 512 / 1024 points are subsets of
//                                      the 3^8 = 6561 combinations)
//   IQ3_XXS:    4, 12, 20, ..., 52, 62 (8 levels; 256 of 8^4)
//   IQ3_S:      1, 3, 5, ..., 15      (8 levels; 512 of 8^4)
//   IQ1_S/M:    -1, 0, 1              (3 levels; 2048 of 3^8)
// Entry i of a grid holds point i one byte per coordinate, coordinate k in byte k (value & 0xFF
// of entry >> 8k), exactly as ggml's tables (checked in iq_grids_test.cc; the IQ1 bytes are
// int8). kIqGridLevelIndex gives each point as level indices instead, for the quantizer.
#pragma once

#include <cstdint>

namespace mt {

// A grid: `kPoints` entries of 4 or 8 one-byte coordinates.
template <typename Entry, int kPoints>
struct IqGrid {
  alignas(64) Entry entry[kPoints];
};

extern const IqGrid<uint64_t, 256> kIq2XxsGrid;  // ggml iq2xxs_grid
extern const IqGrid<uint64_t, 512> kIq2XsGrid;   // ggml iq2xs_grid
extern const IqGrid<uint64_t, 1024> kIq2SGrid;   // ggml iq2s_grid
extern const IqGrid<uint32_t, 256> kIq3XxsGrid;  // ggml iq3xxs_grid
extern const IqGrid<uint32_t, 512> kIq3SGrid;    // ggml iq3s_grid
extern const IqGrid<uint64_t, 2048> kIq1SGrid;   // ggml iq1s_grid (int8 bytes -1, 0, 1)
// The grids as the SIMD kernels read them (matmul_iq_avx2.cc, matmul_iq_avx512.cc): IQ2/IQ3
// bytes + 64 (so that 64 +- g, an unsigned byte, is one masked subtraction from there);
// IQ1 byte = 8 * (coordinate + 1), i.e. 0, 8 or 16.
extern const IqGrid<uint64_t, 256> kIq2XxsGridBiased;
extern const IqGrid<uint64_t, 512> kIq2XsGridBiased;
extern const IqGrid<uint64_t, 1024> kIq2SGridBiased;
extern const IqGrid<uint32_t, 256> kIq3XxsGridBiased;
extern const IqGrid<uint32_t, 512> kIq3SGridBiased;
extern const IqGrid<uint64_t, 2048> kIq1SGridBiased;

// ggml ksigns_iq2xs: 7 stored sign bits -> the group's 8 sign bits, bit 7 being the parity of
// the 7 (so that the number of minus signs is even): sign[i] = i | parity(i) << 7.
struct IqSignTable {
  alignas(64) uint8_t sign[128];
};
extern const IqSignTable kIqSigns;

// The levels of each grid's coordinates (the table at the top), ascending.
inline constexpr int kIq2Levels[3] = {8, 25, 43};
inline constexpr int kIq3XxsLevels[8] = {4, 12, 20, 28, 36, 44, 52, 62};
inline constexpr int kIq3SLevels[8] = {1, 3, 5, 7, 9, 11, 13, 15};
inline constexpr int kIq1Levels[3] = {-1, 0, 1};

// Which grid (for the quantizer's tables, quant/quantize_iq.cc).
enum class IqGridId : uint8_t { kIq2Xxs, kIq2Xs, kIq2S, kIq3Xxs, kIq3S, kIq1S };

// Point i of a grid as level indices: bits 2k, 2k + 1 (8-coordinate grids) or 3k .. 3k + 2
// (IQ3 grids) = the index into the levels above of coordinate k. i < IqGridPoints(id).
uint16_t IqGridLevelIndex(IqGridId id, int i);
int IqGridPoints(IqGridId id);

}  // namespace mt
