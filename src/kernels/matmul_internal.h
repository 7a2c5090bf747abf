// Internal interface between the dispatcher (matmul.cc) and the per-ISA kernel files
// (matmul_scalar.cc, matmul_avx2.cc, matmul_avx512.cc).
//
// The per-ISA files are compiled with their own -m flags. To keep their code out of the
// other files (ODR: an inline function or template instantiated in two files with
// different flags may be merged into one, which might use an instruction the CPU lacks),
// they use only what this header declares: plain structs, constants, function
// declarations; and they keep all their own code in anonymous namespaces. They must not
// call inline functions of other headers (WeightMatrix::row, Activations accessors, std
// templates shared with other files).
#pragma once

#include <cstdint>

#include "kernels/isa.h"
#include "quant/ggml_type.h"

namespace mt::kernels {

// A weight matrix as the kernels see it (see WeightMatrix).
struct WeightView {
  GgmlType type;
  const uint8_t* data;  // row r at data + r * row_bytes
  int64_t rows;
  int64_t cols;
  uint64_t row_bytes;
  bool panels;  // WeightLayout::kPanels (PanelsReadable in matmul.cc: which variant reads which)
};

// Activation layouts, one token row at base + t * token_stride (64-byte aligned). Every byte
// of a row is written (padding is zero), so equal inputs give equal rows.
//
// kF32:  float x[PadCols(cols, 32)]; the padding is zero.
// kQ8_0: int8 qs[nbp * 32], then float d[nbp], then float s[nbp] = d * (sum of the block's
//        qs) (for the minimum term of Q4_1/Q5_1); nbp = blocks rounded up to even (so that a
//        64-element step of two blocks always exists); padding blocks are all zero. d starts
//        at Q8_0ScaleOffset(nbp), s at Q8_0SumOffset(nbp).
// kQ8_K: ActBlockQ8K per super-block of 256.
struct alignas(64) ActBlockQ8K {
  int8_t qs[256];    // codes, in element order
  float bd[16];      // d * bsum[j]: the block sums pre-scaled (K-quant minimum term)
  int16_t bsum[16];  // sum of qs[16j .. 16j + 15]
  float d;           // scale: x ~ qs * d
  // bsum[2j] + bsum[2j + 1], the sums per 32 (|.| <= 4064): derived from bsum by the
  // dispatcher (so every variant writes the same bytes) for the Q4_K/Q5_K minimum term, which
  // the AVX-512 panel kernels broadcast in pairs into vpdpwssd and the AVX2 ones into
  // vpmaddwd.
  int16_t bsum32[8];
  uint8_t pad[76];  // zero (written by the dispatcher, so that rows are deterministic)
};
static_assert(sizeof(ActBlockQ8K) == 448);

constexpr int64_t Q8_0PaddedBlocks(int64_t cols) { return (cols / 32 + 1) / 2 * 2; }
constexpr int64_t Q8_0ScaleOffset(int64_t nbp) { return nbp * 32; }  // a multiple of 64
constexpr int64_t Q8_0SumOffset(int64_t nbp) { return nbp * 36; }

struct ActView {
  const uint8_t* data;   // token 0
  int64_t token_stride;  // bytes
  int64_t n_tok;
  int64_t cols;
};

// One variant's entry points.
struct KernelTable {
  // Quantizes one token of `cols` floats into the kQ8_0 / kQ8_K layout at dst (64-byte
  // aligned). All variants produce identical bytes for finite input.
  void (*quantize_q8_0)(const float* x, int64_t cols, uint8_t* dst);
  void (*quantize_q8_k)(const float* x, int64_t cols, uint8_t* dst);
  // y[t * y_stride + r] for r in [r0, r1), t in [0, a.n_tok). The activation format is the
  // one ActFormatFor(w.type) names; the dispatcher has checked everything.
  void (*matmul)(const WeightView& w, const ActView& a, float* y, int64_t y_stride, int64_t r0,
                 int64_t r1);
  // DotF32 (kernels/matmul.h): 16 partial sums, acc[i % 16] += a[i] * b[i] (a product, then
  // a sum: no FMA), combined as Reduce16 does (halves, then 4, 2, 1). Identical bits in
  // every variant.
  float (*dot_f32)(const float* a, const float* b, int64_t n);
};

// AVX-512 Q4_K / Q5_K / Q6_K products on transposed 16-row panels (matmul_kquant_avx512.cc),
// with the KernelTable::matmul contract; false (nothing done) for other weight types.
bool MatMulKQuantAvx512(const WeightView& w, const ActView& a, float* y, int64_t y_stride,
                        int64_t r0, int64_t r1);
// Q2_K, Q3_K and IQ4_XS products, one entry per variant (matmul_lowbit_scalar.cc,
// matmul_lowbit_avx2.cc, matmul_lowbit_avx512.cc), with the KernelTable::matmul contract;
// false (nothing done) for other weight types. The AVX-512 one also reads kPanels matrices.
bool MatMulLowBitScalar(const WeightView& w, const ActView& a, float* y, int64_t y_stride,
                        int64_t r0, int64_t r1);
bool MatMulLowBitAvx2(const WeightView& w, const ActView& a, float* y, int64_t y_stride, int64_t r0,
                      int64_t r1);
bool MatMulLowBitAvx512(const WeightView& w, const ActView& a, float* y, int64_t y_stride,
                        int64_t r0, int64_t r1);
// IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and IQ1_M products, one entry per variant
// (matmul_iq_scalar.cc, matmul_iq_avx2.cc, matmul_iq_avx512.cc), with the KernelTable::matmul
// contract; false (nothing done) for other weight types. GGUF rows only.
bool MatMulIqScalar(const WeightView& w, const ActView& a, float* y, int64_t y_stride, int64_t r0,
                    int64_t r1);
bool MatMulIqAvx2(const WeightView& w, const ActView& a, float* y, int64_t y_stride, int64_t r0,
                  int64_t r1);
bool MatMulIqAvx512(const WeightView& w, const ActView& a, float* y, int64_t y_stride, int64_t r0,
                    int64_t r1);
// AVX-512 BF16 (vdpbf16ps) products of BF16 weights (matmul_bf16_avx512.cc), with the
// KernelTable::matmul contract; only for CPUs with AVX512_BF16 (the caller checks).
void MatMulBf16Avx512(const WeightView& w, const ActView& a, float* y, int64_t y_stride, int64_t r0,
                      int64_t r1);
// True if this CPU has AVX512_BF16 and MOETIER_BF16_DOT is not "0" (the AVX-512 variant
// then runs BF16 weights through MatMulBf16Avx512). Resolved once.
bool UseBf16Dot();
// Rewrites a matrix with a panel form (kernels/panel_layout.h: Q4_K, Q5_K, Q6_K, Q2_K, Q3_K,
// IQ4_XS) of `rows` (a multiple of 16) GGUF rows from src into the kPanels layout at dst (dst
// may be src); scratch: 16 * row_bytes bytes.
void RepackKQuantAvx512(GgmlType type, int64_t rows, int64_t cols, uint64_t row_bytes,
                        const uint8_t* src, uint8_t* dst, uint8_t* scratch);

const KernelTable& ScalarKernels();
const KernelTable& Avx2Kernels();    // only in x86 builds
const KernelTable& Avx512Kernels();  // only in x86 builds

}  // namespace mt::kernels
