#include "gpu/expert_ffn.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "gpu/test_gpu.h"
#include "quant/dequant.h"
#include "quant/quantize.h"

namespace mt::gpu {
namespace {

struct Case {
  GgmlType gate_type, up_type, down_type;
  int64_t n_embd, n_ff, m;
  bool bias;
  GluActivation activation;
};

// A matrix (rows, cols) of `type` with random weights: its bytes and its dequantized values.
void RandomMatrix(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng,
                  std::vector<uint8_t>* bytes, std::vector<float>* values) {
  std::normal_distribution<float> normal(0.0f, 0.5f);
  const uint64_t row_bytes = RowBytes(type, cols);
  bytes->assign(rows * row_bytes, 0);
  values->resize(rows * cols);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : row) v = normal(rng);
    QuantizeRow(type, row.data(), bytes->data() + r * row_bytes, cols, QuantEffort::kFast);
    DequantizeRow(type, bytes->data() + r * row_bytes, values->data() + r * cols, cols);
  }
}

double Act(GluActivation a, double g, double u) {
  if (a == GluActivation::kSwigluOai) {
    g = std::min(g, 7.0);
    u = std::clamp(u, -7.0, 7.0);
    return g / (1.0 + std::exp(-1.702 * g)) * (u + 1.0);
  }
  return g / (1.0 + std::exp(-g)) * u;
}

// Runs one expert on the device and compares with the dequantized weights in double.
void CheckExpert(const Case& c) {
  TestGpu& gpu = TheGpu();
  Result<std::unique_ptr<ExpertFfn>> ffn = ExpertFfn::Create(gpu.device.get(), gpu.matmul.get());
  ASSERT_TRUE(ffn.ok()) << ffn.status().message();
  std::mt19937 rng(7);
  const int64_t D = c.n_embd, F = c.n_ff, m = c.m;
  std::vector<uint8_t> gate_b, up_b, down_b;
  std::vector<float> gate_w, up_w, down_w;
  RandomMatrix(c.gate_type, F, D, rng, &gate_b, &gate_w);
  RandomMatrix(c.up_type, F, D, rng, &up_b, &up_w);
  RandomMatrix(c.down_type, D, F, rng, &down_b, &down_w);
  // The three matrices in one buffer, at offsets as an expert cache places them.
  const uint64_t gate_off = 64, up_off = gate_off + gate_b.size() + 64;
  const uint64_t down_off = up_off + up_b.size() + 64;
  std::vector<uint8_t> weights(down_off + down_b.size());
  std::copy(gate_b.begin(), gate_b.end(), weights.begin() + gate_off);
  std::copy(up_b.begin(), up_b.end(), weights.begin() + up_off);
  std::copy(down_b.begin(), down_b.end(), weights.begin() + down_off);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> x(m * D), bias(3 + 2 * F);  // biases at float 3 (gate) and 3 + F (up)
  for (float& v : x) v = uniform(rng);
  for (float& v : bias) v = uniform(rng);

  Device& dev = *gpu.device;
  Result<Buffer> wb = dev.CreateBuffer(weights.size());
  Result<Buffer> xb = dev.CreateHostBuffer(x.size() * 4);
  const uint64_t hidden_offset = 5;  // floats: rows that start off any alignment
  Result<Buffer> hb = dev.CreateBuffer((hidden_offset + 2 * m * F) * 4);
  Result<Buffer> yb = dev.CreateHostBuffer(m * D * 4);
  Result<Buffer> bb = dev.CreateBuffer(bias.size() * 4);
  ASSERT_TRUE(wb.ok() && xb.ok() && hb.ok() && yb.ok() && bb.ok());
  ASSERT_NE(xb->host_data(), nullptr);
  ASSERT_TRUE(dev.Upload(*wb, 0, weights).ok());
  ASSERT_TRUE(
      dev.Upload(*bb, 0, {reinterpret_cast<const uint8_t*>(bias.data()), bias.size() * 4}).ok());
  std::copy(x.begin(), x.end(), reinterpret_cast<float*>(xb->host_data()));
  ExpertFfnArgs a;
  a.gate_type = c.gate_type;
  a.up_type = c.up_type;
  a.down_type = c.down_type;
  a.weights = &*wb;
  a.gate_offset = gate_off;
  a.up_offset = up_off;
  a.down_offset = down_off;
  a.n_embd = D;
  a.n_ff = F;
  a.m = m;
  a.x = &*xb;
  a.hidden = &*hb;
  a.hidden_offset = hidden_offset;
  a.y = &*yb;
  if (c.bias) {
    a.bias = &*bb;
    a.gate_bias_offset = 3;
    a.up_bias_offset = 3 + F;
  }
  a.activation = c.activation;
  Status recorded;
  // Submit and Wait: the host is free between them.
  ASSERT_TRUE(dev.Submit([&](CommandRecorder& rec) { recorded = (*ffn)->Record(rec, a); }).ok());
  ASSERT_TRUE(recorded.ok()) << recorded.message();
  ASSERT_TRUE(dev.Wait().ok());
  const float* y = reinterpret_cast<const float*>(yb->host_data());

  std::vector<double> h(F);
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t f = 0; f < F; ++f) {
      double g = 0, u = 0;
      for (int64_t d = 0; d < D; ++d) {
        g += double{gate_w[f * D + d]} * x[t * D + d];
        u += double{up_w[f * D + d]} * x[t * D + d];
      }
      if (c.bias) {
        g += bias[3 + f];
        u += bias[3 + F + f];
      }
      h[f] = Act(c.activation, g, u);
    }
    for (int64_t d = 0; d < D; ++d) {
      double want = 0, magnitude = 0;
      for (int64_t f = 0; f < F; ++f) {
        want += double{down_w[d * F + f]} * h[f];
        magnitude += std::fabs(double{down_w[d * F + f]} * h[f]);
      }
      ASSERT_LE(std::fabs(y[t * D + d] - want), 1e-4 * magnitude + 1e-6)
          << "token " << t << " column " << d << ": " << y[t * D + d] << ", want " << want;
    }
  }
}

