// Software prefetch of a head's KV cache rows, and the dispatch on K's and V's element types,
// shared by the per-ISA attention files. Include it ONLY from a per-ISA file
// (attention_avx2.cc, attention_avx512.cc), after <immintrin.h>: like lane_sum.h, everything
// here is in an anonymous namespace, so each file gets its own copy compiled with its own
// flags.
//
// Why: in decode a head's K and V rows come from memory (the layer's weights went through the
// caches since), and the hardware prefetcher starts too late for a 64-position tile: one
// head at 128 positions took ~5 us, at memory speed ~2 us (measured, head-major cache rows).
#pragma once

#include <cstdint>

#include "kernels/attention_internal.h"
#include "quant/blocks.h"

namespace mt::kernels {
namespace {

constexpr int64_t kPrefetchAhead = 16;  // positions of K asked for ahead of the scores' loads

// Bytes of n elements (KvBytes, restated here: this file's code must stay in its own ISA's
// translation unit).
[[maybe_unused]] int64_t ElemBytes(KvElemType type, int64_t n) {
  switch (type) {
    case KvElemType::kF16:
      return 2 * n;
    case KvElemType::kQ8_0:
      return n / kQK * static_cast<int64_t>(sizeof(BlockQ8_0));  // whole blocks
    case KvElemType::kF32:
      break;
  }
  return 4 * n;
}

// Asks for the cache lines of row j of a cache with `stride` elements per position (every
// line the row touches: q8_0 rows, 34 bytes a block, do not start on a line).
[[maybe_unused]] void PrefetchRow(const void* base, int64_t j, int64_t stride, int elems,
                                  KvElemType type) {
  const char* row = static_cast<const char*>(base) + ElemBytes(type, j * stride);
  const int64_t bytes = ElemBytes(type, elems);
  const int64_t skew = static_cast<int64_t>(reinterpret_cast<uintptr_t>(row) % 64);
  for (int64_t i = -skew; i < bytes; i += 64) _mm_prefetch(row + i, _MM_HINT_T0);
}

// Before the first tile: K's first kPrefetchAhead rows.
[[maybe_unused]] void PrefetchFirstRows(const AttendArgs& a) {
  for (int64_t j = 0; j < kPrefetchAhead && j < a.n_pos; ++j) {
    PrefetchRow(a.k, j, a.k_stride, a.d_k, a.types.k);
  }
}

// While the scores of position j are computed: K kPrefetchAhead positions ahead, and the V row
// of j, which the tile's weighted sum reads next. K rows past n_pos are not asked for.
[[maybe_unused]] void PrefetchForPosition(const AttendArgs& a, int64_t j) {
  if (j + kPrefetchAhead < a.n_pos) {
    PrefetchRow(a.k, j + kPrefetchAhead, a.k_stride, a.d_k, a.types.k);
  }
  PrefetchRow(a.v, j, a.v_stride, a.d_v, a.types.v);
}

// The queries of one AttendMany call (a prompt's tokens over the same rows, each with
// positions of its own): `end`, the positions that whole tiles cover for all of them (a
// multiple of kAttendTile), and `far`, a query with the most positions (whose rows the
// first pass asks for ahead).
struct SharedTiles {
  int64_t end;
  int far;
};
[[maybe_unused]] SharedTiles FindSharedTiles(const AttendArgs* a, int n) {
  SharedTiles st{a[0].n_pos, 0};
  for (int i = 0; i < n; ++i) {
    st.end = a[i].n_pos < st.end ? a[i].n_pos : st.end;
    st.far = a[i].n_pos > a[st.far].n_pos ? i : st.far;
  }
  st.end = st.end / kAttendTile * kAttendTile;
  return st;
}

// Calls f.template operator()<kK, kV>() with K's and V's element types as template
// arguments: the per-ISA entry points' one switch over the nine pairs.
template <class F>
void WithKvTypes(KvTypes types, F&& f) {
  auto with_v = [&]<KvElemType kK>() {
    switch (types.v) {
      case KvElemType::kF16:
        return f.template operator()<kK, KvElemType::kF16>();
      case KvElemType::kF32:
        return f.template operator()<kK, KvElemType::kF32>();
      case KvElemType::kQ8_0:
        return f.template operator()<kK, KvElemType::kQ8_0>();
    }
  };
  switch (types.k) {
    case KvElemType::kF16:
      return with_v.template operator()<KvElemType::kF16>();
    case KvElemType::kF32:
      return with_v.template operator()<KvElemType::kF32>();
    case KvElemType::kQ8_0:
      return with_v.template operator()<KvElemType::kQ8_0>();
  }
}

}  // namespace
}  // namespace mt::kernels
