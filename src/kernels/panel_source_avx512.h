// Reading 16-row panels on AVX-512: the part shared by the panel kernels
// (matmul_kquant_avx512.cc, matmul_lowbit_avx512.cc). Include it ONLY from an AVX-512 per-ISA
// file, after <immintrin.h>: everything here is in an anonymous namespace, so each file gets
// its own copy compiled with its own flags (see the ODR note in matmul_internal.h).
//
// A panel's vectors hold one 32-bit lane per row: lane i of a "word" vector is the 4 bytes at
// some offset o of row i's block. They come from GGUF rows (RowSource: 16 bytes of 16 rows,
// transposed as they are read) or from a matrix repacked into the kPanels layout
// (PackedSource: the same vectors stored in order, kernels/panel_layout.h).
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/matmul_internal.h"

namespace mt::kernels {
namespace {

constexpr int kPanelRows = 16;  // one row per 32-bit lane

// The rows of a panel: row i at base + i * row_bytes for i < n. A partial panel's lanes
// n .. 15 repeat row n - 1; they are never stored.
struct Panel {
  const uint8_t* base;
  int64_t row_bytes;
  int n;
  __mmask16 mask;  // lanes 0 .. n - 1
  const uint8_t* Row(int i) const { return base + (i < n ? i : n - 1) * row_bytes; }
};

[[maybe_unused]] Panel MakePanel(const WeightView& w, int64_t r, int64_t r1) {
  const int n = static_cast<int>(r1 - r < kPanelRows ? r1 - r : kPanelRows);
  return Panel{w.data + r * static_cast<int64_t>(w.row_bytes), static_cast<int64_t>(w.row_bytes), n,
               static_cast<__mmask16>((1u << n) - 1)};
}

// out[k] lane i = dword k (k < 4) of the 16 bytes at offset `off` of row i. Four rows go to
// each 128-bit lane by broadcast loads merged under masks; a 4 x 4 transposition inside the
// 128-bit lanes finishes the job, with no cross-lane shuffle.
[[gnu::always_inline]] inline void LoadChunk(const Panel& p, int64_t off, __m512i* out) {
  __m512i x[4];
#pragma unroll
  for (int rs = 0; rs < 4; ++rs) {
    auto row = [&](int i) { return _mm_loadu_si128((const __m128i*)(p.Row(i) + off)); };
    __m512i v = _mm512_broadcast_i32x4(row(rs));
    v = _mm512_mask_broadcast_i32x4(v, 0x00F0, row(4 + rs));
    v = _mm512_mask_broadcast_i32x4(v, 0x0F00, row(8 + rs));
    x[rs] = _mm512_mask_broadcast_i32x4(v, 0xF000, row(12 + rs));  // lane L: row 4L + rs
  }
  const __m512i t0 = _mm512_unpacklo_epi32(x[0], x[1]), t1 = _mm512_unpackhi_epi32(x[0], x[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(x[2], x[3]), t3 = _mm512_unpackhi_epi32(x[2], x[3]);
  out[0] = _mm512_unpacklo_epi64(t0, t2);
  out[1] = _mm512_unpackhi_epi64(t0, t2);
  out[2] = _mm512_unpacklo_epi64(t1, t3);
  out[3] = _mm512_unpackhi_epi64(t1, t3);
}

// Prefetches (into L2) part s of n_parts of panel p's bytes (its rows are contiguous), in
// address order. Issued for the next panel one part per super-block, so the requests spread
// over this panel's work.
[[maybe_unused]] void PrefetchPart(const Panel& p, int64_t s, int64_t n_parts) {
  const int64_t bytes = p.n * p.row_bytes;
  const int64_t part = (bytes / n_parts + 63) & ~int64_t{63};
  const int64_t end = (s + 1) * part < bytes ? (s + 1) * part : bytes;
  for (int64_t o = s * part; o < end; o += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(p.base + o), _MM_HINT_T1);
  }
}

// Two f16 halves of each lane to float.
[[maybe_unused]] __m512 HalfLow(__m512i v) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v)); }
[[maybe_unused]] __m512 HalfHigh(__m512i v) {
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16)));
}

// Where a panel's words come from. Chunk(s, off, out): out[k] lane i = the 4 bytes at offset
// off + 4k of row i's super-block s (off a multiple of 4, off + 16 <= the block's bytes).
// Last2(s): the block's last 2 bytes of the 16 rows (Q6_K's and Q3_K's f16 d), for blocks
// of 4n + 2 bytes.
//  - RowSource: GGUF rows, transposed as they are read (LoadChunk).
//  - PackedSource: a panel repacked into the kPanels layout: word o of super-block s at
//    16 * (s * block_bytes + o), the 2-byte tail at 16 * (s * block_bytes + block_bytes - 2).
struct RowSource {
  Panel p;
  int64_t block_bytes;
  [[gnu::always_inline]] void Chunk(int64_t s, int64_t off, __m512i* out) const {
    LoadChunk(p, s * block_bytes + off, out);
  }
  [[gnu::always_inline]] __m256i Last2(int64_t s) const {
    __m512i tail[4];  // the block's last 16 bytes: the high half of word 3
    LoadChunk(p, s * block_bytes + block_bytes - 16, tail);
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(tail[3], 16));
  }
};

struct PackedSource {
  const uint8_t* base;  // the panel's first byte
  int64_t block_bytes;
  [[gnu::always_inline]] void Chunk(int64_t s, int64_t off, __m512i* out) const {
    const uint8_t* q = base + 16 * (s * block_bytes + off);
#pragma unroll
    for (int k = 0; k < 4; ++k) out[k] = _mm512_loadu_si512(q + 64 * k);
  }
  [[gnu::always_inline]] __m256i Last2(int64_t s) const {
    return _mm256_loadu_si256((const __m256i*)(base + 16 * (s * block_bytes + block_bytes - 2)));
  }
};

// Writes panel p (GGUF rows, n_sb super-blocks of block_bytes) to dst in the kPanels layout.
[[maybe_unused]] void RepackPanel(const Panel& p, int64_t block_bytes, int64_t n_sb, uint8_t* dst) {
  const RowSource src{p, block_bytes};
  const int64_t words = block_bytes / 4 * 4;  // bytes moved as 4-byte words
  for (int64_t s = 0; s < n_sb; ++s) {
    uint8_t* out = dst + 16 * s * block_bytes;
    for (int64_t off = 0; off < words; off += 16) {
      // The last chunk may be partial (words % 16 != 0): it is read ending at the last word
      // and stored from there (the overlap is written twice, with the same bytes).
      const int64_t at = off + 16 <= words ? off : words - 16;
      __m512i v[4];
      src.Chunk(s, at, v);
      for (int k = 0; k < 4; ++k) _mm512_storeu_si512(out + 16 * at + 64 * k, v[k]);
    }
    if (words != block_bytes) _mm256_storeu_si256((__m256i*)(out + 16 * words), src.Last2(s));
  }
}

}  // namespace
}  // namespace mt::kernels
