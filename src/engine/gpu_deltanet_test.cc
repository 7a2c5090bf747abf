// Gated DeltaNet on the device (engine/gpu_attention.h GpuDeltaNetAttention) on whatever Vulkan
// device the machine has (lavapipe here and in CI; skipped without one): qwen3next-tiny
// (grouped key heads, ssm_ba) and qwen35moe-tiny (tiled, ssm_beta/ssm_alpha) with their 3
// DeltaNet layers and their GQA layer (its output gate: sigmoid(gate) times each head's
// output) on the device give logits within rounding of the CPU's, the same bits for
// any batch split (passes of 3 tokens cross the convolution's window of d_conv - 1 = 3 and
// carry the states between passes) and beside another sequence, and a repeated prompt goes on
// from the device's checkpoint.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>

#include "engine/context.h"
#include "engine/device_matrices.h"
#include "engine/model.h"
#include "gpu/device.h"
#include "synth/synth_test_util.h"

namespace mt {
namespace {

using testing_synth::SynthModels;

class GpuDeltaNetTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    models_ = std::make_unique<SynthModels>("gpu-deltanet-test", 5);
    skip_ = gpu::NoDeviceReason();
  }
  static void TearDownTestSuite() { models_.reset(); }

  static std::unique_ptr<Model> Load(const std::string& preset, const std::string& type = "f32",
                                     const LoadOptions& load = {}) {
    auto m = Model::Load(models_->Get(preset, type), load);
    EXPECT_TRUE(m.ok()) << m.status().message();
    return m.ok() ? std::move(m.value()) : nullptr;
  }

  static ContextOptions Options(bool device, uint32_t n_batch) {
    ContextOptions o;
    o.n_ctx = 64;
    o.n_threads = 2;
    o.n_batch = n_batch;
    o.n_seq_max = 2;
    if (device) o.gpu.device = 0;
    return o;
  }

  static std::unique_ptr<Context> Make(const Model& m, bool device, uint32_t n_batch) {
    auto ctx = Context::Create(m, Options(device, n_batch));
    EXPECT_TRUE(ctx.ok()) << ctx.status().message();
    return ctx.ok() ? std::move(ctx.value()) : nullptr;
  }

  // Sequence 0's tokens kA and sequence 1's kB interleaved (a0 b0 a1 b1 ...), logits from
  // position 2 on: 7 rows, one group of the head's 8 tokens (lavapipe takes seconds a group).
  // Rows: a2 b2 a3 b3 a4 a5 a6.
  static std::vector<BatchToken> Interleaved() {
    std::vector<BatchToken> batch;
    for (uint32_t i = 0; i < kA.size(); ++i) {
      batch.push_back({kA[i], 0, i, i >= 2});
      if (i < kB.size()) batch.push_back({kB[i], 1, i, i >= 2});
    }
    return batch;
  }

  // Rows `rows` of n_vocab logits each.
  static std::vector<float> Rows(const std::vector<float>& logits, size_t n_vocab,
                                 std::initializer_list<size_t> rows) {
    std::vector<float> out;
    for (size_t r : rows) {
      out.insert(out.end(), logits.begin() + r * n_vocab, logits.begin() + (r + 1) * n_vocab);
    }
    return out;
  }

  static inline const std::vector<int32_t> kA = {5, 1000, 77, 4242, 9, 31000, 12};
  static inline const std::vector<int32_t> kB = {7, 300, 2, 15000};
  static inline std::unique_ptr<SynthModels> models_;
  static inline std::string skip_;
};

