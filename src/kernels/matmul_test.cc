// Tests of the fast matmul path (kernels/matmul.h) for every ISA variant this CPU runs.
//
// References, computed here independently in double precision:
//  - "quantized": sum_c W[r][c] * (code(t, c) * d(t, c)), W from the reference dequantizer
//    (quant/dequant.h) and the activation codes/scales the Activations object holds. The
//    kernel differs from it by float rounding only.
//  - "float": sum_c W[r][c] * x[t][c], the definition itself.
//
// Tolerances and how they follow:
//  - kernel vs quantized reference: the integer sums are exact; what is left is a few float
//    roundings per block (scale products, int->float of sums below 2^25, one FMA) and the
//    accumulation over at most cols / 16 blocks per lane plus a 16-lane tree. Each rounding
//    is <= 2^-24 relative to a term bounded by sum |W x|-like magnitudes; K-quant terms
//    d*sc*q and dmin*m may be up to a few times |W| each (they cancel), so we allow
//    kTightRel = 1e-5 (about 170 ulps) of mag = sum_c |W[r][c] * xq[c]|. A single wrong
//    element changes y by ~mag / cols, far above this for every shape here.
//  - kernel vs float reference: in addition, each activation is off by at most half a
//    step: |q d - x| <= d / 2 (1 + 1e-4) (round to nearest, plus the roundings of x * id
//    and id * d), so |err| <= sum_c |W[r][c]| * d(c) / 2 * (1 + 1e-4) + kTightRel * mag.
//  - variant vs scalar variant: the same activations, exact integer sums; both within the
//    tight tolerance of the quantized reference, so within 2 * kTightRel * mag of each other.
//  - the one kernel that rounds float activations itself (BF16 weights on AVX512_BF16, see
//    KernelActRel) gets 2^-8 * mag more in each of these.
#include "kernels/matmul.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/matmul_internal.h"
#include "quant/dequant.h"
#include "quant/float16.h"
#include "quant/quantize.h"

