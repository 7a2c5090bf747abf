// The device tier of the routed experts (engine/gpu_experts.h) on whatever Vulkan device the
// machine has (lavapipe here and in CI; skipped without one): logits within float rounding
// of the CPU's, the same bits for every host tier, thread count and batch size, and the
// store never asked for an expert the device holds.
#include "engine/gpu_experts.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/context.h"
#include "engine/model.h"
#include "gpu/device.h"
#include "gpu/test_no_driver.h"
#include "synth/synth.h"
#include "synth/synth_test_util.h"

namespace mt {
namespace {

using testing_synth::SynthModels;

TEST(GpuExpertFlags, ParseDeviceAndCache) {
  GpuExpertOptions o;
  EXPECT_TRUE(ParseDevice("vulkan", &o).ok());
  EXPECT_EQ(o.device, 0);
  EXPECT_TRUE(ParseDevice("vulkan:3", &o).ok());
  EXPECT_EQ(o.device, 3);
  EXPECT_TRUE(ParseDevice("cpu", &o).ok());
  EXPECT_EQ(o.device, -1);
  EXPECT_FALSE(o.wanted());
  for (const char* bad : {"cuda", "vulkan:", "vulkan:x", "vulkan:-1", "vulkan:99999999"}) {
    Status s = ParseDevice(bad, &o);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("--device"), std::string::npos) << s.message();
  }
  EXPECT_TRUE(ParseGpuExpertCache("25%", &o).ok());
  EXPECT_EQ(o.cache_pct, 25.0);
  EXPECT_FALSE(o.cache_bytes);
  EXPECT_TRUE(o.wanted());
  EXPECT_TRUE(ParseGpuExpertCache("2G", &o).ok());
  EXPECT_EQ(o.cache_bytes, uint64_t{2} << 30);
  EXPECT_FALSE(o.cache_pct);
  for (const char* bad : {"0%", "101%", "x%", "lots"}) {
    Status s = ParseGpuExpertCache(bad, &o);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("--gpu-expert-cache"), std::string::npos) << s.message();
  }
}

class GpuExpertsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    models_ = std::make_unique<SynthModels>("gpu-experts-test", 5);
    skip_ = gpu::NoDeviceReason();
  }
  static void TearDownTestSuite() { models_.reset(); }

  // f32 weights; "<preset>-legacy" the preset with MLA's legacy attn_kv_b (split on load).
  static std::unique_ptr<Model> Load(const std::string& preset) {
    std::string path;
    if (preset.ends_with("-legacy")) {
      path = (models_->dir() / (preset + ".gguf")).string();
      SynthOptions so;
      so.output_path = path;
      so.preset = preset.substr(0, preset.size() - 7);
      so.file_type = "f32";
      so.seed = 5;
      so.legacy_mla = true;
      Result<SynthResult> r = Synthesize(so);
      EXPECT_TRUE(r.ok()) << r.status().message();
    } else {
      path = models_->Get(preset, "f32");
    }
    auto m = Model::Load(path, LoadOptions{});
    EXPECT_TRUE(m.ok()) << m.status().message();
    return std::move(m.value());
  }

  // Logits of kTokens; `gpu_cache` "" runs everything on the CPU, "none" only the dense part
  // on the device (--device vulkan), else that --gpu-expert-cache.
  static std::vector<float> Logits(const Model& m, const std::string& gpu_cache,
                                   StorageOptions storage = {}, int threads = 2,
                                   uint32_t n_batch = 512, std::string* plan = nullptr,
                                   uint64_t* requests = nullptr,
                                   KvTypes kv_types = KvElemType::kF16) {
    ContextOptions o;
    o.n_ctx = 64;
    o.kv_types = kv_types;
    o.n_threads = threads;
    o.n_batch = n_batch;
    o.storage = std::move(storage);
    if (gpu_cache == "none") {
      o.gpu.device = 0;
    } else if (!gpu_cache.empty()) {
      EXPECT_TRUE(ParseGpuExpertCache(gpu_cache, &o.gpu).ok());
    }
    auto ctx = Context::Create(m, o);
    EXPECT_TRUE(ctx.ok()) << ctx.status().message();
    if (!ctx.ok()) return {};
    std::vector<float> logits;
    Status s = (*ctx)->Eval(kTokens, LogitsFor::kAll, &logits);
    EXPECT_TRUE(s.ok()) << s.message();
    if (plan != nullptr) *plan = (*ctx)->storage_plan().ToString();
    if (requests != nullptr) *requests = (*ctx)->expert_store().stats().total.requests;
    return logits;
  }

  static inline const std::vector<int32_t> kTokens = {5, 1000, 77, 4242, 9, 31000, 12, 640, 33, 1};
  static inline std::unique_ptr<SynthModels> models_;
  static inline std::string skip_;
};

