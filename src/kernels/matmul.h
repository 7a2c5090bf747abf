// Matrix products of quantized weights with float activations.
//
// Semantics (the definition every path must match within its tolerance):
//   y[t * y_stride + r] = sum_c W[r][c] * x[t * x_stride + c]
// for tokens t and weight rows r, W[r][c] being the value quant/dequant.h gives the weight.
//
// Two paths:
//  - MatMulRows: the float reference (dequantize a row, float dot). Slow; kept for the engine
//    until it switches, and as a second opinion.
//  - MatMul: the fast kernels. The input is first put into an Activations object (once per
//    input, reused by every weight that reads it). For K-quant and IQ lattice weights (IQ2_XXS
//    ... IQ1_M) and IQ4_XS the activations are quantized to int8 per block of 256 (Q8_K-like),
//    for Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/MXFP4/IQ4_NL per block of 32 (Q8_0-like); the weight x
//    activation products are then exact integer sums, scaled in float per block, as llama.cpp
//    does. F32/F16/BF16 weights read float activations (weights converted to f32 exactly, f32
//    FMA).
//
// Batch invariance: for a given ISA variant (kernels/isa.h) the value of y for (row r,
// token t) depends only on row r of W and on token t of the input: it is bit-identical
// whatever the number of tokens, the other tokens, and however [r0, r1) is split.
//
// Tolerances (derived at the top of matmul_test.cc, which checks them for every variant):
//  - vs the definition with the *quantized* activations (q * d, as Activations holds them):
//    float rounding only, |err| <= 1e-5 * sum_c |W[r][c] * xq[c]| (worst seen: 2.6e-7).
//  - vs the definition with the float input: plus the activation rounding, which is at most
//    half a step per element: |err| <= sum_c |W[r][c]| * d_block(c) / 2 * (1 + 1e-4) + the
//    above (worst seen: 0.29 of this bound; typical errors are ~sqrt(cols) times smaller).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/isa.h"
#include "quant/ggml_type.h"

namespace mt {

// How a weight matrix's bytes are arranged.
//  kRows:   GGUF: row r at data + r * row_bytes.
//  kPanels: each 16 rows keep their bytes (16 * row_bytes, in place) but transposed so that
//           one vector load serves 16 rows (defined in kernels/panel_layout.h; made fast by
//           RepackToPanels). Only MatMul with the variant that asked for it
//           (PanelsPreferred) reads it.
enum class WeightLayout : uint8_t { kRows, kPanels };

// A 2-D weight: `rows` rows of `cols` elements of `type`, row_bytes per row, arranged as
// `layout` says. Views into a mapping, a copy or a cache slot; owns nothing. Rows may sit at
// any byte address (no alignment needed).
struct WeightMatrix {
  GgmlType type = GgmlType::kF32;
  const uint8_t* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  uint64_t row_bytes = 0;
  WeightLayout layout = WeightLayout::kRows;

  // Row r (kRows only).
  const uint8_t* row(int64_t r) const { return data + static_cast<uint64_t>(r) * row_bytes; }
};

// True if the ActiveIsa() kernels read a `type` matrix of `rows` rows faster as kPanels: the
// AVX-512 Q4_K / Q5_K / Q6_K / Q2_K / Q3_K / IQ4_XS kernels and the AVX2 Q4_K / Q5_K ones,
// rows a multiple of 16. The numbers are the same either
// way (bit for bit): only where the bytes come from differs.
bool PanelsPreferred(GgmlType type, int64_t rows);

// Rewrites the rows x cols kRows matrix at src into kPanels at dst (dst may be src; both
// rows * row_bytes bytes). Requires PanelsPreferred(type, rows). Uses a per-thread scratch
// of 16 rows that only grows (it runs at load, and in stream mode when a cached expert is
// reused).
void RepackToPanels(GgmlType type, int64_t rows, int64_t cols, const uint8_t* src, uint8_t* dst);

// Writes the matrix w (kRows, or kPanels as a pack may store it) to dst (w.row_bytes *
// w.rows bytes; dst may be w.data) in the layout the kernels read fastest, and returns that
// layout: kPanels where PanelsPreferred, else kRows (panels turned back into rows:
// kernels/panel_layout.h). For the memory moetier owns: dense weights at load, resident
// experts, stream cache slots.
WeightLayout CopyForKernels(const WeightMatrix& w, uint8_t* dst);

// True if MatMulRows and MatMul can read `type`: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0,
// Q5_1, Q4_K, Q5_K, Q6_K, MXFP4, Q2_K, Q3_K, IQ4_NL, IQ4_XS, the IQ lattice types IQ2_XXS,
// IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M (exactly what quant/dequant.h's CanDequantize
// accepts).
bool MatMulSupports(GgmlType type);

// ---------------------------------------------------------------------------------------
// Float reference path.

void MatMulRows(const WeightMatrix& w, const float* x, int64_t x_stride, int64_t n_tok, float* y,
                int64_t y_stride, int64_t row_begin, int64_t row_end);

// Dot product of two float vectors with the fixed summation order MatMulRows uses: 16
// partial sums (element i into sum i % 16, a product then an add, no FMA) combined by
// halves. Vectorised per ISA variant with identical bits in every variant.
float DotF32(const float* a, const float* b, int64_t n);
// The same with an explicit variant (tests, benchmarks); it must be supported (checked).
float DotF32(Isa isa, const float* a, const float* b, int64_t n);

// ---------------------------------------------------------------------------------------
// Fast path.

// How an input is stored for the kernels. One format per weight type (ActFormatFor).
//  kF32:  the floats themselves.
//  kQ8_0: per block of 32 elements: d = amax / 127, q = round_half_even(x * (127 / amax)),
//         q in [-127, 127] (all zero, d = 0, when amax = 0). x ~ q * d. (Plus d * sum of q,
//         for the block minimums of Q4_1/Q5_1.)
//  kQ8_K: the same per block of 256 elements (plus the sums of q over each 16, for the
//         sub-block minimums of the K-quants).
// The quantization is a function of the token's own values only, and every ISA variant
// produces the same bytes (for finite input).
enum class ActFormat : uint8_t { kF32, kQ8_0, kQ8_K };

// The activation format MatMul needs for weights of `weight_type` (which must satisfy
// MatMulSupports; checked).
ActFormat ActFormatFor(GgmlType weight_type);

// Elements per activation block: 1, 32, 256. The number of columns of an input must be a
// multiple of it (it is for every weight of that format: a row is whole blocks).
int64_t ActBlockSize(ActFormat format);

// An input of n_tok tokens x cols columns in one ActFormat. Owns 64-byte aligned memory.
//
// Sizing: Reserve(max tokens of a batch, max columns of any input) once; Prepare/Quantize
// then never allocate. (They grow the buffer if asked for more, which allocates.)
// Memory per token, rounded up to 64 bytes: kF32 4 * cols; kQ8_0 1.25 * cols;
// kQ8_K 1.75 * cols.
//
// Thread-safety: Prepare/Quantize mutate; QuantizeTokens on disjoint token ranges may run
// concurrently after one Prepare; MatMul only reads, from any number of threads.
class Activations {
 public:
  Activations();
  ~Activations();
  Activations(Activations&&) noexcept;
  Activations& operator=(Activations&&) noexcept;

