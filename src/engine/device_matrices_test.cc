// The dense matrices a device owns get no host copy (engine/device_matrices.h): the model
// loaded for a device leaves them in the file's mapping, the memory plan counts them on the
// device only, and the logits keep their bits, on the device and on a CPU that reads the
// mapping after all. On whatever Vulkan device the machine has (lavapipe here and in CI).
#include "engine/device_matrices.h"

#include <gtest/gtest.h>

#include "engine/context.h"
#include "engine/model.h"
#include "gpu/device.h"
#include "synth/synth_test_util.h"

namespace mt {
namespace {

using testing_synth::SynthModels;

std::vector<float> Logits(const Model& m, const ContextOptions& o, std::string* plan = nullptr) {
  auto ctx = Context::Create(m, o);
  EXPECT_TRUE(ctx.ok()) << ctx.status().message();
  if (!ctx.ok()) return {};
  std::vector<float> logits;
  const std::vector<int32_t> tokens = {5, 1000, 77, 4242, 9, 31000};
  Status s = (*ctx)->Eval(tokens, LogitsFor::kAll, &logits);
  EXPECT_TRUE(s.ok()) << s.message();
  if (plan != nullptr) *plan = (*ctx)->storage_plan().ToString();
  return logits;
}

std::unique_ptr<Model> Load(const std::string& path, const LoadOptions& options) {
  auto m = Model::Load(path, options);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? std::move(m.value()) : nullptr;
}

TEST(DeviceMatricesTest, WithoutADeviceEveryMatrixIsCopied) {
  SynthModels models("device-matrices-cpu", 3);
  const std::string path = models.Get("olmoe-tiny", "q4_0");
  std::unique_ptr<Model> plain = Load(path, LoadOptions{});
  ASSERT_NE(plain, nullptr);
  ContextOptions cpu;  // no --device
  EXPECT_TRUE(DeviceOwnedMatrices(*plain, cpu).empty());
  std::unique_ptr<Model> loaded = Load(path, LoadOptionsFor(cpu));
  ASSERT_NE(loaded, nullptr);
  EXPECT_EQ(loaded->left_to_device_bytes(), 0u);
  EXPECT_EQ(loaded->dense_bytes(), plain->dense_bytes());
  ContextOptions missing;
  missing.gpu.device = 1000;  // no machine has it
  EXPECT_TRUE(DeviceOwnedMatrices(*plain, missing).empty());
}

// deepseek3-tiny at q4_k_m: MLA with the q LoRA, a shared expert, two dense FFN layers and an
// untied head, each with matrices the CPU keeps in panels.
TEST(DeviceMatricesTest, TheDevicesMatricesStayInTheMappingWithTheSameBits) {
  if (std::string why = gpu::NoDeviceReason(); !why.empty()) GTEST_SKIP() << why;
  SynthModels models("device-matrices", 3);
  const std::string path = models.Get("deepseek3-tiny", "q4_k_m");
  ContextOptions device;
  device.n_ctx = 32;
  device.gpu.device = 0;
  std::unique_ptr<Model> plain = Load(path, LoadOptions{});
  std::unique_ptr<Model> lean = Load(path, LoadOptionsFor(device));
  ASSERT_TRUE(plain && lean);

  const std::vector<const WeightMatrix*> owned = DeviceOwnedMatrices(*plain, device);
  uint64_t owned_bytes = 0;
  for (const WeightMatrix* w : owned) owned_bytes += w->row_bytes * uint64_t(w->rows);
  const LayerWeights& dense0 = plain->layer(0);
  const LayerWeights& moe5 = plain->layer(5);
  for (const WeightMatrix* w : {&dense0.wq_a, &dense0.wkv_a, &dense0.wk_b, &dense0.wo,
                                &dense0.ffn_down, &moe5.shexp_up, &plain->output()}) {
    EXPECT_NE(std::find(owned.begin(), owned.end(), w), owned.end());
  }
  EXPECT_EQ(lean->left_to_device_bytes(), owned_bytes);
  EXPECT_EQ(lean->dense_bytes() + owned_bytes, plain->dense_bytes());
  EXPECT_GT(owned_bytes, plain->dense_bytes() / 2);  // all but the embedding and vectors

  std::string plan;
  const std::vector<float> want = Logits(*plain, device);
  EXPECT_TRUE(Logits(*lean, device, &plan) == want);
  EXPECT_NE(plan.find("on the device only"), std::string::npos) << plan;
  // A CPU that computes with the mapped rows (a part the device refused) gets the bits of
  // the copied panels.
  ContextOptions cpu;
  cpu.n_ctx = 32;
  EXPECT_TRUE(Logits(*lean, cpu) == Logits(*plain, cpu));
}

}  // namespace
}  // namespace mt