namespace mt {
namespace {

constexpr double kTightRel = 1e-5;

const GgmlType kAllTypes[] = {
    GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kQ8_0, GgmlType::kQ4_0,
    GgmlType::kMXFP4, GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ4_1,
    GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kIQ4_NL,
    GgmlType::kIQ4_XS,
    // The IQ lattice types (matmul_iq_*.cc).
    GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS, GgmlType::kIQ2_S, GgmlType::kIQ3_XXS, GgmlType::kIQ3_S,
    GgmlType::kIQ1_S, GgmlType::kIQ1_M};

// Columns for a type: several blocks, odd counts where the format allows.
int64_t TestCols(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K:
    case GgmlType::kIQ4_XS:
    case GgmlType::kIQ2_XXS:
    case GgmlType::kIQ2_XS:
    case GgmlType::kIQ2_S:
    case GgmlType::kIQ3_XXS:
    case GgmlType::kIQ3_S:
    case GgmlType::kIQ1_S:
    case GgmlType::kIQ1_M:
      return 5 * 256;
    case GgmlType::kF32:
      return 100;  // not a multiple of 16: masked tail
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return 200;
    default:
      return 11 * 32;  // odd number of 32-blocks
  }
}

// A weight matrix plus its reference dequantization. Rows start at an odd address.
struct TestMatrix {
  std::vector<uint8_t> bytes;
  WeightMatrix w;
  std::vector<float> deq;  // (rows, cols)
};

// Writes an f16 at p.
void PutF16(uint8_t* p, float v) {
  const uint16_t h = Fp32ToFp16(v);
  std::memcpy(p, &h, 2);
}

// random_bytes: every code and sub-scale uniformly random (extremes the quantizer may never
// write: Q8_0 -128, Q6_K scale -128, 6-bit scales/mins of 63), with sane f16 super-scales.
TestMatrix MakeMatrix(GgmlType type, int64_t rows, int64_t cols, uint32_t seed, bool random_bytes) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  const uint64_t row_bytes = RowBytes(type, cols);
  TestMatrix m;
  m.bytes.assign(rows * row_bytes + 3, 0);
  uint8_t* base = m.bytes.data() + 3;
  const GgmlTypeTraits& tr = TraitsOf(type);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* dst = base + r * row_bytes;
    if (!random_bytes || tr.block_size == 1) {
      const float scale = 0.02f * (1.0f + 3.0f * uni(rng));  // rows of different magnitude
      const float shift = 0.01f * gauss(rng);                // and offset (K-quant mins)
      for (auto& v : row) v = shift + scale * gauss(rng);
      QuantizeRow(type, row.data(), dst, cols, QuantEffort::kFast);
      continue;
    }
    for (uint64_t i = 0; i < row_bytes; ++i) dst[i] = static_cast<uint8_t>(rng());
    for (int64_t b = 0; b < cols / tr.block_size; ++b) {
      uint8_t* blk = dst + b * tr.type_size;
      const float d = 0.001f + 0.01f * uni(rng);
      switch (type) {
        case GgmlType::kQ4_K:
        case GgmlType::kQ5_K:
        case GgmlType::kQ4_1:
        case GgmlType::kQ5_1:
          PutF16(blk, d);
          PutF16(blk + 2, type == GgmlType::kQ4_1 || type == GgmlType::kQ5_1 ? -d : 0.5f * d);
          break;
        case GgmlType::kQ6_K:
          PutF16(blk + 208, 0.1f * d);
          break;
        case GgmlType::kMXFP4:
          blk[0] = static_cast<uint8_t>(118 + rng() % 12);
          break;
        case GgmlType::kQ2_K:
          PutF16(blk + 80, d);
          PutF16(blk + 82, 0.5f * d);
          break;
        case GgmlType::kQ3_K:
          PutF16(blk + 108, 0.1f * d);
          break;
        case GgmlType::kIQ4_XS:
          PutF16(blk, 0.01f * d);
          break;
        case GgmlType::kIQ1_M: {  // d's four nibbles top the four scale words (bytes 48..55)
          const uint16_t h = Fp32ToFp16(d);
          for (int k = 0; k < 4; ++k) {
            blk[49 + 2 * k] =
                static_cast<uint8_t>((blk[49 + 2 * k] & 0x0F) | ((h >> (4 * k)) & 0xF) << 4);
          }
          break;
        }
        default:  // Q8_0, Q4_0, Q5_0, IQ4_NL, the IQ lattice types but IQ1_M
          PutF16(blk, d);
          break;
      }
    }
  }
  m.w = WeightMatrix{type, base, rows, cols, row_bytes};
  m.deq.resize(rows * cols);
  for (int64_t r = 0; r < rows; ++r) DequantizeRow(type, m.w.row(r), m.deq.data() + r * cols, cols);
  return m;
}

// Activations: Gaussian with a few large outliers (which set the block scales), tokens
// x_stride apart.
std::vector<float> MakeInput(int64_t n_tok, int64_t cols, int64_t x_stride, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::vector<float> x(n_tok * x_stride, 1e30f);  // poison the gaps
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int64_t c = 0; c < cols; ++c) {
      float v = gauss(rng);
      if (rng() % 97 == 0) v *= 20.0f;
      x[t * x_stride + c] = v;
    }
  }
  return x;
}

struct Ref {
  double quantized;  // with the activation codes and scales
  double mag;        // sum |W xq|
  double flt;        // with the float input
  double bound;      // the float-vs-kernel bound (see the top of the file)
};

Ref Reference(const TestMatrix& m, const Activations& a, const float* x, int64_t r, int64_t t) {
  Ref ref{};
  double wd = 0.0;
  const float* w = m.deq.data() + r * m.w.cols;
  for (int64_t c = 0; c < m.w.cols; ++c) {
    double xq;
    double d = 0.0;
    if (a.format() == ActFormat::kF32) {
      xq = a.Value(t, c);
    } else {
      d = a.Scale(t, c);
      xq = static_cast<double>(a.Code(t, c)) * d;
    }
    ref.quantized += w[c] * xq;
    ref.mag += std::fabs(w[c] * xq);
    ref.flt += static_cast<double>(w[c]) * x[c];
    wd += std::fabs(w[c]) * d;
  }
  ref.bound = wd / 2 * (1 + 1e-4) + kTightRel * ref.mag;
  return ref;
}

