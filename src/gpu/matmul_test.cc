#include "gpu/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "gpu/test_gpu.h"
#include "quant/dequant.h"
#include "quant/quantize.h"

namespace mt::gpu {
namespace {

struct Shape {
  int64_t m, k, n;
  bool offsets;       // W, X and Y away from offset 0, rows of X and Y padded
  int64_t heads = 1;  // MatMulArgs::heads: W (heads * m, k), X and Y with the heads side by side
};

// Shapes for a type with `block` elements per block: k a few blocks (fewer chunks than the
// 64 threads of a workgroup) and many (each thread several), n = 1, a few and more than the
// 8 tokens of a workgroup; and head batches as MLA's (a row's heads side by side, padded).
std::vector<Shape> ShapesFor(int64_t block) {
  std::vector<Shape> shapes = {
      {5, 256, 1, false},
      {19, 1280, 3, true},
      {6, 4352, 11, true},
      {7, 256, 9, true, 3},
  };
  if (block <= 32) {
    shapes.push_back({9, 96, 2, false});  // 3 blocks of 32
    shapes.push_back({4, 64, 10, false, 5});
  }
  if (block == 1) {
    shapes.push_back({3, 67, 4, true});  // an odd k
  }
  return shapes;
}

struct Error {
  double max_rel = 0;  // max over outputs of |gpu - ref| / sum_i |w_i x_i|
};

// Runs one product on the GPU and compares it with the reference: the scalar dequantizer's
// weights times X, summed in double. With heads, head h is W's rows [h m, (h + 1) m) times
// X's columns [h x_head, ...) into Y's [h y_head, ...), and each head gives the bits of a
// product of its own.
void CheckProduct(GgmlType type, const Shape& s, uint32_t seed, Error* error) {
  TestGpu& gpu = TheGpu();
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const uint64_t row_bytes = RowBytes(type, s.k);
  const int64_t H = s.heads, rows = H * s.m;
  const uint64_t w_offset = s.offsets ? 5 : 0;                               // bytes: an odd start
  const int64_t x_offset = s.offsets ? 3 : 0, y_offset = s.offsets ? 2 : 0;  // floats
  const int64_t x_head = s.offsets ? s.k + 2 : s.k, y_head = s.offsets ? s.m + 1 : s.m;
  const int64_t x_stride = (H - 1) * x_head + (s.offsets ? s.k + 1 : s.k);
  const int64_t y_stride = (H - 1) * y_head + (s.offsets ? s.m + 2 : s.m);

  // W: rows of different magnitudes, quantized by the project's quantizer.
  std::vector<uint8_t> w_bytes(w_offset + rows * row_bytes, 0xA5);
  std::vector<float> w_ref(rows * s.k);  // (heads * m, k) as the reference dequantizer reads W
  std::vector<float> row(s.k);
  for (int64_t r = 0; r < rows; ++r) {
    const float magnitude = std::ldexp(1.0f, static_cast<int>(r % 5) - 2);
    for (float& v : row) v = magnitude * normal(rng);
    uint8_t* dst = w_bytes.data() + w_offset + r * row_bytes;
    QuantizeRow(type, row.data(), dst, s.k, QuantEffort::kFast);
    DequantizeRow(type, dst, w_ref.data() + r * s.k, s.k);
  }
  std::vector<float> x(x_offset + s.n * x_stride, 1e30f);  // padding that must not be read
  for (int64_t t = 0; t < s.n; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < s.k; ++i) x[x_offset + t * x_stride + h * x_head + i] = uniform(rng);
    }
  }
  const size_t y_floats = y_offset + s.n * y_stride;

  Result<Buffer> w = gpu.device->CreateBuffer(w_bytes.size());
  Result<Buffer> xb = gpu.device->CreateBuffer(x.size() * 4);
  Result<Buffer> yb = gpu.device->CreateBuffer(y_floats * 4);
  ASSERT_TRUE(w.ok() && xb.ok() && yb.ok());
  ASSERT_TRUE(gpu.device->Upload(*w, 0, w_bytes).ok());
  ASSERT_TRUE(
      gpu.device->Upload(*xb, 0, {reinterpret_cast<const uint8_t*>(x.data()), x.size() * 4}).ok());
  std::vector<float> y(y_floats, -7.0f);  // sentinels in the padding
  ASSERT_TRUE(
      gpu.device->Upload(*yb, 0, {reinterpret_cast<const uint8_t*>(y.data()), y.size() * 4}).ok());
  MatMulArgs args;
  args.type = type;
  args.w = &*w;
  args.w_offset = w_offset;
  args.x = &*xb;
  args.x_offset = x_offset;
  args.y = &*yb;
  args.y_offset = y_offset;
  args.m = s.m;
  args.k = s.k;
  args.n = s.n;
  args.x_stride = x_stride;
  args.y_stride = y_stride;
  args.heads = H;
  args.w_head_bytes = s.m * row_bytes;
  args.x_head_floats = x_head;
  args.y_head_floats = y_head;
  Status run = gpu.matmul->Run(args);
  ASSERT_TRUE(run.ok()) << run.message();
  ASSERT_TRUE(
      gpu.device->Download(*yb, 0, {reinterpret_cast<uint8_t*>(y.data()), y.size() * 4}).ok());

