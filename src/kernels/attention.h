// Attention of one query over one head's KV cache: scaled dot products, softmax, weighted sum.
//
// Semantics (the definition every variant matches within its tolerance):
//   s_j    = scale * sum_i q[i] * K[j][i]    for positions j in [0, n_pos)
//   p      = softmax(s)                       (over the n_pos scores)
//            with a sink logit z (AttendQueries::sinks, gpt-oss): p_j = e^(s_j) / (sum_i
//            e^(s_i) + e^z), the sink a position with no value that takes weight
//   out[i] = sum_j p_j * V[j][i]              for i in [0, d_v)
// K[j] is the d_k elements at k + j * k_stride, V[j] the d_v elements at v + j * v_stride
// (strides in elements), each f16, f32 or q8_0 (K's type and V's apart: KvTypes); every
// element is widened to f32 exactly (a q8_0 element is its block's f16 scale times its int8
// code: at most 19 significant bits). With a q8_0 K, q in the scores is q' = q rounded to
// q8_0 blocks (QuantizeRow), as llama.cpp turns the query into K's dot type: a block's code
// products are summed in integers (exact), so converting K's codes one by one to floats (most
// of the work) is avoided; the definition and the tolerance below hold with q' in place of q.
//
// How it is computed (every variant): positions go in tiles of kAttendTile. A tile's scores
// are written to `scratch`, then an online softmax folds the tile into a running maximum M,
// a running sum L = sum_j exp(s_j - M) and an unnormalised output: when a tile raises M, L
// and the output are first multiplied by exp(M_old - M_new). At the end out = out * (1 / L).
// K and V are each read once, in position order, and only one tile of scores is live.
// exp(x) for x < -87.3 (e^x < 2^-126) counts as 0.
//
// Determinism: for a given variant (kernels/isa.h) the float ops and their order depend only
// on n_pos, d_k and d_v, so the result for one (token, head) is bit-identical whatever the
// thread, the batch or the other heads. Variants differ from each other in rounding.
//
// Tolerance vs the exact definition (derived and checked in attention_test.cc). With
// u = 2^-24, e_exp = 2^-21 (exp's relative error), T = the number of tiles,
// E = max_j (d_k + 2) u |scale| sum_i |q[i] K[j][i]| (a score's rounding error),
// R = max_j s_j - min_j s_j + 2 E, Lambda = 2 E + (T + 1) (e_exp + u R),
// A_i = sum_j p_j |V[j][i]|:
//   |err_i| <= A_i ((e^(2 Lambda) - 1) + e^(2 Lambda) (2 n_pos + 2 T + 4) u)
//              + n_pos 2^-126 max_j |V[j][i]|      (weights that underflow to 0)
#pragma once

#include <cstdint>

#include "kernels/isa.h"

