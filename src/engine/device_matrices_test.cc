// The dense matrices a device owns get no host copy (engine/device_matrices.h): the model
// loaded for a device leaves them in the file's mapping, the memory plan counts them on the
// device only, and the logits keep their bits, on the device and on a CPU that reads the
// mapping after all; the mapping's pages of what the device holds leave the process. On
// whatever Vulkan device the machine has (lavapipe here and in CI).
#include "engine/device_matrices.h"

#include <gtest/gtest.h>

#include "engine/context.h"
#include "engine/model.h"
#include "gpu/device.h"
#include "io/io_test_util.h"
#include "synth/synth_test_util.h"

namespace mt {
namespace {

using io_test::PresentPages;
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

// Reads every byte of [data, data + bytes), so that its pages are mapped in.
uint64_t Touch(const uint8_t* data, uint64_t bytes) {
  uint64_t sum = 0;
  for (uint64_t i = 0; i < bytes; i += 64) sum += data[i];
  return sum;
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

// After the upload the host holds no copy, not even as mapped pages: the pages of the file
// that hold the device's matrices and experts leave this process (GgufModel::ReleasePages),
// and stay out while the CPU computes the rest.
TEST(DeviceMatricesTest, TheDevicesBytesLeaveTheProcessAfterTheUpload) {
  if (std::string why = gpu::NoDeviceReason(); !why.empty()) GTEST_SKIP() << why;
  SynthModels models("device-matrices-pages", 3);
  const std::string path = models.Get("deepseek3-tiny", "q4_k_m");
  ContextOptions device;
  device.n_ctx = 32;
  device.gpu.device = 0;
  device.gpu.cache_pct = 100;  // every routed expert on the device
  std::unique_ptr<Model> lean = Load(path, LoadOptionsFor(device));
  ASSERT_NE(lean, nullptr);
  const std::vector<const WeightMatrix*> owned = DeviceOwnedMatrices(*lean, device);
  ASSERT_FALSE(owned.empty());
  const ExpertLayout& layout = lean->expert_layout();
  std::vector<std::pair<const uint8_t*, uint64_t>> ranges;
  for (const WeightMatrix* w : owned) ranges.emplace_back(w->data, w->row_bytes * w->rows);
  for (uint32_t l = 0; l < layout.n_layer(); ++l) {
    if (!layout.has_experts(l)) continue;
    const ExpertSpec& spec = layout.spec(l);
    for (uint32_t e = 0; e < layout.n_expert(); ++e) {
      ranges.emplace_back(layout.mapped(l, e, kGate), spec.gate_bytes());
      ranges.emplace_back(layout.mapped(l, e, kUp), spec.up_bytes());
      ranges.emplace_back(layout.mapped(l, e, kDown), spec.down_bytes());
    }
  }
  uint64_t pages = 0, sum = 0;
  for (const auto& [data, bytes] : ranges) {
    sum += Touch(data, bytes);
    pages += PresentPages(data, bytes);
  }
  ASSERT_GT(pages, 100u) << sum;  // mapped in before the Context, by the reads above

  std::string plan;
  EXPECT_FALSE(Logits(*lean, device, &plan).empty());
  uint64_t left = 0;
  for (const auto& [data, bytes] : ranges) left += PresentPages(data, bytes);
  EXPECT_EQ(left, 0u) << "of " << pages << " pages; " << plan;
}

}  // namespace
}  // namespace mt