// Rounding the kernel itself applies to float activations, relative to mag: on CPUs with
// AVX512_BF16 the AVX-512 variant rounds each activation to bf16 for BF16 weights (half an
// ulp, 2^-9, plus vdpbf16ps's two roundings per step and lane: 2^-8 covers both).
double KernelActRel(Isa isa, GgmlType type) {
  return isa == Isa::kAvx512 && type == GgmlType::kBF16 && kernels::UseBf16Dot() ? 1.0 / 256 : 0.0;
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// ---------------------------------------------------------------------------------------
// Activation quantization.

TEST(ActQuant, GoldenQ8_0) {
  // Block 0: amax 127 -> d = 1, id = 1: codes are x rounded half to even.
  // Block 1: all zero -> d = 0, codes 0. Block 2: amax 254 -> d = 2, id = 0.5.
  std::vector<float> x(96, 0.0f);
  const float b0[8] = {127.0f, -63.5f, 2.5f, -2.5f, 0.5f, 1.5f, 3.49f, -127.0f};
  const int c0[8] = {127, -64, 2, -2, 0, 2, 3, -127};
  for (int i = 0; i < 8; ++i) x[i] = b0[i];
  x[64] = 254.0f;  // code 127
  x[65] = 5.0f;    // 2.5 -> 2
  x[66] = 7.0f;    // 3.5 -> 4
  x[67] = -1.0f;   // -0.5 -> -0 = 0
  for (Isa isa : kAllIsas) {
    if (!IsaSupported(isa)) continue;
    SCOPED_TRACE(IsaName(isa));
    Activations a;
    a.Prepare(ActFormat::kQ8_0, 1, 96);
    a.QuantizeTokens(isa, x.data(), 96, 0, 1);
    EXPECT_EQ(a.Scale(0, 0), 1.0f);
    for (int i = 0; i < 8; ++i) EXPECT_EQ(a.Code(0, i), c0[i]) << i;
    for (int i = 8; i < 32; ++i) EXPECT_EQ(a.Code(0, i), 0) << i;
    EXPECT_EQ(a.Scale(0, 32), 0.0f);
    for (int i = 32; i < 64; ++i) EXPECT_EQ(a.Code(0, i), 0) << i;
    EXPECT_EQ(a.Scale(0, 64), 2.0f);
    EXPECT_EQ(a.Code(0, 64), 127);
    EXPECT_EQ(a.Code(0, 65), 2);
    EXPECT_EQ(a.Code(0, 66), 4);
    EXPECT_EQ(a.Code(0, 67), 0);
    EXPECT_EQ(a.Value(0, 66), 8.0f);
    // 3 blocks are padded to 4; the padding block is zero.
    const uint8_t* tok = a.token(0);
    for (int i = 96; i < 128; ++i) EXPECT_EQ(tok[i], 0) << i;
    float pad_d;
    std::memcpy(&pad_d, tok + kernels::Q8_0ScaleOffset(4) + 12, 4);
    EXPECT_EQ(pad_d, 0.0f);
    // Scaled block sums d * sum(q): block 0: 127 - 64 + 2 - 2 + 0 + 2 + 3 - 127 = -59;
    // block 1: 0; block 2: 2 * (127 + 2 + 4 + 0) = 266; padding: 0.
    float sums[4];
    std::memcpy(sums, tok + kernels::Q8_0SumOffset(4), sizeof(sums));
    EXPECT_EQ(sums[0], -59.0f);
    EXPECT_EQ(sums[1], 0.0f);
    EXPECT_EQ(sums[2], 266.0f);
    EXPECT_EQ(sums[3], 0.0f);
  }
}

TEST(ActQuant, GoldenQ8_KBlockSums) {
  // x[i] = (i % 16) - 8 except x[0] = 127: amax 127, d = 1, codes = x. Group sums:
  // sum_{k=0..15} (k - 8) = 120 - 128 = -8; group 0 has 127 instead of -8: -8 + 135 = 127.
  std::vector<float> x(256);
  for (int i = 0; i < 256; ++i) x[i] = static_cast<float>(i % 16 - 8);
  x[0] = 127.0f;
  for (Isa isa : kAllIsas) {
    if (!IsaSupported(isa)) continue;
    SCOPED_TRACE(IsaName(isa));
    Activations a;
    a.Prepare(ActFormat::kQ8_K, 1, 256);
    a.QuantizeTokens(isa, x.data(), 256, 0, 1);
    const auto& blk = *reinterpret_cast<const kernels::ActBlockQ8K*>(a.token(0));
    EXPECT_EQ(blk.d, 1.0f);
    for (int i = 0; i < 256; ++i) ASSERT_EQ(blk.qs[i], static_cast<int>(x[i])) << i;
    EXPECT_EQ(blk.bsum[0], 127);
    EXPECT_EQ(blk.bd[0], 127.0f);
    for (int j = 1; j < 16; ++j) {
      EXPECT_EQ(blk.bsum[j], -8) << j;
      EXPECT_EQ(blk.bd[j], -8.0f) << j;
    }
  }
}

TEST(ActQuant, EveryIsaWritesTheSameBytes) {
  const int64_t n_tok = 7, x_stride = 1000;
  for (ActFormat f : {ActFormat::kQ8_0, ActFormat::kQ8_K, ActFormat::kF32}) {
    const int64_t cols = f == ActFormat::kQ8_K ? 768 : 9 * 32;
    const std::vector<float> x = MakeInput(n_tok, cols, x_stride, 7);
    Activations ref;
    ref.Prepare(f, n_tok, cols);
    ref.QuantizeTokens(Isa::kScalar, x.data(), x_stride, 0, n_tok);
    for (Isa isa : kAllIsas) {
      if (!IsaSupported(isa)) continue;
      Activations a;
      a.Prepare(f, n_tok, cols);
      // Quantize in two ranges: tokens are independent.
      a.QuantizeTokens(isa, x.data(), x_stride, 3, n_tok);
      a.QuantizeTokens(isa, x.data(), x_stride, 0, 3);
      ASSERT_EQ(a.token_stride(), ref.token_stride());
      EXPECT_EQ(std::memcmp(a.token(0), ref.token(0), n_tok * ref.token_stride()), 0)
          << IsaName(isa) << " format " << static_cast<int>(f);
    }
  }
}

// Integer codes cannot hold a NaN or an infinity: a token whose floats have one gets NaN
// scales (so its products are NaN, not finite garbage); the other tokens are untouched.
TEST(ActQuant, NonFiniteInputsMakeTheTokensScalesNaN) {
  const int64_t n_tok = 3, cols = 512;
  for (ActFormat f : {ActFormat::kQ8_0, ActFormat::kQ8_K}) {
    std::vector<float> x = MakeInput(n_tok, cols, cols, 5);
    Activations clean;
    clean.Prepare(f, n_tok, cols);
    clean.QuantizeTokens(Isa::kScalar, x.data(), cols, 0, n_tok);
    x[0 * cols + 300] = std::numeric_limits<float>::quiet_NaN();
    x[2 * cols + 7] = -std::numeric_limits<float>::infinity();
    for (Isa isa : kAllIsas) {
      if (!IsaSupported(isa)) continue;
      SCOPED_TRACE(IsaName(isa));
      Activations a;
      a.Prepare(f, n_tok, cols);
      a.QuantizeTokens(isa, x.data(), cols, 0, n_tok);
      for (int64_t c = 0; c < cols; c += 32) {
        EXPECT_TRUE(std::isnan(a.Scale(0, c))) << c;
        EXPECT_TRUE(std::isnan(a.Scale(2, c))) << c;
      }
      EXPECT_EQ(std::memcmp(a.token(1), clean.token(1), a.token_stride()), 0);
    }
  }
}

// DotF32's order is spelled out (matmul.h), so every variant must give the scalar bits,
// including the tails of lengths that are not multiples of 16.
TEST(DotF32, EveryIsaGivesTheScalarBits) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> a(300), b(300);
  for (float& v : a) v = u(rng);
  for (float& v : b) v = u(rng) * 1e-3f;
  for (Isa isa : kAllIsas) {
    if (!IsaSupported(isa)) {
      std::printf("[  SKIPPED ] DotF32 %s: not supported by this CPU\n", IsaName(isa).data());
      continue;
    }
    for (int64_t n : {0, 1, 7, 15, 16, 17, 31, 32, 33, 100, 255, 256, 257, 300}) {
      for (int64_t off : {0, 1, 3}) {
        if (off + n > 300) continue;
        const float want = DotF32(Isa::kScalar, a.data() + off, b.data() + off, n);
        const float got = DotF32(isa, a.data() + off, b.data() + off, n);
        ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want))
            << IsaName(isa) << " n=" << n << " off=" << off;
      }
    }
  }
}