  void Reserve(int64_t max_tok, int64_t max_cols);
  // The bytes Reserve(max_tok, max_cols) takes.
  static uint64_t ReserveBytes(int64_t max_tok, int64_t max_cols);

  // Quantizes n_tok rows of `cols` floats (row t at x + t * x_stride) into `format`, with the
  // ActiveIsa() variant. = Prepare + QuantizeTokens(0, n_tok).
  void Quantize(ActFormat format, const float* x, int64_t x_stride, int64_t n_tok, int64_t cols);

  // Sets the shape (may grow the buffer), without filling anything.
  void Prepare(ActFormat format, int64_t n_tok, int64_t cols);
  // Fills tokens [t0, t1) from x (token t at x + t * x_stride; x points at token 0).
  void QuantizeTokens(const float* x, int64_t x_stride, int64_t t0, int64_t t1);
  // The same with an explicit variant (tests, benchmarks). The isa must be supported.
  void QuantizeTokens(Isa isa, const float* x, int64_t x_stride, int64_t t0, int64_t t1);

  ActFormat format() const { return format_; }
  int64_t n_tok() const { return n_tok_; }
  int64_t cols() const { return cols_; }

  // The value the kernels use for element (t, c): q * d, or the float itself (kF32).
  float Value(int64_t t, int64_t c) const;
  // The block scale d of element (t, c) (kQ8_0, kQ8_K); 0 for kF32.
  float Scale(int64_t t, int64_t c) const;
  // The int8 code of element (t, c) (kQ8_0, kQ8_K).
  int Code(int64_t t, int64_t c) const;

  // Raw layout for the kernels (kernels/matmul_internal.h describes it).
  const uint8_t* token(int64_t t) const { return data_ + t * token_stride_; }
  int64_t token_stride() const { return token_stride_; }

 private:
  // Makes every scale of a quantized token row NaN (its floats held a NaN or an infinity).
  void Poison(uint8_t* row) const;

  struct Free {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, Free> buffer_;
  size_t capacity_ = 0;  // bytes
  uint8_t* data_ = nullptr;
  ActFormat format_ = ActFormat::kF32;
  int64_t n_tok_ = 0;
  int64_t cols_ = 0;
  int64_t token_stride_ = 0;  // bytes, a multiple of 64
};

// y[t * y_stride + r] = sum_c W[r][c] * a[t][c] for rows r in [r0, r1) and all a.n_tok()
// tokens, with the ActiveIsa() variant. Requirements (checked): MatMulSupports(w.type),
// a.format() == ActFormatFor(w.type), a.cols() == w.cols, 0 <= r0 <= r1 <= w.rows; for a
// kPanels matrix, the variant it was packed for and r0, r1 multiples of 16 (or r1 = rows).
// No heap allocation; uses about 30 KiB of stack. Thread-safe: calls on disjoint row ranges
// (or different outputs) may run concurrently.
void MatMul(const WeightMatrix& w, const Activations& a, float* y, int64_t y_stride, int64_t r0,
            int64_t r1);

// The same with an explicit variant (tests, benchmarks). The isa must be supported.
void MatMul(Isa isa, const WeightMatrix& w, const Activations& a, float* y, int64_t y_stride,
            int64_t r0, int64_t r1);

}  // namespace mt