// f32 weights: the CPU computes in f32 too (no quantized activations), so the only
// difference is the order of the sums. Attention and the output head go to the device with
// either flag; the experts with --gpu-expert-cache.
TEST_F(GpuExpertsTest, LogitsAgreeWithTheCpuWithinRounding) {
  if (!skip_.empty()) GTEST_SKIP() << skip_;
  // olmoe: plain SwiGLU, a q/k norm over the whole projection; gpt-oss: expert and
  // attention biases, the clamped activation and sinks (its sliding window is longer than
  // these tokens: gpu/attention_ops_test.cc covers windows);
  // deepseek2: MLA without a q LoRA (V2-Lite's), shared experts and a leading dense layer;
  // deepseek3: MLA with the q LoRA; the legacy file: attn_kv_b split into an f32 k_b.
  // (qwen3next's gated GQA: engine/gpu_deltanet_test.cc.)
  for (const char* preset : {"olmoe-tiny", "gpt-oss-tiny", "deepseek2-tiny", "deepseek3-tiny",
                             "deepseek2-tiny-legacy"}) {
    std::unique_ptr<Model> m = Load(preset);
    const std::vector<float> cpu = Logits(*m, "");
    // The expert cache changes nothing in MLA: one run for the other MLA variants (lavapipe
    // takes seconds a Context).
    const bool variant =
        std::string(preset) != "deepseek2-tiny" && std::string(preset).starts_with("deepseek");
    for (const char* cache : {"none", "50%"}) {
      if (variant && cache[0] != 'n') continue;
      SCOPED_TRACE(std::string(preset) + " " + cache);
      std::string plan;
      const std::vector<float> gpu = Logits(*m, cache, {}, 2, 512, &plan);
      EXPECT_NE(plan.find("the output head ("), std::string::npos) << plan;
      const bool mla = std::string(preset).starts_with("deepseek");
      EXPECT_EQ(plan.find("the attention of") != std::string::npos, !mla) << plan;
      EXPECT_EQ(plan.find("the MLA attention of") != std::string::npos, mla) << plan;
      EXPECT_EQ(plan.find("MLA attention ("), std::string::npos) << plan;  // none on the CPU
      EXPECT_EQ(plan.find("routed experts") != std::string::npos, cache[0] != 'n') << plan;
      ASSERT_EQ(cpu.size(), gpu.size());
      double sq = 0, worst = 0;
      for (size_t i = 0; i < cpu.size(); ++i) {
        sq += double{cpu[i]} * cpu[i];
        worst = std::max(worst, std::fabs(double{cpu[i]} - gpu[i]));
      }
      // The CPU's own kernel variants differ this much on these models (scalar or AVX2 vs
      // AVX-512, MOETIER_ISA: up to 4.1e-4 of the rms on olmoe-tiny; the device: 2.8e-4); a
      // wrong shader moves logits by their size.
      const double rms = std::sqrt(sq / cpu.size());
      std::printf("  %s %s: worst |gpu - cpu| %.2e of the rms %.3g\n", preset, cache, worst / rms,
                  rms);
      EXPECT_LT(worst, 1e-3 * rms) << "rms " << rms;
      EXPECT_FALSE(cpu == gpu) << "nothing ran on the device?";
    }
  }
}

// A device and a placement give the same bits whatever the host does: every CPU tier, one or
// two threads, one token a batch; and experts the device holds are never asked of the store.
TEST_F(GpuExpertsTest, SameBitsForEveryHostTierThreadCountAndBatch) {
  if (!skip_.empty()) GTEST_SKIP() << skip_;
  std::unique_ptr<Model> m = Load("olmoe-tiny");
  uint64_t all_cpu_requests = 0, split_requests = 0;
  StorageOptions stream;
  stream.mode = MoeStorage::kStream;
  ASSERT_TRUE(ParseExpertCache("30%", &stream).ok());
  Logits(*m, "", stream, 2, 512, nullptr, &all_cpu_requests);
  std::string plan;
  StorageOptions resident;
  resident.mode = MoeStorage::kResident;
  const std::vector<float> want = Logits(*m, "40%", resident, 2, 512, &plan);
  // The device's experts get no copy in RAM.
  EXPECT_NE(plan.find("in RAM, the rest on the device"), std::string::npos) << plan;
  EXPECT_TRUE(Logits(*m, "40%", stream, 2, 512, nullptr, &split_requests) == want);
  EXPECT_LT(split_requests, all_cpu_requests);
  StorageOptions mmap;
  mmap.mode = MoeStorage::kMmap;
  EXPECT_TRUE(Logits(*m, "40%", mmap, 1) == want);
  EXPECT_TRUE(Logits(*m, "40%", {}, 2, 1) == want);
}

