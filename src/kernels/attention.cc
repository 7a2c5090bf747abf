#include "kernels/attention.h"

#include <array>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "kernels/attention_internal.h"
#include "quant/blocks.h"
#include "quant/quantize.h"

namespace mt {
namespace {

static_assert(kKvBlockQ8 == kQK);

using AttendFn = void (*)(const kernels::AttendArgs&);
using StoreF16Fn = void (*)(const float*, int64_t, uint16_t*);

StoreF16Fn StoreVariant(Isa isa) {
  MT_CHECK_MSG(IsaSupported(isa), "KV store variant not supported by this CPU or build");
  switch (isa) {
#ifdef MT_KERNELS_X86
    case Isa::kAvx2:
      return kernels::StoreF16Avx2;
    case Isa::kAvx512:
      return kernels::StoreF16Avx512;
#endif
    default:
      return kernels::StoreF16Scalar;
  }
}

// n floats (whole blocks) as q8_0 blocks: QuantizeRow's, except that a block holding a NaN
// or an infinity gets a NaN scale. QuantizeRow's codes would drop it, and the engine finds a
// bad weight by the NaN it leaves in the logits (engine/context.h).
void QuantizeQ8(const float* src, int64_t n, BlockQ8_0* dst) {
  QuantizeRow(GgmlType::kQ8_0, src, dst, n);
  for (int64_t b = 0; b < n / kKvBlockQ8; ++b) {
    for (int64_t i = 0; i < kKvBlockQ8; ++i) {
      if (!std::isfinite(src[b * kKvBlockQ8 + i])) {
        dst[b].d = 0x7E00;  // f16 quiet NaN
        break;
      }
    }
  }
}

void Store(StoreF16Fn fn, const float* src, int64_t n, KvElemType type, void* dst) {
  MT_CHECK(n >= 0);
  switch (type) {
    case KvElemType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case KvElemType::kF16:
      fn(src, n, static_cast<uint16_t*>(dst));
      return;
    case KvElemType::kQ8_0:
      MT_CHECK_MSG(n % kKvBlockQ8 == 0, "q8_0 KV row is not whole blocks");
      QuantizeQ8(src, n, static_cast<BlockQ8_0*>(dst));  // scalar in every variant
      return;
  }
}

// q8_0 rows, strides and offsets are whole blocks (the kernels widen a chunk of 8 or 16
// elements from one block).
void CheckBlocks(KvTypes types, int64_t k_stride, int64_t v_stride, int d_k, int d_v) {
  if (types.k == KvElemType::kQ8_0) {
    MT_CHECK_MSG(k_stride % kKvBlockQ8 == 0 && d_k % kKvBlockQ8 == 0,
                 "q8_0 K rows and strides must be whole blocks of 32");
    MT_CHECK_MSG(d_k <= kKvMaxDimQ8, "q8_0 K: d_k above kKvMaxDimQ8");
  }
  if (types.v == KvElemType::kQ8_0) {
    MT_CHECK_MSG(v_stride % kKvBlockQ8 == 0 && d_v % kKvBlockQ8 == 0,
                 "q8_0 V rows and strides must be whole blocks of 32");
  }
}

// A q8_0 K's scores take the query rounded to q8_0 blocks (attention.h): `args.q8` points
// at `blocks`, filled from args.q; other K types leave it null.
void RoundQuery(kernels::AttendArgs& args, BlockQ8_0* blocks) {
  if (args.types.k != KvElemType::kQ8_0) return;
  QuantizeQ8(args.q, args.d_k, blocks);
  args.q8 = blocks;
}

AttendFn Variant(Isa isa) {
  MT_CHECK_MSG(IsaSupported(isa), "attention variant not supported by this CPU or build");
  switch (isa) {
    case Isa::kScalar:
      return kernels::AttendScalar;
#ifdef MT_KERNELS_X86
    case Isa::kAvx2:
      return kernels::AttendAvx2;
    case Isa::kAvx512:
      return kernels::AttendAvx512;
#endif
    default:
      break;
  }
  MT_CHECK_MSG(false, "attention variant not compiled in");
  return kernels::AttendScalar;
}

void Run(AttendFn fn, const float* q, const void* k, const void* v, KvTypes types, int64_t k_stride,
         int64_t v_stride, int64_t n_pos, int d_k, int d_v, float scale, float* out,
         float* scratch) {
  MT_CHECK(n_pos >= 1 && d_k >= 1 && d_v >= 1 && k_stride >= 0 && v_stride >= 0);
  CheckBlocks(types, k_stride, v_stride, d_k, d_v);
  kernels::AttendArgs args{q,     k,   v,   types, k_stride, v_stride,
                           n_pos, d_k, d_v, scale, out,      scratch};
  std::array<BlockQ8_0, kKvMaxDimQ8 / kKvBlockQ8> q8;
  RoundQuery(args, q8.data());
  fn(args);
}

// The queries of tokens x heads: AVX2 runs them 4 at a time over shared K/V loads, AVX-512 a
// token's heads as one group, scalar each alone (the results are the same either way).
void RunQueries(Isa isa, const AttendQueries& qs, const void* k, const void* v, KvTypes types,
                int64_t k_stride, int64_t v_stride, int d_k, int d_v, float scale, float* scratch) {
  MT_CHECK(qs.n_head >= 1 && qs.n_tok >= 1 && qs.n_head * qs.n_tok <= kAttendGroupMax &&
           qs.n_pos >= 1 && d_k >= 1 && d_v >= 1 && k_stride >= 0 && v_stride >= 0);
  CheckBlocks(types, k_stride, v_stride, d_k, d_v);
  const int64_t last = qs.n_pos + qs.n_tok - 1;
  const int64_t tile = last < kAttendTile ? last : kAttendTile;
  std::array<kernels::AttendArgs, kAttendGroupMax> args;
  std::array<BlockQ8_0, kAttendGroupMax*(kKvMaxDimQ8 / kKvBlockQ8)> q8;  // 34 KiB
  int n = 0;
  for (int t = 0; t < qs.n_tok; ++t) {
    for (int h = 0; h < qs.n_head; ++h, ++n) {
      args[n] = kernels::AttendArgs{qs.q + t * qs.q_tok_stride + h * qs.q_head_stride,
                                    k,
                                    v,
                                    types,
                                    k_stride,
                                    v_stride,
                                    qs.n_pos + t,
                                    d_k,
                                    d_v,
                                    scale,
                                    qs.out + t * qs.out_tok_stride + h * qs.out_head_stride,
                                    scratch + n * tile};
      if (qs.sinks != nullptr) args[n].sink = qs.sinks[h];
      RoundQuery(args[n], q8.data() + n * (kKvMaxDimQ8 / kKvBlockQ8));
    }
  }
#ifdef MT_KERNELS_X86
  if (isa == Isa::kAvx2) {
    kernels::AttendManyAvx2(args.data(), n);
    return;
  }
  if (isa == Isa::kAvx512) {
    if (qs.n_tok == 1) {
      kernels::AttendGroupAvx512(args.data(), n);  // one token's heads: the same positions
    } else {
      kernels::AttendManyAvx512(args.data(), n);
    }
    return;
  }
#endif
  const AttendFn fn = Variant(isa);
  for (int i = 0; i < n; ++i) fn(args[i]);
}

AttendQueries GroupOfHeads(const float* q, int64_t q_stride, int n_q, int64_t n_pos, float* out,
                           int64_t out_stride) {
  return AttendQueries{q, 0, q_stride, out, 0, out_stride, n_q, 1, n_pos};
}

}  // namespace

namespace kernels {

float InverseDenominator(const AttendArgs& a, float m, float l) {
  const float x = a.sink - m;
  return 1.0f / (x < -87.3f ? l : l + std::exp(x));
}

}  // namespace kernels

int64_t KvBytes(KvElemType type, int64_t n) {
  switch (type) {
    case KvElemType::kF16:
      return 2 * n;
    case KvElemType::kF32:
      return 4 * n;
    case KvElemType::kQ8_0:
      MT_CHECK_MSG(n % kKvBlockQ8 == 0, "q8_0 KV row is not whole blocks");
      return n / kKvBlockQ8 * static_cast<int64_t>(sizeof(BlockQ8_0));
  }
  return 0;
}

void AttendHeads(const float* q, int64_t q_stride, int n_q, const void* k, const void* v,
                 KvTypes types, int64_t k_stride, int64_t v_stride, int64_t n_pos, int d_k, int d_v,
                 float scale, float* out, int64_t out_stride, float* scratch) {
  static const Isa isa = ActiveIsa();
  RunQueries(isa, GroupOfHeads(q, q_stride, n_q, n_pos, out, out_stride), k, v, types, k_stride,
             v_stride, d_k, d_v, scale, scratch);
}

void AttendHeads(Isa isa, const float* q, int64_t q_stride, int n_q, const void* k, const void* v,
                 KvTypes types, int64_t k_stride, int64_t v_stride, int64_t n_pos, int d_k, int d_v,
                 float scale, float* out, int64_t out_stride, float* scratch) {
  MT_CHECK_MSG(IsaSupported(isa), "attention variant not supported by this CPU or build");
  RunQueries(isa, GroupOfHeads(q, q_stride, n_q, n_pos, out, out_stride), k, v, types, k_stride,
             v_stride, d_k, d_v, scale, scratch);
}

void AttendTokens(const AttendQueries& qs, const void* k, const void* v, KvTypes types,
                  int64_t k_stride, int64_t v_stride, int d_k, int d_v, float scale,
                  float* scratch) {
  static const Isa isa = ActiveIsa();
  RunQueries(isa, qs, k, v, types, k_stride, v_stride, d_k, d_v, scale, scratch);
}

void AttendTokens(Isa isa, const AttendQueries& qs, const void* k, const void* v, KvTypes types,
                  int64_t k_stride, int64_t v_stride, int d_k, int d_v, float scale,
                  float* scratch) {
  MT_CHECK_MSG(IsaSupported(isa), "attention variant not supported by this CPU or build");
  RunQueries(isa, qs, k, v, types, k_stride, v_stride, d_k, d_v, scale, scratch);
}

void AttendHead(const float* q, const void* k, const void* v, KvTypes types, int64_t k_stride,
                int64_t v_stride, int64_t n_pos, int d_k, int d_v, float scale, float* out,
                float* scratch) {
  static const Isa isa = ActiveIsa();
  Run(Variant(isa), q, k, v, types, k_stride, v_stride, n_pos, d_k, d_v, scale, out, scratch);
}

void AttendHead(Isa isa, const float* q, const void* k, const void* v, KvTypes types,
                int64_t k_stride, int64_t v_stride, int64_t n_pos, int d_k, int d_v, float scale,
                float* out, float* scratch) {
  Run(Variant(isa), q, k, v, types, k_stride, v_stride, n_pos, d_k, d_v, scale, out, scratch);
}

void StoreKv(const float* src, int64_t n, KvElemType type, void* dst) {
  static const StoreF16Fn fn = StoreVariant(ActiveIsa());
  Store(fn, src, n, type, dst);
}

void StoreKv(Isa isa, const float* src, int64_t n, KvElemType type, void* dst) {
  Store(StoreVariant(isa), src, n, type, dst);
}

}  // namespace mt
