#include "kernels/matmul.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "base/check.h"
#include "base/cpu_features.h"
#include "kernels/matmul_internal.h"
#include "kernels/panel_layout.h"
#include "quant/dequant.h"

namespace mt {

bool MatMulSupports(GgmlType type) { return CanDequantize(type); }

// ---------------------------------------------------------------------------------------
// Float reference path.

void MatMulRows(const WeightMatrix& w, const float* x, int64_t x_stride, int64_t n_tok, float* y,
                int64_t y_stride, int64_t row_begin, int64_t row_end) {
  MT_CHECK_MSG(w.layout == WeightLayout::kRows, "MatMulRows: reads GGUF rows only");
  thread_local std::vector<float> row_buf;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* wr;
    // F32 rows are read in place where they are float-aligned (a file's alignment may be 1:
    // then they are copied, as DequantizeRow does for F32).
    const bool aligned = reinterpret_cast<uintptr_t>(w.row(r)) % alignof(float) == 0;
    if (w.type == GgmlType::kF32 && aligned) {
      wr = reinterpret_cast<const float*>(w.row(r));
    } else {
      row_buf.resize(w.cols);
      DequantizeRow(w.type, w.row(r), row_buf.data(), w.cols);
      wr = row_buf.data();
    }
    for (int64_t t = 0; t < n_tok; ++t) y[t * y_stride + r] = DotF32(wr, x + t * x_stride, w.cols);
  }
}

// ---------------------------------------------------------------------------------------
// Fast path: activations.