TEST(ActQuant, FormatsOfWeightTypes) {
  EXPECT_EQ(ActFormatFor(GgmlType::kQ4_K), ActFormat::kQ8_K);
  EXPECT_EQ(ActFormatFor(GgmlType::kQ6_K), ActFormat::kQ8_K);
  EXPECT_EQ(ActFormatFor(GgmlType::kQ8_0), ActFormat::kQ8_0);
  EXPECT_EQ(ActFormatFor(GgmlType::kMXFP4), ActFormat::kQ8_0);
  EXPECT_EQ(ActFormatFor(GgmlType::kBF16), ActFormat::kF32);
  EXPECT_EQ(ActFormatFor(GgmlType::kQ5_1), ActFormat::kQ8_0);
  EXPECT_EQ(ActFormatFor(GgmlType::kQ4_1), ActFormat::kQ8_0);
  for (GgmlType t : kAllTypes) EXPECT_TRUE(MatMulSupports(t)) << TypeName(t);
  EXPECT_EQ(ActFormatFor(GgmlType::kQ2_K), ActFormat::kQ8_K);
  EXPECT_EQ(ActFormatFor(GgmlType::kQ3_K), ActFormat::kQ8_K);
  EXPECT_EQ(ActFormatFor(GgmlType::kIQ4_XS), ActFormat::kQ8_K);
  EXPECT_EQ(ActFormatFor(GgmlType::kIQ4_NL), ActFormat::kQ8_0);
  EXPECT_FALSE(MatMulSupports(GgmlType::kQ8_1));
  EXPECT_FALSE(MatMulSupports(GgmlType::kTQ2_0));
}