// qwen3next-tiny: grouped key heads and ssm_ba; qwen35moe-tiny: tiled key heads and
// ssm_beta/ssm_alpha. Two sequences in one pass on the CPU and on the device agree within
// rounding (a state read from the other sequence would miss by the logits' size). On
// qwen3next-tiny the device runs sequence 0 alone in passes of 3 tokens (its convolution
// window and states carried from pass to pass) and gets the bits it got beside sequence 1 in
// one pass; the same prompt again goes on from the checkpoint before its last token, with the
// same bits. Each pass that wants logits costs lavapipe seconds (the head's 151936 rows):
// only the last pass of a split run wants them, and its token's state passed through all the
// others.
TEST_F(GpuDeltaNetTest, LogitsAgreeWithTheCpuForAnyBatchAndSequence) {
  if (!skip_.empty()) GTEST_SKIP() << skip_;
  for (const char* preset : {"qwen3next-tiny", "qwen35moe-tiny"}) {
    SCOPED_TRACE(preset);
    // The device's contexts get a model loaded for them: DeltaNet's matrices stay in the
    // mapping (engine/device_matrices.h), uploaded from there.
    std::unique_ptr<Model> m = Load(preset);
    std::unique_ptr<Model> lean = Load(preset, "f32", LoadOptionsFor(Options(true, 512)));
    ASSERT_TRUE(m && lean);
    const std::vector<const WeightMatrix*> owned = DeviceOwnedMatrices(*m, Options(true, 512));
    for (const WeightMatrix* w : {&m->layer(0).wqkv, &m->layer(1).ssm_out}) {
      EXPECT_NE(std::find(owned.begin(), owned.end(), w), owned.end());
    }
    EXPECT_GT(lean->left_to_device_bytes(), 0u);
    const size_t V = m->hparams().n_vocab;
    const std::vector<BatchToken> batch = Interleaved();
    std::vector<float> cpu, gpu;
    auto on_cpu = Make(*m, false, 512);
    ASSERT_TRUE(on_cpu && on_cpu->Decode(batch, &cpu).ok());
    auto on_gpu = Make(*lean, true, 512);
    ASSERT_TRUE(on_gpu);
    const std::string plan = on_gpu->storage_plan().ToString();
    EXPECT_NE(plan.find("the DeltaNet attention of 3 layers ("), std::string::npos) << plan;
    EXPECT_EQ(plan.find("DeltaNet layers"), std::string::npos) << plan;  // none on the CPU
    // The gated GQA layer too: only norms and routers stay on the CPU (with the gate skipped
    // on the device, the logits miss by 0.66 and 0.61 of their rms: tried).
    EXPECT_NE(plan.find("the attention of 1 layers ("), std::string::npos) << plan;
    EXPECT_TRUE(plan.ends_with("; norms and routers on the CPU")) << plan;
    EXPECT_EQ(on_gpu->device_parts().attention_layers, 4);
    ASSERT_TRUE(on_gpu->Decode(batch, &gpu).ok());
    ASSERT_EQ(cpu.size(), gpu.size());
    double sq = 0, worst = 0;
    for (size_t i = 0; i < cpu.size(); ++i) {
      sq += double{cpu[i]} * cpu[i];
      worst = std::max(worst, std::fabs(double{cpu[i]} - gpu[i]));
    }
    // As engine/gpu_experts_test.cc: within the spread of the CPU's own kernel variants; a
    // wrong shader moves logits by their size.
    const double rms = std::sqrt(sq / cpu.size());
    std::printf("  %s: worst |gpu - cpu| %.2e of the rms %.3g\n", preset, worst / rms, rms);
    EXPECT_LT(worst, 1e-3 * rms) << "rms " << rms;
    EXPECT_FALSE(cpu == gpu) << "nothing ran on the device?";
    if (std::string(preset) != "qwen3next-tiny") continue;

    // Sequence 0 alone in passes of 3 (7 tokens: 3, 3, 1), then again from the checkpoint.
    on_gpu.reset();
    auto split = Make(*lean, true, 3);
    ASSERT_TRUE(split);
    std::vector<float> last;
    ASSERT_TRUE(split->Eval(kA, LogitsFor::kLast, &last).ok());
    EXPECT_TRUE(last == Rows(gpu, V, {6})) << "in passes of 3";
    Result<size_t> kept = split->EvalAfterPrefix(kA, kA, &last);
    ASSERT_TRUE(kept.ok()) << kept.status().message();
    EXPECT_EQ(kept.value(), kA.size() - 1);
    EXPECT_TRUE(last == Rows(gpu, V, {6})) << "from the checkpoint";
  }
}

// States larger than the device binds at once (lavapipe: 128 MiB; 1024 sequences of
// qwen3next-tiny need 210 MiB a layer) keep the DeltaNet layers on the CPU, the reason in the
// plan line; the rest of the device's parts stay there.
TEST_F(GpuDeltaNetTest, StatesPastOneBindingStayOnTheCpu) {
  if (!skip_.empty()) GTEST_SKIP() << skip_;
  std::unique_ptr<Model> m = Load("qwen3next-tiny", "q8_0");  // the smaller file: no logits
  ASSERT_TRUE(m);
  ContextOptions o;
  o.n_ctx = 16;
  o.n_threads = 2;
  o.n_batch = 8;
  o.n_seq_max = 1024;
  o.gpu.device = 0;
  auto ctx = Context::Create(*m, o);
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();
  const std::string plan = (*ctx)->storage_plan().ToString();
  if (plan.find("the DeltaNet attention of") != std::string::npos) {
    GTEST_SKIP() << "this device binds 1024 sequences' states at once: " << plan;
  }
  EXPECT_NE(plan.find("DeltaNet layers (a layer's recurrent states of "), std::string::npos)
      << plan;
  EXPECT_NE(plan.find("the output head ("), std::string::npos) << plan;
}

}  // namespace
}  // namespace mt