  for (int64_t t = 0; t < s.n; ++t) {
    std::vector<bool> written(y_stride, false);
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t r = 0; r < s.m; ++r) {
        double sum = 0, magnitude = 0;
        for (int64_t i = 0; i < s.k; ++i) {
          const double p = double{w_ref[(h * s.m + r) * s.k + i]} *
                           double{x[x_offset + t * x_stride + h * x_head + i]};
          sum += p;
          magnitude += std::fabs(p);
        }
        ASSERT_GT(magnitude, 0.0);
        const double got = y[y_offset + t * y_stride + h * y_head + r];
        const double rel = std::fabs(got - sum) / magnitude;
        error->max_rel = std::max(error->max_rel, rel);
        ASSERT_LE(rel, 1e-5) << TypeName(type) << " m=" << s.m << " k=" << s.k << " n=" << s.n
                             << ": Y[" << t << ", " << h << ", " << r << "] = " << got << ", want "
                             << sum;
        written[h * y_head + r] = true;
      }
    }
    for (int64_t c = 0; c < y_stride; ++c) {
      if (!written[c]) ASSERT_EQ(y[y_offset + t * y_stride + c], -7.0f) << "padding of Y written";
    }
  }
  for (int64_t i = 0; i < y_offset; ++i) ASSERT_EQ(y[i], -7.0f) << "before Y written";
  if (H == 1) return;
  // Each head alone, one token at a time (one submission): the same bits.
  Result<Buffer> ab = gpu.device->CreateBuffer(H * s.n * s.m * 4);
  ASSERT_TRUE(ab.ok());
  Status recorded;
  Status executed = gpu.device->Execute([&](CommandRecorder& rec) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t t = 0; t < s.n; ++t) {
        MatMulArgs one = args;
        one.heads = 1;
        one.n = 1;
        one.w_offset = w_offset + h * s.m * row_bytes;
        one.x_offset = x_offset + t * x_stride + h * x_head;
        one.y = &*ab;
        one.y_offset = (h * s.n + t) * s.m;
        if (Status r = gpu.matmul->Record(rec, one); recorded.ok()) recorded = r;
      }
    }
  });
  ASSERT_TRUE(recorded.ok() && executed.ok()) << recorded.message() << executed.message();
  std::vector<float> alone(H * s.n * s.m);
  ASSERT_TRUE(
      gpu.device->Download(*ab, 0, {reinterpret_cast<uint8_t*>(alone.data()), alone.size() * 4})
          .ok());
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t t = 0; t < s.n; ++t) {
      for (int64_t r = 0; r < s.m; ++r) {
        ASSERT_EQ(alone[(h * s.n + t) * s.m + r], y[y_offset + t * y_stride + h * y_head + r])
            << "head " << h << " token " << t << " row " << r << " alone";
      }
    }
  }
}

class GpuMatMulTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(GpuMatMulTest, MatchesScalarDequantizer) {
  TestGpu& gpu = TheGpu();
  if (gpu.device == nullptr) GTEST_SKIP() << gpu.skip;
  const GgmlType type = GetParam();
  Error error;
  uint32_t seed = 1;
  for (const Shape& s : ShapesFor(TraitsOf(type).block_size)) {
    SCOPED_TRACE(testing::Message() << "m=" << s.m << " k=" << s.k << " n=" << s.n);
    CheckProduct(type, s, seed++, &error);
    if (HasFatalFailure()) return;
  }
  std::printf("gpu matmul %s: max |gpu - ref| / sum|w x| = %.2e\n",
              std::string(TypeName(type)).c_str(), error.max_rel);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, GpuMatMulTest, ::testing::ValuesIn(GpuMatMulTypes()),
                         [](const ::testing::TestParamInfo<GgmlType>& info) {
                           return std::string(TypeName(info.param));
                         });