// A CPU device (lavapipe) or an integrated GPU holds its experts in the host's RAM: the
// memory plan counts them, and refuses a budget they do not fit in one line.
TEST_F(GpuExpertsTest, ADeviceInHostMemoryCountsInTheBudget) {
  if (!skip_.empty()) GTEST_SKIP() << skip_;
  Result<std::vector<gpu::DeviceInfo>> devices = gpu::ListDevices();
  ASSERT_TRUE(devices.ok());
  if ((*devices)[0].type != "cpu" && (*devices)[0].type != "integrated") {
    GTEST_SKIP() << (*devices)[0].name << " has memory of its own";
  }
  std::unique_ptr<Model> m = Load("olmoe-tiny");
  ContextOptions o;
  o.n_ctx = 64;
  o.storage.mode = MoeStorage::kMmap;  // no experts in the store's RAM
  o.storage.mem_budget = uint64_t{1} << 40;
  auto ctx = Context::Create(*m, o);
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();
  const StoragePlan& plan = (*ctx)->storage_plan();
  // Room for everything but the device's experts.
  o.storage.mem_budget = plan.dense + plan.kv_cache + plan.scratch + (64 << 10);
  ASSERT_TRUE(Context::Create(*m, o).ok());
  ASSERT_TRUE(ParseGpuExpertCache("100%", &o.gpu).ok());
  auto refused = Context::Create(*m, o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("the device's memory in RAM"), std::string::npos)
      << refused.status().message();
}

// MLA on the device: a token's bits do not depend on the batch (3 tokens a pass or all at
// once).
TEST_F(GpuExpertsTest, MlaOnTheDeviceIsBatchInvariant) {
  if (!skip_.empty()) GTEST_SKIP() << skip_;
  std::unique_ptr<Model> m = Load("deepseek3-tiny");
  EXPECT_TRUE(Logits(*m, "none", {}, 2, 3) == Logits(*m, "none", {}, 2, 512));
}

// A q8_0 KV cache (GQA's K and V, MLA's latent rows) is on the device too, stored as the CPU
// stores it and attended with the query rounded to q8_0 as the CPU does (both bit for bit in
// gpu/attention_ops_test.cc). Rounding to codes is discontinuous: a value the two sides compute
// a rounding apart may take the next code (a few of the ~10^5 elements here), which moves
// logits by up to 1e-2 of their rms. So the bound is relative to what q8_0 itself moves: the
// rms difference from the CPU's q8_0 logits under 0.3 of the rms difference between the
// CPU's q8_0 and f16 logits (measured 0.10 on olmoe-tiny, 0.14 on deepseek3-tiny; with the
// query not rounded on the device, 1.7 and 0.69: tried).
TEST_F(GpuExpertsTest, AQ8CacheRunsOnTheDeviceAsOnTheCpu) {
  if (!skip_.empty()) GTEST_SKIP() << skip_;
  for (const char* preset : {"olmoe-tiny", "deepseek3-tiny"}) {
    SCOPED_TRACE(preset);
    std::unique_ptr<Model> m = Load(preset);
    const KvTypes q8 = KvElemType::kQ8_0;
    const std::vector<float> cpu16 = Logits(*m, "");
    const std::vector<float> cpu = Logits(*m, "", {}, 2, 512, nullptr, nullptr, q8);
    std::string plan;
    const std::vector<float> gpu = Logits(*m, "none", {}, 2, 512, &plan, nullptr, q8);
    const bool mla = std::string(preset).starts_with("deepseek");
    EXPECT_NE(plan.find(mla ? "the MLA attention of" : "the attention of"), std::string::npos)
        << plan;
    EXPECT_EQ(plan.find("attention ("), std::string::npos) << plan;  // none on the CPU
    ASSERT_EQ(cpu.size(), gpu.size());
    ASSERT_EQ(cpu.size(), cpu16.size());
    double device = 0, q8_effect = 0;  // sums of squares
    for (size_t i = 0; i < cpu.size(); ++i) {
      device += (double{gpu[i]} - cpu[i]) * (double{gpu[i]} - cpu[i]);
      q8_effect += (double{cpu16[i]} - cpu[i]) * (double{cpu16[i]} - cpu[i]);
    }
    const double ratio = std::sqrt(device / q8_effect);
    std::printf("  %s: rms |gpu - cpu| with q8_0 caches %.3f of q8_0's own effect\n", preset,
                ratio);
    EXPECT_LT(ratio, 0.3);
    EXPECT_FALSE(cpu == gpu) << "nothing ran on the device?";
  }
}