// ---------------------------------------------------------------------------------------
// Isa selection.

class EnvGuard {
 public:
  EnvGuard() {
    const char* v = std::getenv("MOETIER_ISA");
    had_ = v != nullptr;
    if (had_) old_ = v;
  }
  ~EnvGuard() {
    if (had_) {
      setenv("MOETIER_ISA", old_.c_str(), 1);
    } else {
      unsetenv("MOETIER_ISA");
    }
  }

 private:
  bool had_ = false;
  std::string old_;
};

TEST(IsaSelect, EnvironmentVariable) {
  EnvGuard guard;
  unsetenv("MOETIER_ISA");
  ASSERT_TRUE(IsaFromEnv().ok());
  EXPECT_EQ(IsaFromEnv().value(), BestIsa());
  setenv("MOETIER_ISA", "scalar", 1);
  ASSERT_TRUE(IsaFromEnv().ok());
  EXPECT_EQ(IsaFromEnv().value(), Isa::kScalar);
  setenv("MOETIER_ISA", "sse9", 1);
  ASSERT_FALSE(IsaFromEnv().ok());
  EXPECT_NE(IsaFromEnv().status().message().find("MOETIER_ISA=sse9: unknown variant"),
            std::string::npos)
      << IsaFromEnv().status().message();
  for (Isa isa : kAllIsas) {
    setenv("MOETIER_ISA", std::string(IsaName(isa)).c_str(), 1);
    EXPECT_EQ(IsaFromEnv().ok(), IsaSupported(isa)) << IsaName(isa);
    if (!IsaSupported(isa)) {
      EXPECT_NE(IsaFromEnv().status().message().find("this CPU cannot run it"), std::string::npos);
    }
  }
  EXPECT_TRUE(IsaSupported(Isa::kScalar));
}

