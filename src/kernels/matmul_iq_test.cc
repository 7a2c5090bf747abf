// The IQ lattice types' kernels (matmul_iq_*.cc) beyond the shared parameterized tests of
// matmul_test.cc: non-finite super-scales, as the K-quants handle them (the row's products
// become NaN or infinite, which the engine's logit check reports; the other rows are exact).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "quant/float16.h"
#include "quant/quantize.h"

namespace mt {
namespace {

constexpr GgmlType kIqTypes[] = {GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS, GgmlType::kIQ2_S,
                                 GgmlType::kIQ3_XXS, GgmlType::kIQ3_S,  GgmlType::kIQ1_S,
                                 GgmlType::kIQ1_M};

// Sets the f16 super-scale of block b of a row (IQ1_M keeps it in its scale words' top nibbles).
void SetScale(GgmlType type, uint8_t* row, int64_t b, uint16_t h) {
  uint8_t* blk = row + b * TraitsOf(type).type_size;
  if (type == GgmlType::kIQ1_M) {
    for (int k = 0; k < 4; ++k) {
      blk[49 + 2 * k] =
          static_cast<uint8_t>((blk[49 + 2 * k] & 0x0F) | ((h >> (4 * k)) & 0xF) << 4);
    }
  } else {
    std::memcpy(blk, &h, 2);
  }
}

TEST(MatMulIq, NonFiniteScaleSpoilsOnlyItsRow) {
  const int64_t rows = 5, cols = 3 * 256, n_tok = 6;
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> w(rows * cols), x(n_tok * cols);
  for (float& v : w) v = 0.02f * g(rng);
  for (float& v : x) v = g(rng);
  for (GgmlType type : kIqTypes) {
    const uint64_t row_bytes = RowBytes(type, cols);
    std::vector<uint8_t> q(rows * row_bytes);
    for (int64_t r = 0; r < rows; ++r) {
      QuantizeRow(type, w.data() + r * cols, q.data() + r * row_bytes, cols, QuantEffort::kFast);
    }
    SetScale(type, q.data() + 1 * row_bytes, 2, 0x7E00);  // row 1, block 2: NaN
    SetScale(type, q.data() + 3 * row_bytes, 0, 0x7C00);  // row 3, block 0: +inf
    const WeightMatrix wm{type, q.data(), rows, cols, row_bytes};
    for (Isa isa : kAllIsas) {
      if (!IsaSupported(isa)) {
        std::printf("[  SKIPPED ] %s: not supported by this CPU\n", IsaName(isa).data());
        continue;
      }
      SCOPED_TRACE(std::string(TypeName(type)) + " " + std::string(IsaName(isa)));
      Activations a;
      a.Prepare(ActFormatFor(type), n_tok, cols);
      a.QuantizeTokens(isa, x.data(), cols, 0, n_tok);
      std::vector<float> y(n_tok * rows);
      MatMul(isa, wm, a, y.data(), rows, 0, rows);
      for (int64_t t = 0; t < n_tok; ++t) {
        for (int64_t r = 0; r < rows; ++r) {
          const float v = y[t * rows + r];
          if (r == 1) {
            EXPECT_TRUE(std::isnan(v)) << "row " << r << " token " << t;
          } else if (r == 3) {
            EXPECT_FALSE(std::isfinite(v)) << "row " << r << " token " << t;
          } else {
            EXPECT_TRUE(std::isfinite(v)) << "row " << r << " token " << t;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace mt