namespace {

int64_t RoundUp(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// Bytes of one token row of `cols` columns (a multiple of 64).
int64_t TokenStride(ActFormat format, int64_t cols) {
  switch (format) {
    case ActFormat::kF32:
      return RoundUp(cols, 32) * 4;  // 32: a BF16 dot-product step (matmul_bf16_avx512.cc)
    case ActFormat::kQ8_0: {
      const int64_t nbp = kernels::Q8_0PaddedBlocks(cols);
      return RoundUp(kernels::Q8_0SumOffset(nbp) + nbp * 4, 64);
    }
    case ActFormat::kQ8_K:
      return cols / 256 * static_cast<int64_t>(sizeof(kernels::ActBlockQ8K));
  }
  return 0;
}

const kernels::KernelTable& Table(Isa isa) {
  MT_CHECK_MSG(IsaSupported(isa), "matmul variant not supported by this CPU or build");
  switch (isa) {
    case Isa::kScalar:
      return kernels::ScalarKernels();
#ifdef MT_KERNELS_X86
    case Isa::kAvx2:
      return kernels::Avx2Kernels();
    case Isa::kAvx512:
      return kernels::Avx512Kernels();
#endif
    default:
      break;
  }
  MT_CHECK_MSG(false, "matmul variant not compiled in");
  return kernels::ScalarKernels();
}

}  // namespace

namespace kernels {
bool UseBf16Dot() {
  static const bool use = [] {
    const char* env = std::getenv("MOETIER_BF16_DOT");
    return GetCpuFeatures().avx512bf16 && !(env != nullptr && std::string_view(env) == "0");
  }();
  return use;
}
}  // namespace kernels

float DotF32(const float* a, const float* b, int64_t n) {
  static const kernels::KernelTable& table = Table(ActiveIsa());
  return table.dot_f32(a, b, n);
}

float DotF32(Isa isa, const float* a, const float* b, int64_t n) {
  return Table(isa).dot_f32(a, b, n);
}

ActFormat ActFormatFor(GgmlType weight_type) {
  switch (weight_type) {
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K:
    case GgmlType::kIQ4_XS:
    case GgmlType::kIQ2_XXS:  // the IQ lattice types: llama.cpp's vec_dot type for them too
    case GgmlType::kIQ2_XS:
    case GgmlType::kIQ2_S:
    case GgmlType::kIQ3_XXS:
    case GgmlType::kIQ3_S:
    case GgmlType::kIQ1_S:
    case GgmlType::kIQ1_M:
      return ActFormat::kQ8_K;
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kMXFP4:
    case GgmlType::kIQ4_NL:
      return ActFormat::kQ8_0;
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return ActFormat::kF32;
    default:
      break;
  }
  MT_CHECK_MSG(false, "ActFormatFor: weight type not supported by MatMul");
  return ActFormat::kF32;
}

int64_t ActBlockSize(ActFormat format) {
  switch (format) {
    case ActFormat::kF32:
      return 1;
    case ActFormat::kQ8_0:
      return 32;
    case ActFormat::kQ8_K:
      return 256;
  }
  return 1;
}

void Activations::Free::operator()(uint8_t* p) const {
  ::operator delete[](p, std::align_val_t{64});
}

Activations::Activations() = default;
Activations::~Activations() = default;
Activations::Activations(Activations&&) noexcept = default;
Activations& Activations::operator=(Activations&&) noexcept = default;

uint64_t Activations::ReserveBytes(int64_t max_tok, int64_t max_cols) {
  MT_CHECK(max_tok >= 0 && max_cols >= 0);
  const int64_t cols = RoundUp(max_cols, 256);
  int64_t stride = 0;
  for (ActFormat f : {ActFormat::kF32, ActFormat::kQ8_0, ActFormat::kQ8_K}) {
    stride = std::max(stride, TokenStride(f, cols));
  }
  return static_cast<uint64_t>(max_tok * stride);
}

void Activations::Reserve(int64_t max_tok, int64_t max_cols) {
  const size_t bytes = static_cast<size_t>(ReserveBytes(max_tok, max_cols));
  if (bytes <= capacity_) return;
  buffer_.reset(static_cast<uint8_t*>(::operator new[](bytes, std::align_val_t{64})));
  capacity_ = bytes;
  data_ = buffer_.get();
  n_tok_ = 0;
}

void Activations::Prepare(ActFormat format, int64_t n_tok, int64_t cols) {
  MT_CHECK(n_tok >= 0 && cols >= 0);
  MT_CHECK_MSG(cols % ActBlockSize(format) == 0, "Activations: cols not a multiple of the block");
  const int64_t stride = TokenStride(format, cols);
  if (static_cast<size_t>(n_tok * stride) > capacity_) Reserve(n_tok, cols);
  format_ = format;
  n_tok_ = n_tok;
  cols_ = cols;
  token_stride_ = stride;
}

void Activations::QuantizeTokens(const float* x, int64_t x_stride, int64_t t0, int64_t t1) {
  QuantizeTokens(ActiveIsa(), x, x_stride, t0, t1);
}

namespace {

// True if x[0, n) holds a NaN or an infinity (exponent bits all set). Integer ops, so the
// compiler vectorizes it without reassociating floats.
bool HasNonFinite(const float* x, int64_t n) {
  int32_t hits = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, 4);
    hits += (bits & 0x7F800000u) == 0x7F800000u;
  }
  return hits != 0;
}

}  // namespace

void Activations::QuantizeTokens(Isa isa, const float* x, int64_t x_stride, int64_t t0,
                                 int64_t t1) {
  MT_CHECK(0 <= t0 && t0 <= t1 && t1 <= n_tok_);
  const kernels::KernelTable& k = Table(isa);
  for (int64_t t = t0; t < t1; ++t) {
    const float* src = x + t * x_stride;
    uint8_t* dst = data_ + t * token_stride_;
    switch (format_) {
      case ActFormat::kF32:
        std::memcpy(dst, src, static_cast<size_t>(cols_) * 4);
        std::memset(dst + cols_ * 4, 0, static_cast<size_t>(token_stride_ - cols_ * 4));
        break;
      case ActFormat::kQ8_0: {
        k.quantize_q8_0(src, cols_, dst);
        const int64_t used = kernels::Q8_0SumOffset(kernels::Q8_0PaddedBlocks(cols_)) +
                             kernels::Q8_0PaddedBlocks(cols_) * 4;
        std::memset(dst + used, 0, static_cast<size_t>(token_stride_ - used));
        break;
      }
      case ActFormat::kQ8_K: {
        k.quantize_q8_k(src, cols_, dst);
        auto* blocks = reinterpret_cast<kernels::ActBlockQ8K*>(dst);
        for (int64_t b = 0; b < cols_ / 256; ++b) {
          kernels::ActBlockQ8K& o = blocks[b];
          for (int j = 0; j < 8; ++j)
            o.bsum32[j] = static_cast<int16_t>(o.bsum[2 * j] + o.bsum[2 * j + 1]);
          std::memset(o.pad, 0, sizeof(o.pad));
        }
        break;
      }
    }
    // Integer codes cannot carry a NaN or an infinity: the token's every scale becomes NaN
    // instead, so that the products (and in the end the logits, which the engine checks)
    // show it rather than a finite value quantized from garbage.
    if (format_ != ActFormat::kF32 && HasNonFinite(src, cols_)) Poison(dst);
  }
}