// ---------------------------------------------------------------------------------------
// Products, per (variant, weight type).

class MatMulTest : public ::testing::TestWithParam<std::tuple<Isa, GgmlType>> {
 protected:
  void SetUp() override {
    isa_ = std::get<0>(GetParam());
    type_ = std::get<1>(GetParam());
    if (!IsaSupported(isa_)) GTEST_SKIP() << IsaName(isa_) << " not supported on this CPU";
  }
  Isa isa_;
  GgmlType type_;
};

// Runs MatMul over all rows of m for the n_tok tokens of x (x_stride apart).
std::vector<float> RunMatMul(Isa isa, const TestMatrix& m, const float* x, int64_t x_stride,
                             int64_t n_tok, Activations* a) {
  a->Prepare(ActFormatFor(m.w.type), n_tok, m.w.cols);
  a->QuantizeTokens(isa, x, x_stride, 0, n_tok);
  const int64_t y_stride = m.w.rows + 5;
  std::vector<float> y(n_tok * y_stride, -7.0f);
  MatMul(isa, m.w, *a, y.data(), y_stride, 0, m.w.rows);
  // The gaps between output rows are untouched.
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int64_t r = m.w.rows; r < y_stride; ++r) EXPECT_EQ(y[t * y_stride + r], -7.0f);
  }
  return y;
}

TEST_P(MatMulTest, MatchesReferences) {
  for (bool random_bytes : {false, true}) {
    SCOPED_TRACE(random_bytes ? "random bytes" : "quantized");
    const int64_t rows = 37, cols = TestCols(type_), n_tok = 9, x_stride = cols + 3;
    const TestMatrix m = MakeMatrix(type_, rows, cols, 11, random_bytes);
    const std::vector<float> x = MakeInput(n_tok, cols, x_stride, 5);
    Activations a;
    const std::vector<float> y = RunMatMul(isa_, m, x.data(), x_stride, n_tok, &a);
    const int64_t y_stride = rows + 5;
    double worst_tight = 0, worst_float = 0;
    for (int64_t t = 0; t < n_tok; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        const Ref ref = Reference(m, a, x.data() + t * x_stride, r, t);
        const double got = y[t * y_stride + r];
        const double act = KernelActRel(isa_, type_) * ref.mag;
        ASSERT_LE(std::fabs(got - ref.quantized), kTightRel * ref.mag + act)
            << "row " << r << " token " << t << " ref " << ref.quantized;
        ASSERT_LE(std::fabs(got - ref.flt), ref.bound + act)
            << "row " << r << " token " << t << " ref " << ref.flt;
        worst_tight = std::max(worst_tight, std::fabs(got - ref.quantized) / ref.mag);
        worst_float = std::max(worst_float, std::fabs(got - ref.flt) / (ref.bound + act));
      }
    }
    std::printf("  %s %s%s: max |err|/mag vs quantized ref %.2e; max |err|/bound vs float %.3f\n",
                std::string(IsaName(isa_)).c_str(), std::string(TypeName(type_)).c_str(),
                random_bytes ? " (random bytes)" : "", worst_tight, worst_float);
  }
}

TEST_P(MatMulTest, BatchInvariance) {
  const int64_t rows = 13, cols = TestCols(type_), n_max = 37;
  const TestMatrix m = MakeMatrix(type_, rows, cols, 3, false);
  const std::vector<float> x = MakeInput(n_max, cols, cols, 9);
  Activations a;
  const int64_t y_stride = rows + 5;
  // Every token alone (n_tok = 1) is the reference.
  std::vector<float> alone(n_max * rows);
  for (int64_t t = 0; t < n_max; ++t) {
    const std::vector<float> y = RunMatMul(isa_, m, x.data() + t * cols, cols, 1, &a);
    for (int64_t r = 0; r < rows; ++r) alone[t * rows + r] = y[r];
  }
  // Windows [t0, t0 + n) for n = 1..37 of the token sequence, and a window of 17 tokens in
  // which a token appears with different neighbours.
  for (int64_t n = 1; n <= n_max; ++n) {
    for (int64_t t0 : {int64_t{0}, n_max - n}) {
      const std::vector<float> y = RunMatMul(isa_, m, x.data() + t0 * cols, cols, n, &a);
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t r = 0; r < rows; ++r) {
          ASSERT_EQ(Bits(y[t * y_stride + r]), Bits(alone[(t0 + t) * rows + r]))
              << "n_tok " << n << " window at " << t0 << " token " << t << " row " << r;
        }
      }
    }
  }
}