namespace mt {

// q8_0 is ggml's block_q8_0 (quant/blocks.h): 32 elements in 34 bytes, half f16's memory, as
// llama.cpp's `-ctk q8_0 -ctv q8_0`. Its rows, strides and offsets are whole blocks: for a
// q8_0 K, d_k and k_stride must be multiples of kKvBlockQ8 and d_k at most kKvMaxDimQ8 (q' is
// kept on the stack); for a q8_0 V, d_v and v_stride (checked). Every variant has q8_0
// kernels of its own (AVX-512: the scores' code products by VNNI, two blocks a vector).
enum class KvElemType : uint8_t { kF16, kF32, kQ8_0 };
inline constexpr int64_t kKvBlockQ8 = 32;

// The element types of a KV cache, K's and V's apart, as llama.cpp's -ctk and -ctv (e.g. K
// q8_0 with V f16). From one type: K and V alike.
struct KvTypes {
  KvElemType k = KvElemType::kF16;
  KvElemType v = KvElemType::kF16;
  constexpr KvTypes() = default;
  constexpr KvTypes(KvElemType both) : k(both), v(both) {}  // NOLINT: implicit on purpose
  constexpr KvTypes(KvElemType k_type, KvElemType v_type) : k(k_type), v(v_type) {}
  bool operator==(const KvTypes&) const = default;
};
inline constexpr int kKvMaxDimQ8 = 576;  // DeepSeek MLA: a 512 latent + 64 rope dims

// Bytes of n elements of `type` (q8_0: n a multiple of kKvBlockQ8, checked).
int64_t KvBytes(KvElemType type, int64_t n);

// Positions per tile of the online softmax; `scratch` needs min(n_pos, kAttendTile) floats.
inline constexpr int64_t kAttendTile = 64;

// out (d_v floats) = attention of q (d_k floats) over positions [0, n_pos) of K/V as above,
// with the ActiveIsa() variant. Requirements (checked): n_pos >= 1, d_k >= 1, d_v >= 1,
// strides >= 0. Nothing past the last element of position n_pos - 1 is read. No alignment
// needed; out must not overlap the inputs; no heap. Thread-safe: concurrent calls need their
// own out and scratch.
void AttendHead(const float* q, const void* k, const void* v, KvTypes types, int64_t k_stride,
                int64_t v_stride, int64_t n_pos, int d_k, int d_v, float scale, float* out,
                float* scratch);

// The same with an explicit variant (tests, benchmarks). The variant must be supported
// (IsaSupported, checked).
void AttendHead(Isa isa, const float* q, const void* k, const void* v, KvTypes types,
                int64_t k_stride, int64_t v_stride, int64_t n_pos, int d_k, int d_v, float scale,
                float* out, float* scratch);

// The query heads of one GQA group: n_q (1..kAttendGroupMax) queries at q + i * q_stride over
// the same K/V rows and positions, out + i * out_stride, scratch n_q * min(n_pos, kAttendTile)
// floats. Each query's result is bit-identical to AttendHead's for it (same variant); the
// AVX-512 and AVX2 variants load and widen each K/V chunk once for up to 4 queries (a group's
// 8 heads each converting the same rows made attention compute-bound on qwen3-30b-a3b).
inline constexpr int kAttendGroupMax = 64;
void AttendHeads(const float* q, int64_t q_stride, int n_q, const void* k, const void* v,
                 KvTypes types, int64_t k_stride, int64_t v_stride, int64_t n_pos, int d_k, int d_v,
                 float scale, float* out, int64_t out_stride, float* scratch);
// The same with an explicit variant (tests, benchmarks); it must be supported (checked).
void AttendHeads(Isa isa, const float* q, int64_t q_stride, int n_q, const void* k, const void* v,
                 KvTypes types, int64_t k_stride, int64_t v_stride, int64_t n_pos, int d_k, int d_v,
                 float scale, float* out, int64_t out_stride, float* scratch);

// The queries of an AttendTokens call: n_tok consecutive tokens of one sequence, token i
// attending to positions [0, n_pos + i), each with the n_head query heads of one GQA group.
// Query (token i, head h) is at q + i * q_tok_stride + h * q_head_stride and its output at
// out + i * out_tok_stride + h * out_head_stride (floats).
struct AttendQueries {
  const float* q;
  int64_t q_tok_stride;
  int64_t q_head_stride;
  float* out;
  int64_t out_tok_stride;
  int64_t out_head_stride;
  int n_head;                    // >= 1
  int n_tok;                     // >= 1, n_head * n_tok <= kAttendGroupMax
  int64_t n_pos;                 // >= 1
  const float* sinks = nullptr;  // (n_head) each head's sink logit (gpt-oss), or null: none
};

// Every query of `qs` over the same K/V rows; scratch n_head * n_tok * min(n_pos + n_tok - 1,
// kAttendTile) floats. Each query's result is bit-identical to AttendHead's for it (same
// variant). The AVX2 and AVX-512 variants load and widen each K/V chunk once for 4 queries
// (tokens or heads): a prompt's tokens at depth, each re-reading its head's whole cache, made
// attention 39 % of pp512 at 2048 positions.
void AttendTokens(const AttendQueries& qs, const void* k, const void* v, KvTypes types,
                  int64_t k_stride, int64_t v_stride, int d_k, int d_v, float scale,
                  float* scratch);
// The same with an explicit variant (tests, benchmarks); it must be supported (checked).
void AttendTokens(Isa isa, const AttendQueries& qs, const void* k, const void* v, KvTypes types,
                  int64_t k_stride, int64_t v_stride, int d_k, int d_v, float scale,
                  float* scratch);

// Writes n floats as one KV cache row of `type` at dst: f32 as they are; f16 as
// quant/float16.h's Fp32ToFp16 (round to nearest even, overflow to inf, NaN to the quiet NaN
// 0x7E00 with its sign); q8_0 as quant/quantize.h's QuantizeRow (n a multiple of kKvBlockQ8),
// except that a block holding a NaN or an infinity gets a NaN scale, so that, as with f16,
// a non-finite K or V value makes the output NaN rather than vanish. (q' likewise.) The same
// bits in every variant.
void StoreKv(const float* src, int64_t n, KvElemType type, void* dst);
// The same with an explicit variant (tests, benchmarks); it must be supported (checked).
void StoreKv(Isa isa, const float* src, int64_t n, KvElemType type, void* dst);

}  // namespace mt