void Activations::Poison(uint8_t* row) const {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (format_ == ActFormat::kQ8_0) {
    const int64_t nbp = kernels::Q8_0PaddedBlocks(cols_);
    for (int64_t b = 0; b < nbp; ++b) {
      std::memcpy(row + kernels::Q8_0ScaleOffset(nbp) + 4 * b, &nan, 4);
      std::memcpy(row + kernels::Q8_0SumOffset(nbp) + 4 * b, &nan, 4);
    }
    return;
  }
  auto* blocks = reinterpret_cast<kernels::ActBlockQ8K*>(row);
  for (int64_t b = 0; b < cols_ / 256; ++b) {
    blocks[b].d = nan;
    for (float& v : blocks[b].bd) v = nan;
  }
}

void Activations::Quantize(ActFormat format, const float* x, int64_t x_stride, int64_t n_tok,
                           int64_t cols) {
  Prepare(format, n_tok, cols);
  QuantizeTokens(x, x_stride, 0, n_tok);
}

float Activations::Scale(int64_t t, int64_t c) const {
  MT_CHECK(0 <= t && t < n_tok_ && 0 <= c && c < cols_);
  const uint8_t* row = token(t);
  switch (format_) {
    case ActFormat::kF32:
      return 0.0f;
    case ActFormat::kQ8_0: {
      float d;
      std::memcpy(&d, row + kernels::Q8_0ScaleOffset(kernels::Q8_0PaddedBlocks(cols_)) + c / 32 * 4,
                  4);
      return d;
    }
    case ActFormat::kQ8_K:
      return reinterpret_cast<const kernels::ActBlockQ8K*>(row)[c / 256].d;
  }
  return 0.0f;
}

int Activations::Code(int64_t t, int64_t c) const {
  MT_CHECK(0 <= t && t < n_tok_ && 0 <= c && c < cols_);
  MT_CHECK(format_ != ActFormat::kF32);
  const uint8_t* row = token(t);
  if (format_ == ActFormat::kQ8_0) return static_cast<int8_t>(row[c]);
  return reinterpret_cast<const kernels::ActBlockQ8K*>(row)[c / 256].qs[c % 256];
}

float Activations::Value(int64_t t, int64_t c) const {
  MT_CHECK(0 <= t && t < n_tok_ && 0 <= c && c < cols_);
  if (format_ == ActFormat::kF32) return reinterpret_cast<const float*>(token(t))[c];
  return static_cast<float>(Code(t, c)) * Scale(t, c);
}

// ---------------------------------------------------------------------------------------
// Fast path: dispatch.