TEST_P(MatMulTest, RowSplitInvariance) {
  const int64_t rows = 41, cols = TestCols(type_), n_tok = 6;
  const TestMatrix m = MakeMatrix(type_, rows, cols, 4, true);
  const std::vector<float> x = MakeInput(n_tok, cols, cols, 2);
  Activations a;
  const std::vector<float> whole = RunMatMul(isa_, m, x.data(), cols, n_tok, &a);
  const int64_t y_stride = rows + 5;
  for (const auto& cuts : std::vector<std::vector<int64_t>>{
           {0, 1, 41}, {0, 3, 7, 41}, {0, 16, 32, 41}, {0, 5, 6, 19, 40, 41}}) {
    std::vector<float> y(whole.size(), -7.0f);
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      MatMul(isa_, m.w, a, y.data(), y_stride, cuts[i], cuts[i + 1]);
    }
    for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(Bits(y[i]), Bits(whole[i])) << i;
  }
}

TEST_P(MatMulTest, LongRows) {
  // Rows long enough that the GEMM path unpacks them in several panels of steps (24 KiB of
  // unpacked weights per 4-row panel: 9 K-quant super-blocks, 32 two-block steps, 96 float
  // steps), with a partial last panel; 20 tokens = one full token block of 16 + 4.
  const int64_t rows = 9, n_tok = 20;
  const GgmlTypeTraits& tr = TraitsOf(type_);
  const int64_t cols = tr.block_size == 256 ? 23 * 256 : tr.block_size == 32 ? 75 * 32 : 1700;
  const TestMatrix m = MakeMatrix(type_, rows, cols, 12, true);
  const std::vector<float> x = MakeInput(n_tok, cols, cols, 13);
  Activations a;
  const std::vector<float> y = RunMatMul(isa_, m, x.data(), cols, n_tok, &a);
  const int64_t y_stride = rows + 5;
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      const Ref ref = Reference(m, a, x.data() + t * cols, r, t);
      ASSERT_LE(std::fabs(y[t * y_stride + r] - ref.quantized),
                (kTightRel + KernelActRel(isa_, type_)) * ref.mag)
          << "row " << r << " token " << t;
    }
  }
  for (int64_t t : {int64_t{0}, int64_t{17}}) {
    const std::vector<float> y1 = RunMatMul(isa_, m, x.data() + t * cols, cols, 1, &a);
    for (int64_t r = 0; r < rows; ++r) {
      ASSERT_EQ(Bits(y1[r]), Bits(y[t * y_stride + r])) << "token " << t << " row " << r;
    }
  }
}

TEST_P(MatMulTest, AgreesWithScalarVariant) {
  if (isa_ == Isa::kScalar) GTEST_SKIP() << "this is the scalar variant";
  const int64_t rows = 23, n_tok = 19;
  for (int64_t cols : {TestCols(type_), 2 * TestCols(type_)}) {
    const TestMatrix m = MakeMatrix(type_, rows, cols, 8, false);
    const std::vector<float> x = MakeInput(n_tok, cols, cols, 1);
    Activations a, a_ref;
    const std::vector<float> y = RunMatMul(isa_, m, x.data(), cols, n_tok, &a);
    const std::vector<float> y_ref = RunMatMul(Isa::kScalar, m, x.data(), cols, n_tok, &a_ref);
    const int64_t y_stride = rows + 5;
    for (int64_t t = 0; t < n_tok; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        const double mag = Reference(m, a, x.data() + t * cols, r, t).mag;
        ASSERT_LE(std::fabs(y[t * y_stride + r] - y_ref[t * y_stride + r]),
                  (2 * kTightRel + KernelActRel(isa_, type_)) * mag)
            << "row " << r << " token " << t;
      }
    }
  }
}

