#include "kernels/panel_layout.h"

#include <cstring>
#include <vector>

#include "base/check.h"

namespace mt {
namespace {

constexpr int kPanelRows = 16;

// Copies one panel (16 rows of row_bytes) between the two forms through `scratch`, so that
// dst may be src. to_panels: rows at src, panel at dst; else the reverse. chunk_bytes: the
// bytes of a block moved as 4-byte words (the rest, 0 or 2 bytes, as one 2-byte word).
void ConvertPanel(uint64_t block_bytes, uint64_t chunk_bytes, uint64_t row_bytes, bool to_panels,
                  const uint8_t* src, uint8_t* dst, uint8_t* scratch) {
  const uint64_t panel_bytes = kPanelRows * row_bytes;
  std::memcpy(scratch, src, panel_bytes);
  const uint64_t n_sb = row_bytes / block_bytes;
  // n bytes at (row i, offset o in the row) of the rows form <-> at byte p of the panel form
  // (the 4 bytes of a group, or Q6_K's 2 of d, are consecutive in both: moved as one word,
  // which makes the conversion several times faster than byte by byte).
  auto move = [&](int i, uint64_t o, uint64_t p, size_t n) {
    if (to_panels) {
      std::memcpy(dst + p, scratch + i * row_bytes + o, n);
    } else {
      std::memcpy(dst + i * row_bytes + o, scratch + p, n);
    }
  };
  for (uint64_t s = 0; s < n_sb; ++s) {
    const uint64_t base = s * block_bytes;
    for (uint64_t o = 0; o < chunk_bytes; o += 4) {
      for (int i = 0; i < kPanelRows; ++i) move(i, base + o, 16 * (base + o) + 4 * i, 4);
    }
    for (uint64_t tail = chunk_bytes; tail < block_bytes; tail += 2) {  // Q6_K's, Q3_K's d
      for (int i = 0; i < kPanelRows; ++i) move(i, base + tail, 16 * (base + tail) + 2 * i, 2);
    }
  }
}

void Convert(GgmlType type, int64_t rows, int64_t cols, const uint8_t* src, uint8_t* dst,
             bool to_panels) {
  MT_CHECK_MSG(HasPanelForm(type, rows), "panel form: not a 16-row K-quant matrix");
  const uint64_t block_bytes = RowBytes(type, 256);
  const uint64_t chunk_bytes = block_bytes / 4 * 4;
  const uint64_t row_bytes = RowBytes(type, static_cast<uint64_t>(cols));
  // Stream slots convert while decoding: the scratch only grows, so that is no allocation.
  thread_local std::vector<uint8_t> scratch;
  if (scratch.size() < kPanelRows * row_bytes) scratch.resize(kPanelRows * row_bytes);
  for (int64_t r = 0; r < rows; r += kPanelRows) {
    const uint64_t at = static_cast<uint64_t>(r) * row_bytes;
    ConvertPanel(block_bytes, chunk_bytes, row_bytes, to_panels, src + at, dst + at,
                 scratch.data());
  }
}

}  // namespace

bool HasPanelForm(GgmlType type, int64_t rows) {
  const bool kquant = type == GgmlType::kQ4_K || type == GgmlType::kQ5_K ||
                      type == GgmlType::kQ6_K || type == GgmlType::kQ2_K ||
                      type == GgmlType::kQ3_K || type == GgmlType::kIQ4_XS;
  return kquant && rows > 0 && rows % kPanelRows == 0;
}

void RowsToPanels(GgmlType type, int64_t rows, int64_t cols, const uint8_t* src, uint8_t* dst) {
  Convert(type, rows, cols, src, dst, /*to_panels=*/true);
}

void PanelsToRows(GgmlType type, int64_t rows, int64_t cols, const uint8_t* src, uint8_t* dst) {
  Convert(type, rows, cols, src, dst, /*to_panels=*/false);
}

}  // namespace mt
