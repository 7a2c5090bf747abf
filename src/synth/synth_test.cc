// Tests of the synth building blocks: llama.cpp's q4_k_m type mix, weight generation and
// the router skew calibration.
#include "synth/synth.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/arch.h"
#include "synth/file_type.h"
#include "synth/presets.h"
#include "synth/weight_init.h"

namespace mt {
namespace {

// Types chosen for every tensor of a model, by tensor name.
std::map<std::string, GgmlType> MixOf(const HParams& hp, std::string_view type) {
  const FileType* ft = FindFileType(type);
  EXPECT_TRUE(ft);
  const ModelParts parts = DescribeModel(hp);
  std::vector<TensorDesc> descs = ArchTensors(parts, hp);
  for (TensorDesc& d : NextnTensors(parts, hp)) descs.push_back(std::move(d));  // as synth
  std::vector<std::string> names;
  for (const TensorDesc& d : descs) names.push_back(TensorName(d.role, d.layer, d.suffix));
  TensorTypeMixer mixer(*ft, hp, names);
  std::map<std::string, GgmlType> out;
  for (const TensorDesc& d : descs) {
    std::string name = TensorName(d.role, d.layer, d.suffix);
    std::string error;
    std::optional<GgmlType> t = mixer.Next(d, name, &error);
    EXPECT_TRUE(t.has_value()) << error;
    out[name] = t.value_or(GgmlType::kF32);
  }
  return out;
}

std::map<std::string, GgmlType> Mix(std::string_view preset, std::string_view type) {
  const SynthPreset* p = FindSynthPreset(preset);
  EXPECT_TRUE(p);
  return MixOf(p->hp, type);
}

TEST(FileTypeTest, Q4KMOnQwen3_30B_FollowsLlamaCppRules) {
  auto m = Mix("qwen3-30b-a3b", "q4_k_m");
  EXPECT_EQ(m["token_embd.weight"], GgmlType::kQ4_K);
  EXPECT_EQ(m["output.weight"], GgmlType::kQ6_K);
  EXPECT_EQ(m["output_norm.weight"], GgmlType::kF32);
  EXPECT_EQ(m["blk.0.ffn_gate_inp.weight"], GgmlType::kF32);
  EXPECT_EQ(m["blk.0.attn_q_norm.weight"], GgmlType::kF32);
  // use_more_bits(i, 48): i < 6, i >= 42, or (i - 6) % 3 == 2 (layers 8, 11, ..., 41).
  for (int il : {0, 5, 8, 11, 41, 42, 47}) {
    EXPECT_EQ(m[fmt::format("blk.{}.ffn_down_exps.weight", il)], GgmlType::kQ6_K) << il;
    EXPECT_EQ(m[fmt::format("blk.{}.attn_v.weight", il)], GgmlType::kQ6_K) << il;
  }
  for (int il : {6, 7, 9, 10, 40}) {
    EXPECT_EQ(m[fmt::format("blk.{}.ffn_down_exps.weight", il)], GgmlType::kQ4_K) << il;
    EXPECT_EQ(m[fmt::format("blk.{}.attn_v.weight", il)], GgmlType::kQ4_K) << il;
  }
  EXPECT_EQ(m["blk.6.ffn_gate_exps.weight"], GgmlType::kQ4_K);
  EXPECT_EQ(m["blk.6.ffn_up_exps.weight"], GgmlType::kQ4_K);
  EXPECT_EQ(m["blk.6.attn_k.weight"], GgmlType::kQ4_K);
  EXPECT_EQ(m["blk.6.attn_output.weight"], GgmlType::kQ4_K);
}

TEST(FileTypeTest, EightExpertModelsGetLlamaCppsBumps) {
  auto m = Mix("tiny", "q4_k_m");
  EXPECT_EQ(m["blk.0.attn_v.weight"], GgmlType::kQ8_0);
  EXPECT_EQ(m["blk.0.attn_k.weight"], GgmlType::kQ8_0);
  EXPECT_EQ(m["blk.0.attn_output.weight"], GgmlType::kQ5_K);
  EXPECT_EQ(m["blk.0.attn_q.weight"], GgmlType::kQ4_K);
  // use_more_bits(i, 4) is true for i = 2 ((2 - 0) % 3 == 2) and i = 3 (>= 7 * 4 / 8).
  EXPECT_EQ(m["blk.0.ffn_down_exps.weight"], GgmlType::kQ4_K);
  EXPECT_EQ(m["blk.1.ffn_down_exps.weight"], GgmlType::kQ4_K);
  EXPECT_EQ(m["blk.2.ffn_down_exps.weight"], GgmlType::kQ6_K);
  EXPECT_EQ(m["blk.3.ffn_down_exps.weight"], GgmlType::kQ6_K);
}

TEST(FileTypeTest, Mxfp4MoePutsExpertsInMxfp4AndTheRestInQ8_0) {
  auto m = Mix("olmoe-tiny", "mxfp4");
  EXPECT_EQ(m["blk.1.ffn_up_exps.weight"], GgmlType::kMXFP4);
  EXPECT_EQ(m["blk.1.ffn_down_exps.weight"], GgmlType::kMXFP4);
  EXPECT_EQ(m["blk.1.attn_q.weight"], GgmlType::kQ8_0);
  EXPECT_EQ(m["token_embd.weight"], GgmlType::kQ8_0);
  EXPECT_EQ(m["output.weight"], GgmlType::kQ8_0);
  EXPECT_EQ(m["blk.1.ffn_gate_inp.weight"], GgmlType::kF32);
}

TEST(FileTypeTest, FloatTypesKeepRoutersAndNormsInF32) {
  auto m = Mix("qwen2moe-tiny", "bf16");
  EXPECT_EQ(m["blk.0.attn_q.weight"], GgmlType::kBF16);
  EXPECT_EQ(m["blk.0.attn_q.bias"], GgmlType::kF32);
  EXPECT_EQ(m["blk.0.ffn_gate_inp.weight"], GgmlType::kF32);
  EXPECT_EQ(m["blk.0.ffn_gate_inp_shexp.weight"], GgmlType::kF32);
  EXPECT_EQ(m["blk.0.ffn_down_shexp.weight"], GgmlType::kBF16);
  auto q8 = Mix("tiny", "q8_0");
  EXPECT_EQ(q8["output.weight"], GgmlType::kQ8_0);  // Q8_0 outputs stay Q8_0
  auto q4 = Mix("tiny", "q4_0");
  EXPECT_EQ(q4["output.weight"], GgmlType::kQ6_K);  // other types get a Q6_K head
}

TEST(FileTypeTest, RowsNotMultipleOf256FallBackLikeLlamaCpp) {
  HParams hp = FindSynthPreset("tiny")->hp;
  hp.n_ff_exp = 96;  // ffn_down rows of 96: Q4_K -> Q5_0, Q6_K -> Q8_0
  auto m = MixOf(hp, "q4_k_m");
  for (int il = 0; il < 4; ++il) {
    EXPECT_EQ(m[TensorName(TensorRole::kFfnDownExps, il)],
              il >= 2 ? GgmlType::kQ8_0 : GgmlType::kQ5_0)
        << il;
  }
  hp.n_ff_exp = 48;  // not a multiple of 32 either: f16
  m = MixOf(hp, "q4_k_m");
  for (int il = 0; il < 4; ++il) {
    EXPECT_EQ(m[TensorName(TensorRole::kFfnDownExps, il)], GgmlType::kF16) << il;
  }
}

// llama-quantize's own choices, recorded by tests/golden/make_quant_mix.py from
// `llama-quantize --dry-run` on each preset at f16: every quantized tensor's type, for the
// low-bit file types and the others.
TEST(FileTypeTest, MixesMatchLlamaQuantizesDryRun) {
  std::ifstream in(std::string(MT_SOURCE_DIR) + "/tests/golden/quant_mix.json");
  ASSERT_TRUE(in) << "tests/golden/quant_mix.json";
  const nlohmann::json golden = nlohmann::json::parse(in);
  int compared = 0;
  for (const auto& [key, by_type] : golden.items()) {
    SynthOptions o;
    o.preset = key.substr(0, key.find('-', key.find("tiny")));
    o.legacy_mla = key.ends_with("--legacy-mla");
    o.file_type = "f16";
    o.output_path = "unused.gguf";
    o.dry_run = true;
    Result<SynthResult> r = Synthesize(o);  // the hyperparameters a loader reads back
    ASSERT_TRUE(r.ok()) << key << ": " << r.status().message();
    for (const auto& [type, expected] : by_type.items()) {
      std::map<std::string, std::string> want;
      std::istringstream pairs(expected.get<std::string>());
      for (std::string pair; pairs >> pair;) {
        want[pair.substr(0, pair.find('='))] = pair.substr(pair.find('=') + 1);
      }
      for (const auto& [name, got] : MixOf(r->hp, type)) {
        const auto it = want.find(name);
        const std::string w = it == want.end() ? "f32" : it->second;  // left unquantized
        EXPECT_EQ(TypeName(got), w) << key << " " << type << " " << name;
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 4000);
}

TEST(FileTypeTest, DynamicMixesKeepTheDenseParts) {
  auto iq1 = Mix("deepseek3-tiny", "ud-iq1_s");
  EXPECT_EQ(iq1["blk.2.ffn_gate_exps.weight"], GgmlType::kIQ1_S);
  EXPECT_EQ(iq1["blk.2.ffn_up_exps.weight"], GgmlType::kIQ1_S);
  EXPECT_EQ(iq1["blk.5.ffn_down_exps.weight"], GgmlType::kIQ2_XXS);  // the last layer: more bits
  EXPECT_EQ(iq1["blk.3.ffn_down_exps.weight"], GgmlType::kIQ1_S);
  EXPECT_EQ(iq1["blk.2.ffn_up_shexp.weight"], GgmlType::kQ4_K);
  EXPECT_EQ(iq1["blk.2.ffn_down_shexp.weight"], GgmlType::kQ6_K);
  EXPECT_EQ(iq1["blk.0.ffn_gate.weight"], GgmlType::kQ4_K);
  EXPECT_EQ(iq1["blk.0.attn_output.weight"], GgmlType::kQ5_K);
  EXPECT_EQ(iq1["blk.0.attn_q_a.weight"], GgmlType::kQ4_K);
  EXPECT_EQ(iq1["blk.0.attn_k_b.weight"], GgmlType::kQ5_0);  // rows of 64: Q4_K's fallback
  EXPECT_EQ(iq1["output.weight"], GgmlType::kQ6_K);
  auto q2 = Mix("deepseek3-tiny", "ud-q2_k_xl");
  EXPECT_EQ(q2["blk.2.ffn_gate_exps.weight"], GgmlType::kQ2_K);
  EXPECT_EQ(q2["blk.5.ffn_down_exps.weight"], GgmlType::kQ3_K);
  EXPECT_EQ(q2["blk.3.ffn_down_exps.weight"], GgmlType::kQ2_K);
  EXPECT_EQ(q2["blk.2.ffn_gate_shexp.weight"], GgmlType::kQ4_K);
}

TEST(WeightInitTest, RowsDoNotDependOnChunking) {
  WeightInit init;
  init.stddev = 0.5f;
  std::vector<float> all(10 * 33), one(33);
  GenerateRows(init, 42, 0, 10, 33, all.data());
  for (int r = 0; r < 10; ++r) {
    GenerateRows(init, 42, r, 1, 33, one.data());
    for (int c = 0; c < 33; ++c) ASSERT_EQ(one[c], all[r * 33 + c]);
  }
  EXPECT_NE(TensorSeed(1, "a"), TensorSeed(1, "b"));
  EXPECT_NE(TensorSeed(1, "a"), TensorSeed(2, "a"));
}

TEST(WeightInitTest, MomentsMatchTheSpec) {
  WeightInit init;
  init.mean = 1.0f;
  init.stddev = 0.25f;
  constexpr int kN = 1 << 18;
  std::vector<float> v(kN);
  GenerateRows(init, 7, 0, 1, kN, v.data());
  double sum = 0, sq = 0;
  for (float x : v) sum += x;
  double mean = sum / kN;
  for (float x : v) sq += (x - mean) * (x - mean);
  double sd = std::sqrt(sq / kN);
  // Standard error of the mean is 0.25 / 512 ~ 5e-4; of the sd ~ 3.5e-4.
  EXPECT_NEAR(mean, 1.0, 3e-3);
  EXPECT_NEAR(sd, 0.25, 3e-3);
}

TEST(WeightInitTest, ResidualBranchesAreScaledDown) {
  HParams hp = FindSynthPreset("qwen3-30b-a3b")->hp;
  TensorDesc down{TensorRole::kFfnDownExps, 0, TensorSuffix::kWeight, {768, 2048, 128}, true};
  TensorDesc up{TensorRole::kFfnUpExps, 0, TensorSuffix::kWeight, {2048, 768, 128}, true};
  TensorDesc embd{TensorRole::kTokenEmbd, -1, TensorSuffix::kWeight, {2048, 151936}, true};
  InitContext ctx{.hp = hp};
  EXPECT_FLOAT_EQ(InitFor(embd, ctx).stddev, 1.0f);
  EXPECT_FLOAT_EQ(InitFor(up, ctx).stddev, 1.0f / std::sqrt(2048.0f));
  EXPECT_FLOAT_EQ(InitFor(down, ctx).stddev, 1.0f / std::sqrt(768.0f) / std::sqrt(2.0f * 48));
}

TEST(WeightInitTest, UnusedTokensGetNearZeroOutputRows) {
  HParams hp = FindSynthPreset("tiny")->hp;
  hp.n_vocab = 4;
  std::vector<int32_t> types = {1, 5, 3, 5};  // normal, unused, control, unused
  InitContext ctx{hp, 1, 0, types};
  TensorDesc out{TensorRole::kOutput, -1, TensorSuffix::kWeight, {256, 4}, true};
  WeightInit w = InitFor(out, ctx);
  ASSERT_EQ(w.row_scale.size(), 4u);
  EXPECT_EQ(w.row_scale[0], 1.0f);
  EXPECT_LT(w.row_scale[1], 0.1f);
  EXPECT_EQ(w.row_scale[2], 1.0f);
  EXPECT_LT(w.row_scale[3], 0.1f);
}

TEST(WeightInitTest, SkewCalibration) {
  EXPECT_EQ(CalibrateRouterOffsets(0, 128, 8), 0.0f);
  // Uniform: the top 20 % (26 of 128) take about 26/128 of the activations.
  EXPECT_NEAR(SimulatedTopShare(0, 128, 8, 0.2), 26.0 / 128, 0.03);
  for (auto [n, k] : {std::pair{128u, 8u}, {64u, 8u}, {16u, 4u}, {8u, 2u}}) {
    float s1 = CalibrateRouterOffsets(1, n, k);
    EXPECT_GT(s1, 0.1f);
    EXPECT_NEAR(SimulatedTopShare(s1, n, k, 0.2), 0.5, 0.02) << n;
    // Skew 2 goes further: 0.2 + 0.3 * 2 = 0.8 for 128 experts (26 >= k: reachable).
    float s2 = CalibrateRouterOffsets(2, n, k);
    EXPECT_GT(SimulatedTopShare(s2, n, k, 0.2), 0.65) << n;
  }
}

TEST(WeightInitTest, SkewAddsTheSharedDirectionToEmbeddingsAndRouters) {
  HParams hp = FindSynthPreset("olmoe-tiny")->hp;
  InitContext flat{.hp = hp, .seed = 3, .router_offset_scale = 0};
  InitContext skewed{.hp = hp, .seed = 3, .router_offset_scale = 1.0f};
  TensorDesc embd{TensorRole::kTokenEmbd, -1, TensorSuffix::kWeight, {256, hp.n_vocab}, true};
  TensorDesc router{TensorRole::kFfnGateInp, 1, TensorSuffix::kWeight, {256, 16}, true};
  EXPECT_TRUE(InitFor(embd, flat).direction.empty());
  EXPECT_TRUE(InitFor(router, flat).direction.empty());
  WeightInit e = InitFor(embd, skewed), r = InitFor(router, skewed);
  ASSERT_EQ(e.direction.size(), 256u);
  EXPECT_EQ(e.direction, r.direction);  // the same u
  double norm = 0;
  for (float x : e.direction) norm += double(x) * x;
  EXPECT_NEAR(norm, 1.0, 1e-5);
  EXPECT_FLOAT_EQ(e.direction_coef[5], 0.5f * 16.0f);  // share * sqrt(256)
  ASSERT_EQ(r.direction_coef.size(), 16u);
  float lo = *std::min_element(r.direction_coef.begin(), r.direction_coef.end());
  float hi = *std::max_element(r.direction_coef.begin(), r.direction_coef.end());
  EXPECT_LT(lo, 0.0f);  // some experts pushed down, some up
  EXPECT_GT(hi, 0.0f);
}

}  // namespace
}  // namespace mt