// More token groups x heads than one dispatch's z (65535) holds: the heads go in parts.
TEST(GpuMatMul, HeadsPastOneDispatch) {
  TestGpu& gpu = TheGpu();
  if (gpu.device == nullptr) GTEST_SKIP() << gpu.skip;
  const int64_t H = 70, n = 7500, m = 2, k = 4;  // 938 token groups x 70 heads
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> w(H * m * k), x(n * H * k);
  for (float& v : w) v = uniform(rng);
  for (float& v : x) v = uniform(rng);
  Result<Buffer> wb = gpu.device->CreateBuffer(w.size() * 4);
  Result<Buffer> xb = gpu.device->CreateBuffer(x.size() * 4);
  Result<Buffer> yb = gpu.device->CreateBuffer(n * H * m * 4);
  ASSERT_TRUE(wb.ok() && xb.ok() && yb.ok());
  ASSERT_TRUE(
      gpu.device->Upload(*wb, 0, {reinterpret_cast<const uint8_t*>(w.data()), w.size() * 4}).ok());
  ASSERT_TRUE(
      gpu.device->Upload(*xb, 0, {reinterpret_cast<const uint8_t*>(x.data()), x.size() * 4}).ok());
  MatMulArgs a{GgmlType::kF32, &*wb, 0, &*xb, 0, &*yb, 0, m, k, n, H * k, H * m};
  a.heads = H;
  a.w_head_bytes = m * k * 4;
  a.x_head_floats = k;
  a.y_head_floats = m;
  ASSERT_TRUE(gpu.matmul->Run(a).ok());
  std::vector<float> y(n * H * m);
  ASSERT_TRUE(
      gpu.device->Download(*yb, 0, {reinterpret_cast<uint8_t*>(y.data()), y.size() * 4}).ok());
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t r = 0; r < m; ++r) {
        double sum = 0, magnitude = 0;
        for (int64_t i = 0; i < k; ++i) {
          const double p = double{w[(h * m + r) * k + i]} * x[(t * H + h) * k + i];
          sum += p;
          magnitude += std::fabs(p);
        }
        ASSERT_LE(std::fabs(y[(t * H + h) * m + r] - sum), 1e-6 * magnitude)
            << "token " << t << " head " << h << " row " << r;
      }
    }
  }
}

TEST(GpuMatMul, RefusesBadArguments) {
  TestGpu& gpu = TheGpu();
  if (gpu.device == nullptr) GTEST_SKIP() << gpu.skip;
  Result<Buffer> w = gpu.device->CreateBuffer(144);  // one Q4_K block
  Result<Buffer> x = gpu.device->CreateBuffer(256 * 4);
  Result<Buffer> y = gpu.device->CreateBuffer(4);
  ASSERT_TRUE(w.ok() && x.ok() && y.ok());
  MatMulArgs args;
  args.type = GgmlType::kQ4_K;
  args.w = &*w;
  args.x = &*x;
  args.y = &*y;
  args.m = 1;
  args.k = 256;
  args.n = 1;
  EXPECT_TRUE(gpu.matmul->Run(args).ok());
  MatMulArgs bad = args;
  bad.k = 128;  // not a multiple of 256
  EXPECT_EQ(gpu.matmul->Run(bad).code(), StatusCode::kInvalidArgument);
  bad = args;
  bad.m = 2;  // W past its buffer
  EXPECT_EQ(gpu.matmul->Run(bad).code(), StatusCode::kInvalidArgument);
  bad = args;
  bad.n = 2;  // X and Y past their buffers
  EXPECT_EQ(gpu.matmul->Run(bad).code(), StatusCode::kInvalidArgument);
  bad = args;
  bad.type = GgmlType::kQ8_K;  // no shader
  Status s = gpu.matmul->Run(bad);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("q8_K"), std::string::npos) << s.message();
  bad = args;
  bad.heads = 2;  // the second head's W past its buffer
  bad.w_head_bytes = 144;
  EXPECT_EQ(gpu.matmul->Run(bad).code(), StatusCode::kInvalidArgument);
  bad.w_head_bytes = 0;  // its X and Y past theirs
  bad.x_head_floats = 1;
  EXPECT_EQ(gpu.matmul->Run(bad).code(), StatusCode::kInvalidArgument);
  bad.x_head_floats = 0;
  EXPECT_TRUE(gpu.matmul->Run(bad).ok());  // two heads on the same rows
  bad.heads = 0;
  EXPECT_EQ(gpu.matmul->Run(bad).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mt::gpu