TEST_P(MatMulTest, PanelsMatchRows) {
  // The kPanels layout (RepackToPanels) gives the same bits as the GGUF rows it came from, in
  // every schedule (fused up to 4 tokens, 2 for Q6_K; Q4_K/Q5_K fused in two passes up to 8;
  // more buffered), for whole and split row ranges, and
  // repacking in place equals repacking into another buffer.
  if (!PanelsPreferred(type_, 16)) GTEST_SKIP() << "the active variant reads GGUF rows only";
  if (isa_ != ActiveIsa()) GTEST_SKIP() << "kPanels is for the active variant";
  const int64_t rows = 48;
  for (int64_t cols : {TestCols(type_), 3 * TestCols(type_)}) {
    for (bool random_bytes : {false, true}) {
      const TestMatrix m = MakeMatrix(type_, rows, cols, 21, random_bytes);
      const uint64_t bytes = rows * m.w.row_bytes;
      std::vector<uint8_t> packed(bytes), in_place(m.w.data, m.w.data + bytes);
      RepackToPanels(type_, rows, cols, m.w.data, packed.data());
      RepackToPanels(type_, rows, cols, in_place.data(), in_place.data());
      ASSERT_EQ(packed, in_place);
      ASSERT_NE(std::vector<uint8_t>(m.w.data, m.w.data + bytes), packed);
      WeightMatrix pw = m.w;
      pw.data = packed.data();
      pw.layout = WeightLayout::kPanels;
      for (int64_t n_tok : {1, 2, 3, 4, 6, 8, 9, 20}) {
        const std::vector<float> x = MakeInput(n_tok, cols, cols, 7);
        Activations a;
        const std::vector<float> want = RunMatMul(isa_, m, x.data(), cols, n_tok, &a);
        const int64_t y_stride = rows + 5;
        std::vector<float> got(want.size(), -7.0f);
        MatMul(isa_, pw, a, got.data(), y_stride, 0, 16);
        MatMul(isa_, pw, a, got.data(), y_stride, 16, rows);
        for (size_t i = 0; i < want.size(); ++i) {
          ASSERT_EQ(Bits(got[i]), Bits(want[i]))
              << "cols " << cols << " n_tok " << n_tok << " at " << i;
        }
      }
    }
  }
}

TEST_P(MatMulTest, ReferencePathAgrees) {
  // MatMulRows (the float reference path the engine uses today) against the definition.
  if (isa_ != Isa::kScalar) GTEST_SKIP() << "independent of the variant";
  const int64_t rows = 9, cols = TestCols(type_), n_tok = 3;
  const TestMatrix m = MakeMatrix(type_, rows, cols, 6, false);
  const std::vector<float> x = MakeInput(n_tok, cols, cols, 4);
  std::vector<float> y(n_tok * rows);
  MatMulRows(m.w, x.data(), cols, n_tok, y.data(), rows, 0, rows);
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      double ref = 0, mag = 0;
      for (int64_t c = 0; c < cols; ++c) {
        ref += static_cast<double>(m.deq[r * cols + c]) * x[t * cols + c];
        mag += std::fabs(static_cast<double>(m.deq[r * cols + c]) * x[t * cols + c]);
      }
      EXPECT_LE(std::fabs(y[t * rows + r] - ref), kTightRel * mag);
    }
  }
}

std::string ParamName(const ::testing::TestParamInfo<std::tuple<Isa, GgmlType>>& info) {
  return std::string(IsaName(std::get<0>(info.param))) + "_" +
         std::string(TypeName(std::get<1>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(AllVariants, MatMulTest,
                         ::testing::Combine(::testing::ValuesIn(kAllIsas),
                                            ::testing::ValuesIn(kAllTypes)),
                         ParamName);

}  // namespace
}  // namespace mt