TEST(GpuExpertFfn, MatchesDoubleReference) {
  if (TheGpu().device == nullptr) GTEST_SKIP() << TheGpu().skip;
  const Case cases[] = {
      // q4_k_m's experts: Q4_K gate and up, Q6_K down.
      {GgmlType::kQ4_K, GgmlType::kQ4_K, GgmlType::kQ6_K, 256, 512, 3, false,
       GluActivation::kSwiglu},
      // gpt-oss: MXFP4 with biases and the clamped activation, 9 tokens (two groups of 8).
      {GgmlType::kMXFP4, GgmlType::kMXFP4, GgmlType::kMXFP4, 64, 96, 9, true,
       GluActivation::kSwigluOai},
      {GgmlType::kF32, GgmlType::kF16, GgmlType::kQ8_0, 64, 32, 1, true, GluActivation::kSwiglu},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << TypeName(c.gate_type) << " D=" << c.n_embd << " F=" << c.n_ff
                                    << " m=" << c.m << " bias=" << c.bias);
    CheckExpert(c);
    if (HasFatalFailure()) return;
  }
}

TEST(GpuExpertFfn, RefusesHiddenPastItsBuffer) {
  TestGpu& gpu = TheGpu();
  if (gpu.device == nullptr) GTEST_SKIP() << gpu.skip;
  Result<std::unique_ptr<ExpertFfn>> ffn = ExpertFfn::Create(gpu.device.get(), gpu.matmul.get());
  ASSERT_TRUE(ffn.ok());
  Result<Buffer> b = gpu.device->CreateBuffer(64 * 32 * 4);
  ASSERT_TRUE(b.ok());
  ExpertFfnArgs a;
  a.weights = a.x = &*b;
  a.hidden = a.y = &*b;
  a.n_embd = 32;
  a.n_ff = 32;
  a.m = 2;
  a.hidden_offset = 64 * 32 - 2 * 2 * 32 + 1;  // one float too far
  Status recorded;
  ASSERT_TRUE(
      gpu.device->Execute([&](CommandRecorder& rec) { recorded = (*ffn)->Record(rec, a); }).ok());
  EXPECT_EQ(recorded.code(), StatusCode::kInvalidArgument) << recorded.message();
}

}  // namespace
}  // namespace mt::gpu