// LFU at a fixed point: after a prompt, each layer's device experts were routed at least as
// often as any it lacks, and a second call finds nothing to trade. A swap changes only where
// two experts run: the next prompt gives the bits of a Context created with that placement
// (a profile naming it), whichever host tier gave the other expert back.
TEST_F(GpuExpertsTest, PromotionsFollowTheRoutingCounts) {
  if (!skip_.empty()) GTEST_SKIP() << skip_;
  std::unique_ptr<Model> m = Load("olmoe-tiny");
  const HParams& hp = m->hparams();
  const std::vector<int32_t> second = {7, 300, 3, 9000, 41, 2};
  StorageOptions resident, stream, mmap;
  resident.mode = MoeStorage::kResident;
  stream.mode = MoeStorage::kStream;
  ASSERT_TRUE(ParseExpertCache("30%", &stream).ok());
  mmap.mode = MoeStorage::kMmap;
  for (const StorageOptions& storage : {resident, stream, mmap}) {
    SCOPED_TRACE(MoeStorageName(storage.mode));
    ContextOptions o;
    o.n_ctx = 64;
    o.storage = storage;
    ASSERT_TRUE(ParseGpuExpertCache("25%", &o.gpu).ok());
    auto ctx = Context::Create(*m, o);
    ASSERT_TRUE(ctx.ok()) << ctx.status().message();
    std::vector<float> logits;
    ASSERT_TRUE((*ctx)->Eval(kTokens, LogitsFor::kLast, &logits).ok());
    Result<uint32_t> swaps = (*ctx)->PromoteDeviceExperts();
    ASSERT_TRUE(swaps.ok()) << swaps.status().message();
    EXPECT_GT(*swaps, 0u);  // the first ids held, not the most routed
    const Result<uint32_t> again = (*ctx)->PromoteDeviceExperts();
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again.value(), 0u);
    const GpuExpertTier& tier = *(*ctx)->gpu_experts();
    EXPECT_EQ(tier.promotions(), *swaps);
    const RoutingStats& counts = (*ctx)->routing_stats();
    RoutingStats placement(hp.arch, hp.n_layer, hp.n_expert);
    for (uint32_t l = 0; l < hp.n_layer; ++l) {
      uint64_t coldest_held = UINT64_MAX, hottest_other = 0;
      for (uint32_t e = 0; e < hp.n_expert; ++e) {
        uint64_t& side = tier.Owns(l, e) ? coldest_held : hottest_other;
        side = tier.Owns(l, e) ? std::min(side, counts.count(l, e))
                               : std::max(side, counts.count(l, e));
        if (tier.Owns(l, e)) placement.Add(l, e);
      }
      EXPECT_GE(coldest_held, hottest_other) << "layer " << l;
    }
    (*ctx)->ClearKv();
    std::vector<float> after;
    ASSERT_TRUE((*ctx)->Eval(second, LogitsFor::kAll, &after).ok());

    const std::string path = (models_->dir() / "promoted-placement.json").string();
    ASSERT_TRUE(placement.Save(path).ok());
    ContextOptions placed = o;
    placed.storage.placement_file = path;
    auto fresh = Context::Create(*m, placed);
    ASSERT_TRUE(fresh.ok()) << fresh.status().message();
    std::vector<float> want;
    ASSERT_TRUE((*fresh)->Eval(second, LogitsFor::kAll, &want).ok());
    EXPECT_TRUE(after == want);
    for (uint32_t l = 0; l < hp.n_layer; ++l) {
      for (uint32_t e = 0; e < hp.n_expert; ++e) {
        EXPECT_EQ((*fresh)->gpu_experts()->Owns(l, e), tier.Owns(l, e));
      }
    }
  }
}

TEST_F(GpuExpertsTest, NoDeviceIsANoticeAndTheCpuRunsEverything) {
  // The Vulkan loader finds no driver: the plan says so, the logits are the CPU's.
  std::unique_ptr<Model> m = Load("olmoe-tiny");
  const std::vector<float> cpu = Logits(*m, "");
  std::string plan;
  std::vector<float> got;
  {
    gpu::ScopedNoVulkanDriver no_driver;
    got = Logits(*m, "50%", {}, 2, 512, &plan);
  }
  EXPECT_NE(plan.find("no device, everything on the CPU"), std::string::npos) << plan;
  EXPECT_TRUE(got == cpu);
}

}  // namespace
}  // namespace mt