namespace {

// The K-quant matrices that a variant's kernels read as 16-row panels: Q4_K, Q5_K, Q6_K, Q2_K,
// Q3_K and IQ4_XS on AVX-512 (matmul_kquant_avx512.cc, matmul_lowbit_avx512.cc); Q4_K and
// Q5_K on AVX2 (matmul_avx2.cc: 1.4-2x its row kernel's products). AVX2
// keeps Q6_K in rows: a panel kernel for it ran at twice its row kernel's speed from cache
// but at ~0.6x from DRAM, and olmoe q4_k_m lost ~25 % in pp128 and tg32 with it.
bool PanelsReadable(Isa isa, GgmlType type) {
  const bool k4 = type == GgmlType::kQ4_K || type == GgmlType::kQ5_K;
  const bool low = type == GgmlType::kQ2_K || type == GgmlType::kQ3_K || type == GgmlType::kIQ4_XS;
  return (isa == Isa::kAvx512 && (k4 || low || type == GgmlType::kQ6_K)) ||
         (isa == Isa::kAvx2 && k4);
}

void CheckedMatMul(const kernels::KernelTable& table, Isa isa, const WeightMatrix& w,
                   const Activations& a, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  MT_CHECK_MSG(MatMulSupports(w.type), "MatMul: weight type not supported");
  MT_CHECK_MSG(a.format() == ActFormatFor(w.type), "MatMul: activations in the wrong format");
  MT_CHECK_MSG(a.cols() == w.cols, "MatMul: activation columns != weight columns");
  MT_CHECK(0 <= r0 && r0 <= r1 && r1 <= w.rows);
  const bool panels = w.layout == WeightLayout::kPanels;
  if (panels) {
    MT_CHECK_MSG(PanelsReadable(isa, w.type),
                 "MatMul: this variant cannot read these kPanels weights");
    MT_CHECK_MSG(r0 % 16 == 0 && (r1 % 16 == 0 || r1 == w.rows),
                 "MatMul: kPanels row ranges start and end on 16-row panels");
  }
  if (r0 == r1 || a.n_tok() == 0) return;
  const kernels::WeightView wv{w.type, w.data, w.rows, w.cols, w.row_bytes, panels};
  const kernels::ActView av{a.token(0), a.token_stride(), a.n_tok(), a.cols()};
  table.matmul(wv, av, y, y_stride, r0, r1);
}

}  // namespace

void MatMul(Isa isa, const WeightMatrix& w, const Activations& a, float* y, int64_t y_stride,
            int64_t r0, int64_t r1) {
  CheckedMatMul(Table(isa), isa, w, a, y, y_stride, r0, r1);
}

void MatMul(const WeightMatrix& w, const Activations& a, float* y, int64_t y_stride, int64_t r0,
            int64_t r1) {
  static const Isa isa = ActiveIsa();
  static const kernels::KernelTable& table = Table(isa);
  CheckedMatMul(table, isa, w, a, y, y_stride, r0, r1);
}

bool PanelsPreferred(GgmlType type, int64_t rows) {
  return PanelsReadable(ActiveIsa(), type) && HasPanelForm(type, rows);
}

WeightLayout CopyForKernels(const WeightMatrix& w, uint8_t* dst) {
  const bool panels = PanelsPreferred(w.type, w.rows);
  if (w.layout == WeightLayout::kPanels && !panels) {
    PanelsToRows(w.type, w.rows, w.cols, w.data, dst);  // a pack's panels, on another CPU
    return WeightLayout::kRows;
  }
  if (w.layout == WeightLayout::kRows && panels) {
    RepackToPanels(w.type, w.rows, w.cols, w.data, dst);
    return WeightLayout::kPanels;
  }
  if (dst != w.data) std::memcpy(dst, w.data, w.row_bytes * static_cast<uint64_t>(w.rows));
  return w.layout;
}

void RepackToPanels(GgmlType type, int64_t rows, int64_t cols, const uint8_t* src, uint8_t* dst) {
  MT_CHECK_MSG(PanelsPreferred(type, rows), "RepackToPanels: not a kPanels matrix here");
#ifdef MT_KERNELS_X86
  if (ActiveIsa() == Isa::kAvx512) {
    const uint64_t row_bytes = RowBytes(type, cols);
    // Stream slots repack while decoding: the scratch only grows, so that is no allocation.
    thread_local std::vector<uint8_t> scratch;
    if (scratch.size() < 16 * row_bytes) scratch.resize(16 * row_bytes);
    kernels::RepackKQuantAvx512(type, rows, cols, row_bytes, src, dst, scratch.data());
    return;
  }
#endif
  RowsToPanels(type, rows, cols, src, dst);  // the portable definition (kernels/panel_layout.h)
}

}  // namespace mt
