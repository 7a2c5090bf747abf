// Tests of the architecture table, tensor names and hyperparameter keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/gguf_test_util.h"
#include "model/arch.h"
#include "model/hparams.h"
#include "model/memory_plan.h"
#include "model/tensor_names.h"

namespace mt {
namespace {

HParams Qwen3Like() {
  HParams hp;
  hp.arch = "qwen3moe";
  hp.n_vocab = 1000;
  hp.n_ctx_train = 40960;
  hp.n_embd = 256;
  hp.n_layer = 3;
  hp.n_head = 4;
  hp.n_head_kv = 2;
  hp.head_dim_k = hp.head_dim_v = hp.n_rot = 128;  // not n_embd / n_head: keys get written
  hp.n_ff = 1024;
  hp.n_expert = 8;
  hp.n_expert_used = 2;
  hp.n_ff_exp = 512;
  hp.rope_freq_base = 1e6f;
  hp.rms_eps = 1e-6f;
  return hp;
}

TEST(TensorNamesTest, MatchLlamaCpp) {
  EXPECT_EQ(TensorName(TensorRole::kTokenEmbd, -1), "token_embd.weight");
  EXPECT_EQ(TensorName(TensorRole::kOutput, -1), "output.weight");
  EXPECT_EQ(TensorName(TensorRole::kFfnDownExps, 7), "blk.7.ffn_down_exps.weight");
  EXPECT_EQ(TensorName(TensorRole::kAttnQ, 0, TensorSuffix::kBias), "blk.0.attn_q.bias");
  EXPECT_EQ(TensorName(TensorRole::kFfnGateInpShexp, 2), "blk.2.ffn_gate_inp_shexp.weight");
}

TEST(TensorNamesTest, ClassifiesRoutedExperts) {
  EXPECT_TRUE(IsRoutedExpertTensorName("blk.0.ffn_up_exps.weight"));
  EXPECT_TRUE(IsRoutedExpertTensorName("blk.12.ffn_gate_up_exps.weight"));
  EXPECT_FALSE(IsRoutedExpertTensorName("blk.0.ffn_up_shexp.weight"));
  EXPECT_FALSE(IsRoutedExpertTensorName("blk.0.ffn_gate_inp.weight"));
  EXPECT_EQ(LayerOfTensorName("blk.12.attn_q.weight"), 12);
  EXPECT_EQ(LayerOfTensorName("token_embd.weight"), -1);
  EXPECT_EQ(LayerOfTensorName("blk.x.attn_q.weight"), -1);
  EXPECT_EQ(LayerOfTensorName("blk.3"), -1);
}

// The parts a family's file describes, read back from the keys WriteHParams writes.
ModelParts PartsOf(std::string arch) {
  HParams hp = Qwen3Like();
  hp.arch = std::move(arch);
  hp.n_ff_shexp = 768;
  GgufMetadata md;
  WriteHParams(hp, md);
  Result<HParams> back = ReadHParams(md);
  EXPECT_TRUE(back.ok()) << back.status().message();
  return back.ok() ? DescribeModel(back.value()) : ModelParts{};
}

TEST(ArchTest, TableHasTheFamiliesAndTheirParts) {
  EXPECT_EQ(SupportedArchNames(),
            "qwen3moe, olmoe, llama, qwen2moe, deepseek2, glm4moe, gpt-oss, qwen3next, qwen35moe");
  EXPECT_EQ(FindArch("gpt2"), nullptr);
  const ModelParts olmoe = PartsOf("olmoe"), llama = PartsOf("llama");
  const ModelParts qwen3 = PartsOf("qwen3moe"), qwen2 = PartsOf("qwen2moe");
  EXPECT_EQ(olmoe.layers[0].attention.gqa.qk_norm, QkNorm::kWholeProjection);
  EXPECT_EQ(qwen3.layers[2].attention.gqa.qk_norm, QkNorm::kPerHead);
  EXPECT_EQ(llama.rope.type, RopeType::kNorm);
  EXPECT_EQ(qwen3.rope.type, RopeType::kNeox);
  EXPECT_TRUE(qwen3.router.normalize);
  EXPECT_TRUE(llama.router.normalize);
  EXPECT_FALSE(olmoe.router.normalize);
  EXPECT_EQ(qwen2.layers[0].ffn.shared_gate, SharedExpertGate::kSigmoid);
  EXPECT_EQ(qwen2.layers[0].ffn.n_ff_shared, 768u);
  EXPECT_TRUE(qwen2.layers[0].attention.gqa.qkv_bias);
  for (const ModelParts* p : {&olmoe, &llama, &qwen3, &qwen2}) {
    ASSERT_EQ(p->layers.size(), 3u);
    for (const LayerParts& l : p->layers) {
      EXPECT_EQ(l.attention.kind, AttentionKind::kGqa);
      EXPECT_TRUE(l.has_experts());
      EXPECT_FLOAT_EQ(l.attention.kq_scale, 1.0f / std::sqrt(128.0f));
    }
    EXPECT_EQ(p->router.scoring, ExpertScoring::kSoftmax);
    EXPECT_EQ(p->rope.ext_factor, 0.0f);
  }
}

TEST(ArchTest, Qwen3MoeTensorsHaveLlamaCppShapes) {
  HParams hp = Qwen3Like();
  std::vector<TensorDesc> t = ArchTensors(DescribeModel(hp), hp);
  // token_embd + 12 per layer + output_norm + output
  ASSERT_EQ(t.size(), 1 + 12 * hp.n_layer + 2);
  auto find = [&](TensorRole role, int layer) -> const TensorDesc& {
    for (const TensorDesc& d : t)
      if (d.role == role && d.layer == layer) return d;
    ADD_FAILURE() << "missing role";
    return t[0];
  };
  EXPECT_EQ(find(TensorRole::kAttnQ, 1).shape, (std::vector<uint64_t>{256, 4 * 128}));
  EXPECT_EQ(find(TensorRole::kAttnK, 1).shape, (std::vector<uint64_t>{256, 2 * 128}));
  EXPECT_EQ(find(TensorRole::kAttnOutput, 1).shape, (std::vector<uint64_t>{4 * 128, 256}));
  EXPECT_EQ(find(TensorRole::kAttnQNorm, 2).shape, (std::vector<uint64_t>{128}));
  EXPECT_EQ(find(TensorRole::kFfnGateInp, 0).shape, (std::vector<uint64_t>{256, 8}));
  EXPECT_EQ(find(TensorRole::kFfnGateExps, 0).shape, (std::vector<uint64_t>{256, 512, 8}));
  EXPECT_EQ(find(TensorRole::kFfnDownExps, 0).shape, (std::vector<uint64_t>{512, 256, 8}));
  EXPECT_FALSE(find(TensorRole::kOutput, -1).required);  // may be tied to token_embd
}

TEST(ArchTest, OlmoeNormsCoverWholeProjectionAndQwen2MoeHasSharedExpert) {
  HParams hp = Qwen3Like();
  hp.arch = "olmoe";
  hp.head_dim_k = hp.head_dim_v = hp.n_rot = 64;
  for (const TensorDesc& d : ArchTensors(DescribeModel(hp), hp)) {
    if (d.role == TensorRole::kAttnQNorm) EXPECT_EQ(d.shape, std::vector<uint64_t>{256});
    if (d.role == TensorRole::kAttnKNorm) EXPECT_EQ(d.shape, std::vector<uint64_t>{128});
  }
  hp.arch = "qwen2moe";
  hp.n_ff_shexp = 768;
  int shexp = 0, bias = 0;
  for (const TensorDesc& d : ArchTensors(DescribeModel(hp), hp)) {
    if (d.role == TensorRole::kFfnDownShexp) {
      ++shexp;
      EXPECT_EQ(d.shape, (std::vector<uint64_t>{768, 256}));
    }
    if (d.suffix == TensorSuffix::kBias) ++bias;
  }
  EXPECT_EQ(shexp, 3);
  EXPECT_EQ(bias, 9);
}

TEST(HParamsTest, WriteThenReadRoundTrips) {
  HParams hp = Qwen3Like();
  GgufMetadata md;
  WriteHParams(hp, md);
  EXPECT_EQ(md.FindUint("qwen3moe.expert_feed_forward_length"), 512u);
  EXPECT_EQ(md.FindUint("qwen3moe.attention.key_length"), 128u);
  Result<HParams> back = ReadHParams(md);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->n_layer, 3u);
  EXPECT_EQ(back->head_dim_k, 128u);
  EXPECT_EQ(back->n_rot, 128u);
  EXPECT_EQ(back->n_ff_exp, 512u);
  EXPECT_EQ(back->n_head_kv, 2u);
  EXPECT_FLOAT_EQ(back->rope_freq_base, 1e6f);
  EXPECT_EQ(back->n_vocab, 0u);  // no tokenizer keys written
}

TEST(HParamsTest, LlamaCppDefaultsApply) {
  GgufMetadata md;
  md.Set("general.architecture", GgufValue::String("qwen3moe"));
  md.Set("qwen3moe.context_length", GgufValue::Uint32(4096));
  md.Set("qwen3moe.embedding_length", GgufValue::Uint32(512));
  md.Set("qwen3moe.block_count", GgufValue::Uint32(2));
  md.Set("qwen3moe.feed_forward_length", GgufValue::Uint32(1600));
  md.Set("qwen3moe.attention.head_count", GgufValue::Uint32(8));
  md.Set("qwen3moe.attention.layer_norm_rms_epsilon", GgufValue::Float32(1e-6f));
  md.Set("qwen3moe.expert_count", GgufValue::Uint32(4));
  md.Set("qwen3moe.expert_used_count", GgufValue::Uint32(2));
  md.Set("tokenizer.ggml.tokens", GgufValue::StringArray({"a", "b", "c"}));
  Result<HParams> hp = ReadHParams(md);
  ASSERT_TRUE(hp.ok()) << hp.status().message();
  EXPECT_EQ(hp->n_head_kv, 8u);    // defaults to n_head
  EXPECT_EQ(hp->head_dim_k, 64u);  // n_embd / n_head
  EXPECT_EQ(hp->n_ff_exp, 800u);   // feed_forward_length / expert_used_count
  EXPECT_FLOAT_EQ(hp->rope_freq_base, 10000.0f);
  EXPECT_EQ(hp->n_vocab, 3u);
}

TEST(HParamsTest, ErrorsNameTheKey) {
  GgufMetadata md;
  EXPECT_EQ(ReadHParams(md).status().message(), "missing key general.architecture");
  md.Set("general.architecture", GgufValue::String("gpt2"));
  EXPECT_EQ(ReadHParams(md).status().message(),
            "unsupported architecture 'gpt2' (supported: qwen3moe, olmoe, llama, qwen2moe, "
            "deepseek2, glm4moe, gpt-oss, qwen3next, qwen35moe)");
  GgufMetadata good;
  WriteHParams(Qwen3Like(), good);
  GgufMetadata missing = good;
  missing.Erase("qwen3moe.block_count");
  EXPECT_EQ(ReadHParams(missing).status().message(), "missing key qwen3moe.block_count");
  GgufMetadata dense = good;
  dense.Set("qwen3moe.expert_count", GgufValue::Uint32(0));
  EXPECT_NE(ReadHParams(dense).status().message().find("dense model"), std::string::npos);
  GgufMetadata per_layer = good;
  per_layer.Set("qwen3moe.attention.head_count",
                GgufValue::Array(GgufType::kUint32, {GgufValue::Uint32(4)}));
  EXPECT_NE(ReadHParams(per_layer).status().message().find("per-layer"), std::string::npos);
  GgufMetadata too_many = good;
  too_many.Set("qwen3moe.block_count", GgufValue::Uint32(100000));
  EXPECT_EQ(ReadHParams(too_many).status().code(), StatusCode::kOutOfRange);
  GgufMetadata bad_gqa = good;
  bad_gqa.Set("qwen3moe.attention.head_count_kv", GgufValue::Uint32(3));
  EXPECT_FALSE(ReadHParams(bad_gqa).ok());
  GgufMetadata topk = good;
  topk.Set("qwen3moe.expert_used_count", GgufValue::Uint32(9));
  EXPECT_FALSE(ReadHParams(topk).ok());
  // Floats the forward pass would turn into NaN logits.
  for (const auto& [key, value] : std::vector<std::pair<std::string, float>>{
           {"qwen3moe.rope.freq_base", 0.0f},
           {"qwen3moe.rope.freq_base", -1.0f},
           {"qwen3moe.rope.freq_base", std::nanf("")},
           {"qwen3moe.attention.layer_norm_rms_epsilon", -1e-6f},
           {"qwen3moe.attention.layer_norm_rms_epsilon", INFINITY},
           {"qwen3moe.rope.scaling.factor", -2.0f}}) {
    GgufMetadata bad = good;
    bad.Set(key, GgufValue::Float32(value));
    Result<HParams> hp = ReadHParams(bad);
    ASSERT_FALSE(hp.ok()) << key << " = " << value;
    const std::string& m = hp.status().message();
    EXPECT_NE(m.find(key), std::string::npos) << m;
    EXPECT_NE(m.find("finite number"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace mt

namespace mt {
namespace {

// DeepSeek-V2-Lite's keys as llama.cpp's converter writes them (no q LoRA rank: attn_q).
GgufMetadata V2LiteKeys() {
  GgufMetadata md;
  auto u = [&](const char* k, uint32_t v) {
    md.Set(std::string("deepseek2.") + k, GgufValue::Uint32(v));
  };
  auto f = [&](const char* k, float v) {
    md.Set(std::string("deepseek2.") + k, GgufValue::Float32(v));
  };
  md.Set("general.architecture", GgufValue::String("deepseek2"));
  u("block_count", 27);
  u("context_length", 163840);
  u("embedding_length", 2048);
  u("feed_forward_length", 10944);
  u("attention.head_count", 16);
  u("attention.head_count_kv", 1);
  f("rope.freq_base", 10000);
  f("attention.layer_norm_rms_epsilon", 1e-6f);
  u("expert_used_count", 6);
  u("expert_count", 64);
  u("expert_group_count", 1);
  u("expert_group_used_count", 1);
  u("expert_gating_func", 1);
  u("leading_dense_block_count", 1);
  u("vocab_size", 102400);
  u("attention.kv_lora_rank", 512);
  u("attention.key_length", 576);
  u("attention.value_length", 512);
  u("attention.key_length_mla", 192);
  u("attention.value_length_mla", 128);
  u("expert_feed_forward_length", 1408);
  u("expert_shared_count", 2);
  f("expert_weights_scale", 1.0f);
  u("rope.dimension_count", 64);
  md.Set("deepseek2.rope.scaling.type", GgufValue::String("yarn"));
  f("rope.scaling.factor", 40);
  u("rope.scaling.original_context_length", 4096);
  f("rope.scaling.yarn_log_multiplier", 0.0707f);
  return md;
}

TEST(Deepseek2HParamsTest, V2LiteKeysGiveItsParts) {
  Result<HParams> hp = ReadHParams(V2LiteKeys());
  ASSERT_TRUE(hp.ok()) << hp.status().message();
  EXPECT_EQ(hp->n_lora_q, 0u);  // absent: attn_q
  EXPECT_EQ(hp->n_ff_shexp, 2u * 1408);
  EXPECT_NEAR(hp->rope_yarn_log_mul, 0.707f, 1e-6f);  // llama.cpp cancels the converter's 0.1
  const ModelParts parts = DescribeModel(hp.value());
  ASSERT_EQ(parts.layers.size(), 27u);
  EXPECT_FALSE(parts.layers[0].has_experts());
  EXPECT_EQ(parts.layers[0].ffn.n_ff, 10944u);
  EXPECT_TRUE(parts.layers[26].has_experts());
  const MlaParts& mla = parts.layers[5].attention.mla;
  EXPECT_EQ(mla.kv_lora_rank, 512u);
  EXPECT_EQ(mla.head_dim_nope, 128u);
  EXPECT_EQ(mla.head_dim_v, 128u);
  EXPECT_FALSE(mla.legacy_kv_b);
  EXPECT_EQ(parts.router.n_group, 1u);  // one group: no group limit
  EXPECT_FALSE(parts.router.normalize);
  // YaRN: mscale = mscale_all_dim (0.707, deepseek2's special case), so the rotation's own
  // magnitude is 1 and kq_scale carries (1 + 0.1 * 0.707 * ln 40)^2 / sqrt(192).
  const RopeParts& r = parts.rope;
  EXPECT_EQ(r.type, RopeType::kNorm);
  EXPECT_EQ(r.ext_factor, 1.0f);
  EXPECT_FLOAT_EQ(r.freq_scale, 1.0f / 40);
  EXPECT_NEAR(r.attn_factor * (1 + 0.1 * std::log(40.0)), 1.0, 1e-6);
  const double m = 1 + 0.1 * 0.707 * std::log(40.0);
  EXPECT_NEAR(parts.layers[5].attention.kq_scale, m * m / std::sqrt(192.0), 1e-6);
  // ggml_rope_yarn_corr_dims(64, 4096, 10000, 32, 1): floor(10.35..), ceil(22.7..)
  EXPECT_EQ(r.corr_low, 10.0f);
  EXPECT_EQ(r.corr_high, 23.0f);

  std::vector<TensorDesc> t = ArchTensors(parts, hp.value());
  auto shape = [&](TensorRole role, int layer, TensorSuffix s = TensorSuffix::kWeight) {
    for (const TensorDesc& d : t) {
      if (d.role == role && d.layer == layer && d.suffix == s) return d.shape;
    }
    return std::vector<uint64_t>{};
  };
  // llama.cpp's deepseek2 loader's shapes.
  EXPECT_EQ(shape(TensorRole::kAttnQ, 3), (std::vector<uint64_t>{2048, 16 * 192}));
  EXPECT_EQ(shape(TensorRole::kAttnKvAMqa, 3), (std::vector<uint64_t>{2048, 576}));
  EXPECT_EQ(shape(TensorRole::kAttnKvANorm, 3), (std::vector<uint64_t>{512}));
  EXPECT_EQ(shape(TensorRole::kAttnKB, 3), (std::vector<uint64_t>{128, 512, 16}));
  EXPECT_EQ(shape(TensorRole::kAttnVB, 3), (std::vector<uint64_t>{512, 128, 16}));
  EXPECT_EQ(shape(TensorRole::kAttnOutput, 3), (std::vector<uint64_t>{16 * 128, 2048}));
  EXPECT_EQ(shape(TensorRole::kFfnGate, 0), (std::vector<uint64_t>{2048, 10944}));
  EXPECT_EQ(shape(TensorRole::kFfnDown, 0), (std::vector<uint64_t>{10944, 2048}));
  EXPECT_TRUE(shape(TensorRole::kFfnGateExps, 0).empty());
  EXPECT_EQ(shape(TensorRole::kFfnGateExps, 1), (std::vector<uint64_t>{2048, 1408, 64}));
  EXPECT_EQ(shape(TensorRole::kFfnUpShexp, 1), (std::vector<uint64_t>{2048, 2816}));
  EXPECT_TRUE(shape(TensorRole::kAttnQA, 3).empty());
  EXPECT_TRUE(shape(TensorRole::kFfnExpProbsB, 3, TensorSuffix::kBias).empty());
}

TEST(Deepseek2HParamsTest, V3AndLegacyLayouts) {
  GgufMetadata md = V2LiteKeys();
  md.Set("deepseek2.attention.q_lora_rank", GgufValue::Uint32(1536));
  md.Set("deepseek2.expert_gating_func", GgufValue::Uint32(2));
  md.Set("deepseek2.expert_count", GgufValue::Uint32(256));
  md.Set("deepseek2.expert_group_count", GgufValue::Uint32(8));
  md.Set("deepseek2.expert_group_used_count", GgufValue::Uint32(4));
  md.Set("deepseek2.expert_weights_norm", GgufValue::Bool(true));
  md.Set("deepseek2.expert_weights_scale", GgufValue::Float32(2.5f));
  Result<HParams> hp = ReadHParams(md);
  ASSERT_TRUE(hp.ok()) << hp.status().message();
  ModelParts parts = DescribeModel(hp.value());
  EXPECT_EQ(parts.router.scoring, ExpertScoring::kSigmoid);
  EXPECT_TRUE(parts.router.selection_bias);
  EXPECT_EQ(parts.router.n_group, 8u);
  EXPECT_TRUE(parts.router.normalize);
  EXPECT_FLOAT_EQ(parts.router.scale, 2.5f);
  std::vector<TensorDesc> t = ArchTensors(parts, hp.value());
  auto has = [&](TensorRole role, int layer) {
    return std::any_of(t.begin(), t.end(),
                       [&](const TensorDesc& d) { return d.role == role && d.layer == layer; });
  };
  EXPECT_TRUE(has(TensorRole::kAttnQA, 1) && has(TensorRole::kAttnQANorm, 1) &&
              has(TensorRole::kAttnQB, 1));
  EXPECT_FALSE(has(TensorRole::kAttnQ, 1));
  EXPECT_TRUE(has(TensorRole::kFfnExpProbsB, 1));
  EXPECT_FALSE(has(TensorRole::kFfnExpProbsB, 0));  // the dense layer has no router

  // The legacy layout: no *_mla keys, key/value lengths are a head's.
  md.Erase("deepseek2.attention.key_length_mla");
  md.Erase("deepseek2.attention.value_length_mla");
  md.Set("deepseek2.attention.key_length", GgufValue::Uint32(192));
  md.Set("deepseek2.attention.value_length", GgufValue::Uint32(128));
  hp = ReadHParams(md);
  ASSERT_TRUE(hp.ok()) << hp.status().message();
  parts = DescribeModel(hp.value());
  EXPECT_TRUE(parts.layers[3].attention.mla.legacy_kv_b);
  EXPECT_EQ(parts.layers[3].attention.mla.head_dim_nope, 128u);
  t = ArchTensors(parts, hp.value());
  EXPECT_TRUE(has(TensorRole::kAttnKvB, 3));
  EXPECT_FALSE(has(TensorRole::kAttnKB, 3));
  for (const TensorDesc& d : t) {
    if (d.role == TensorRole::kAttnKvB)
      EXPECT_EQ(d.shape, (std::vector<uint64_t>{512, 16 * (128 + 128)}));
  }
}

// GLM-4.5-Air's keys as llama.cpp's converter writes them: 47 blocks, the last a NextN layer.
GgufMetadata Glm45AirKeys() {
  GgufMetadata md;
  auto u = [&](const char* k, uint32_t v) {
    md.Set(std::string("glm4moe.") + k, GgufValue::Uint32(v));
  };
  md.Set("general.architecture", GgufValue::String("glm4moe"));
  u("block_count", 47);
  u("context_length", 131072);
  u("embedding_length", 4096);
  u("feed_forward_length", 10944);
  u("attention.head_count", 96);
  u("attention.head_count_kv", 8);
  u("attention.key_length", 128);
  u("attention.value_length", 128);
  u("rope.dimension_count", 64);
  md.Set("glm4moe.rope.freq_base", GgufValue::Float32(1e6f));
  md.Set("glm4moe.attention.layer_norm_rms_epsilon", GgufValue::Float32(1e-5f));
  u("expert_count", 128);
  u("expert_used_count", 8);
  u("expert_shared_count", 1);
  u("expert_feed_forward_length", 1408);
  u("leading_dense_block_count", 1);
  md.Set("glm4moe.expert_weights_norm", GgufValue::Bool(true));
  md.Set("glm4moe.expert_weights_scale", GgufValue::Float32(1.0f));
  u("nextn_predict_layers", 1);
  return md;
}

TEST(Glm4MoeHParamsTest, AirKeysGiveItsParts) {
  Result<HParams> hp = ReadHParams(Glm45AirKeys());
  ASSERT_TRUE(hp.ok()) << hp.status().message();
  EXPECT_EQ(hp->n_layer, 46u);  // the NextN layer is not part of the trunk
  EXPECT_EQ(hp->n_ff_shexp, 1408u);
  EXPECT_EQ(hp->expert_gating, ExpertScoring::kSigmoid);  // absent: sigmoid, as llama.cpp
  const ModelParts parts = DescribeModel(hp.value());
  ASSERT_EQ(parts.layers.size(), 46u);
  EXPECT_FALSE(parts.layers[0].has_experts());
  EXPECT_TRUE(parts.layers[45].has_experts());
  EXPECT_TRUE(parts.router.selection_bias);
  EXPECT_TRUE(parts.router.normalize);
  EXPECT_EQ(parts.rope.type, RopeType::kNeox);
  EXPECT_EQ(parts.rope.n_rot, 64);  // half of each 128-wide head
  EXPECT_FLOAT_EQ(parts.layers[1].attention.kq_scale, 1.0f / std::sqrt(128.0f));

  std::vector<TensorDesc> t = ArchTensors(parts, hp.value());
  auto find = [&](TensorRole role, int layer, TensorSuffix s = TensorSuffix::kWeight) {
    for (const TensorDesc& d : t) {
      if (d.role == role && d.layer == layer && d.suffix == s) return &d;
    }
    return static_cast<const TensorDesc*>(nullptr);
  };
  // llama.cpp's glm4moe loader: biases, optional per-head q/k norms, post_attention_norm as
  // the FFN's norm, exp_probs_b, one shared expert; nothing of layer 46 (NextN).
  ASSERT_NE(find(TensorRole::kAttnQ, 1, TensorSuffix::kBias), nullptr);
  ASSERT_NE(find(TensorRole::kAttnQNorm, 1), nullptr);
  EXPECT_FALSE(find(TensorRole::kAttnQNorm, 1)->required);
  EXPECT_EQ(find(TensorRole::kAttnQNorm, 1)->shape, (std::vector<uint64_t>{128}));
  ASSERT_NE(find(TensorRole::kAttnPostNorm, 1), nullptr);
  EXPECT_EQ(find(TensorRole::kFfnNorm, 1), nullptr);
  EXPECT_EQ(TensorName(TensorRole::kAttnPostNorm, 1), "blk.1.post_attention_norm.weight");
  ASSERT_NE(find(TensorRole::kFfnExpProbsB, 1, TensorSuffix::kBias), nullptr);
  EXPECT_EQ(find(TensorRole::kFfnUpShexp, 1)->shape, (std::vector<uint64_t>{4096, 1408}));
  EXPECT_EQ(find(TensorRole::kFfnGate, 0)->shape, (std::vector<uint64_t>{4096, 10944}));
  EXPECT_EQ(find(TensorRole::kAttnNorm, 46), nullptr);
}

TEST(Glm4MoeHParamsTest, BadKeysAreOneLineErrors) {
  GgufMetadata md = Glm45AirKeys();
  md.Set("glm4moe.nextn_predict_layers", GgufValue::Uint32(47));
  Result<HParams> hp = ReadHParams(md);
  ASSERT_FALSE(hp.ok());
  EXPECT_NE(hp.status().message().find("nextn_predict_layers 47 leaves no layer"),
            std::string::npos)
      << hp.status().message();
  md = Glm45AirKeys();
  md.Set("glm4moe.rope.dimension_sections", GgufValue::Int32Array({8, 12, 12, 0}));
  hp = ReadHParams(md);
  ASSERT_FALSE(hp.ok());
  EXPECT_NE(hp.status().message().find("multimodal RoPE"), std::string::npos)
      << hp.status().message();
}

// gpt-oss-20b's keys as llama.cpp's converter writes them (config.json: head_dim 64, YaRN
// x32 over 4096, sliding_window 128; no sliding_window_pattern: llama.cpp's default 2).
GgufMetadata GptOss20bKeys() {
  GgufMetadata md;
  auto u = [&](const char* k, uint32_t v) {
    md.Set(std::string("gpt-oss.") + k, GgufValue::Uint32(v));
  };
  md.Set("general.architecture", GgufValue::String("gpt-oss"));
  u("block_count", 24);
  u("context_length", 131072);
  u("embedding_length", 2880);
  u("feed_forward_length", 2880);
  u("attention.head_count", 64);
  u("attention.head_count_kv", 8);
  u("attention.key_length", 64);
  u("attention.value_length", 64);
  md.Set("gpt-oss.rope.freq_base", GgufValue::Float32(150000.0f));
  md.Set("gpt-oss.attention.layer_norm_rms_epsilon", GgufValue::Float32(1e-5f));
  u("expert_count", 32);
  u("expert_used_count", 4);
  md.Set("gpt-oss.rope.scaling.type", GgufValue::String("yarn"));
  md.Set("gpt-oss.rope.scaling.factor", GgufValue::Float32(32.0f));
  u("rope.scaling.original_context_length", 4096);
  u("attention.sliding_window", 128);
  u("expert_feed_forward_length", 2880);
  return md;
}

TEST(GptOssHParamsTest, TwentyBKeysGiveItsParts) {
  Result<HParams> hp = ReadHParams(GptOss20bKeys());
  ASSERT_TRUE(hp.ok()) << hp.status().message();
  const ModelParts parts = DescribeModel(hp.value());
  ASSERT_EQ(parts.layers.size(), 24u);
  EXPECT_EQ(parts.layers[0].attention.sliding_window, 128u);  // even layers slide
  EXPECT_EQ(parts.layers[1].attention.sliding_window, 0u);
  EXPECT_EQ(parts.layers[22].attention.sliding_window, 128u);
  EXPECT_TRUE(parts.layers[5].attention.sinks);
  EXPECT_FLOAT_EQ(parts.layers[5].attention.kq_scale, 0.125f);  // 1/sqrt(64), not of 2880/64
  EXPECT_EQ(parts.router.scoring, ExpertScoring::kSoftmaxOfTopK);
  EXPECT_FALSE(parts.router.normalize);
  EXPECT_EQ(parts.layers[3].ffn.activation, FfnActivation::kSwigluOai);
  EXPECT_EQ(parts.rope.type, RopeType::kNeox);
  EXPECT_EQ(parts.rope.n_rot, 64);
  EXPECT_FLOAT_EQ(1.0f / parts.rope.freq_scale, 32.0f);

  // llama.cpp's openai-moe loader: every tensor and shape.
  std::vector<TensorDesc> t = ArchTensors(parts, hp.value());
  auto find = [&](TensorRole role, int layer, TensorSuffix s = TensorSuffix::kWeight) {
    for (const TensorDesc& d : t) {
      if (d.role == role && d.layer == layer && d.suffix == s) return &d;
    }
    return static_cast<const TensorDesc*>(nullptr);
  };
  using R = TensorRole;
  constexpr TensorSuffix kB = TensorSuffix::kBias;
  using Shape = std::vector<uint64_t>;
  EXPECT_EQ(find(R::kAttnQ, 3)->shape, (Shape{2880, 4096}));
  EXPECT_EQ(find(R::kAttnK, 3)->shape, (Shape{2880, 512}));
  EXPECT_EQ(find(R::kAttnOutput, 3)->shape, (Shape{4096, 2880}));
  for (R role : {R::kAttnQ, R::kAttnK, R::kAttnV, R::kAttnOutput}) {
    ASSERT_NE(find(role, 3, kB), nullptr);
    EXPECT_TRUE(find(role, 3, kB)->required);
  }
  EXPECT_EQ(find(R::kAttnSinks, 3)->shape, (Shape{64}));
  EXPECT_EQ(find(R::kFfnGateInp, 3, kB)->shape, (Shape{32}));
  EXPECT_EQ(find(R::kFfnGateExps, 3, kB)->shape, (Shape{2880, 32}));
  EXPECT_EQ(find(R::kFfnDownExps, 3, kB)->shape, (Shape{2880, 32}));
  EXPECT_EQ(find(R::kFfnDownExps, 3)->shape, (Shape{2880, 2880, 32}));
  ASSERT_NE(find(R::kAttnPostNorm, 3), nullptr);
  EXPECT_EQ(find(R::kFfnNorm, 3), nullptr);
  EXPECT_TRUE(find(R::kOutput, -1)->required);
  // The experts' biases are dense: the memory plan must not count them as routed experts.
  EXPECT_FALSE(IsRoutedExpertTensorName("blk.3.ffn_down_exps.bias"));
  EXPECT_TRUE(IsRoutedExpertTensorName("blk.3.ffn_down_exps.weight"));
}

TEST(GptOssHParamsTest, PatternAndWindowKeys) {
  GgufMetadata md = GptOss20bKeys();
  md.Set("gpt-oss.attention.sliding_window_pattern", GgufValue::Uint32(3));
  Result<HParams> hp = ReadHParams(md);
  ASSERT_TRUE(hp.ok()) << hp.status().message();
  const ModelParts parts = DescribeModel(hp.value());
  EXPECT_EQ(parts.layers[0].attention.sliding_window, 128u);  // il % 3 < 2 slides
  EXPECT_EQ(parts.layers[1].attention.sliding_window, 128u);
  EXPECT_EQ(parts.layers[2].attention.sliding_window, 0u);
  md = GptOss20bKeys();
  md.Erase("gpt-oss.expert_feed_forward_length");
  EXPECT_EQ(ReadHParams(md).status().message(), "missing key gpt-oss.expert_feed_forward_length");
}

// Qwen3-Next-80B-A3B's keys as llama.cpp's converter writes them (config.json: 48 layers + one
// MTP layer, head_dim 256, partial_rotary_factor 0.25, linear_* heads 16 key / 32 value of
// 128, conv 4, full_attention_interval 4).
GgufMetadata Qwen3Next80bKeys() {
  GgufMetadata md;
  auto u = [&](const char* k, uint32_t v) {
    md.Set(std::string("qwen3next.") + k, GgufValue::Uint32(v));
  };
  md.Set("general.architecture", GgufValue::String("qwen3next"));
  u("block_count", 49);
  u("context_length", 262144);
  u("embedding_length", 2048);
  u("feed_forward_length", 5120);
  u("attention.head_count", 16);
  u("attention.head_count_kv", 2);
  u("attention.key_length", 256);
  u("attention.value_length", 256);
  md.Set("qwen3next.rope.freq_base", GgufValue::Float32(1e7f));
  md.Set("qwen3next.attention.layer_norm_rms_epsilon", GgufValue::Float32(1e-6f));
  u("expert_count", 512);
  u("expert_used_count", 10);
  u("expert_feed_forward_length", 512);
  u("expert_shared_feed_forward_length", 512);
  u("ssm.conv_kernel", 4);
  u("ssm.state_size", 128);
  u("ssm.group_count", 16);
  u("ssm.time_step_rank", 32);
  u("ssm.inner_size", 4096);
  u("full_attention_interval", 4);
  u("rope.dimension_count", 64);
  u("nextn_predict_layers", 1);
  return md;
}

TEST(Qwen3NextHParamsTest, EightyBKeysGiveItsParts) {
  Result<HParams> hp = ReadHParams(Qwen3Next80bKeys());
  ASSERT_TRUE(hp.ok()) << hp.status().message();
  EXPECT_EQ(hp->n_layer, 48u);
  EXPECT_EQ(hp->n_layer_nextn, 1u);
  const ModelParts parts = DescribeModel(hp.value());
  ASSERT_EQ(parts.layers.size(), 48u);
  for (int il : {0, 1, 2, 44, 46}) {
    EXPECT_EQ(parts.layers[il].attention.kind, AttentionKind::kDeltaNet) << il;
  }
  for (int il : {3, 7, 47}) {
    EXPECT_EQ(parts.layers[il].attention.kind, AttentionKind::kGqa) << il;
    EXPECT_TRUE(parts.layers[il].attention.gqa.output_gate);
    EXPECT_EQ(parts.layers[il].attention.gqa.qk_norm, QkNorm::kPerHead);
    EXPECT_FLOAT_EQ(parts.layers[il].attention.kq_scale, 1.0f / 16);  // 1/sqrt(256)
  }
  const DeltaNetParts& d = parts.layers[0].attention.delta_net;
  EXPECT_EQ(d.key_heads, KeyHeadOrder::kGrouped);
  EXPECT_FALSE(d.separate_beta_alpha);
  EXPECT_EQ(d.conv_channels(), 8192u);
  EXPECT_TRUE(parts.router.normalize);
  EXPECT_EQ(parts.layers[5].ffn.shared_gate, SharedExpertGate::kSigmoid);
  EXPECT_TRUE(parts.layers[5].ffn.norm_named_post_attention);
  EXPECT_EQ(parts.rope.n_rot, 64);
  EXPECT_EQ(parts.rope.type, RopeType::kNeox);

  // llama.cpp's qwen3next loader: every tensor and shape.
  std::vector<TensorDesc> t = ArchTensors(parts, hp.value());
  auto find = [&](TensorRole role, int layer, TensorSuffix s = TensorSuffix::kWeight) {
    for (const TensorDesc& desc : t) {
      if (desc.role == role && desc.layer == layer && desc.suffix == s) return &desc;
    }
    return static_cast<const TensorDesc*>(nullptr);
  };
  using R = TensorRole;
  using Shape = std::vector<uint64_t>;
  EXPECT_EQ(find(R::kAttnQkv, 0)->shape, (Shape{2048, 8192}));
  EXPECT_EQ(find(R::kAttnGate, 0)->shape, (Shape{2048, 4096}));
  EXPECT_EQ(find(R::kSsmConv1d, 0)->shape, (Shape{4, 8192}));
  EXPECT_EQ(find(R::kSsmDt, 0, TensorSuffix::kBias)->shape, (Shape{32}));
  EXPECT_EQ(find(R::kSsmA, 0, TensorSuffix::kNone)->shape, (Shape{32}));
  EXPECT_EQ(find(R::kSsmBetaAlpha, 0)->shape, (Shape{2048, 64}));
  EXPECT_EQ(find(R::kSsmNorm, 0)->shape, (Shape{128}));
  EXPECT_EQ(find(R::kSsmOut, 0)->shape, (Shape{4096, 2048}));
  EXPECT_EQ(find(R::kAttnQ, 0), nullptr);
  EXPECT_EQ(find(R::kAttnQ, 3)->shape, (Shape{2048, 8192}));  // [q | gate] per head
  EXPECT_EQ(find(R::kAttnK, 3)->shape, (Shape{2048, 512}));
  EXPECT_EQ(find(R::kAttnOutput, 3)->shape, (Shape{4096, 2048}));
  EXPECT_EQ(find(R::kAttnQNorm, 3)->shape, (Shape{256}));
  EXPECT_EQ(find(R::kFfnGateInpShexp, 5)->shape, (Shape{2048}));
  EXPECT_EQ(find(R::kFfnDownExps, 5)->shape, (Shape{512, 2048, 512}));
  EXPECT_EQ(TensorName(R::kSsmA, 7, TensorSuffix::kNone), "blk.7.ssm_a");
  EXPECT_EQ(TensorName(R::kSsmDt, 7, TensorSuffix::kBias), "blk.7.ssm_dt.bias");
  EXPECT_EQ(TensorName(R::kSsmBetaAlpha, 7), "blk.7.ssm_ba.weight");

  // inspect shows the repeating block once.
  const std::vector<std::string> lines = DescribeParts(parts);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0], "layers 0-47: a block of 4 layers, 12 times:");
  EXPECT_TRUE(lines[1].starts_with("  layers 0-2: gated DeltaNet (16 key heads, 32 value heads"))
      << lines[1];
  EXPECT_TRUE(lines[2].starts_with("  layer 3: GQA (q/k norm per head), output gate")) << lines[2];

  // The same written back and read again.
  GgufMetadata again;
  WriteHParams(hp.value(), again);
  Result<HParams> back = ReadHParams(again);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->n_layer, 48u);
  EXPECT_EQ(back->ssm_d_inner, 4096u);
}

TEST(Qwen3NextHParamsTest, Qwen35MoeReadsItsSectionsAndTilesItsHeads) {
  GgufMetadata md = Qwen3Next80bKeys();
  GgufMetadata q35;
  for (const auto& [key, value] : md.entries()) {
    std::string k = key;
    if (k.starts_with("qwen3next.")) k = "qwen35moe." + k.substr(10);
    q35.Set(k, k == "general.architecture" ? GgufValue::String("qwen35moe") : value);
  }
  q35.Set("qwen35moe.rope.dimension_sections", GgufValue::Int32Array({11, 11, 10, 0}));
  Result<HParams> hp = ReadHParams(q35);
  ASSERT_TRUE(hp.ok()) << hp.status().message();
  const ModelParts parts = DescribeModel(hp.value());
  EXPECT_EQ(parts.layers[0].attention.delta_net.key_heads, KeyHeadOrder::kTiled);
  EXPECT_TRUE(parts.layers[0].attention.delta_net.separate_beta_alpha);
  // 32 rotated pairs: sectors 30 (time) and 31 (height) are still in their sections.
  q35.Set("qwen35moe.rope.dimension_sections", GgufValue::Int32Array({10, 11, 11, 0}));
  EXPECT_NE(ReadHParams(q35).status().message().find("pair 30 takes the 4th section"),
            std::string::npos)
      << ReadHParams(q35).status().message();
}

// A glm4moe file whose last block is a NextN layer: its tensors are in no part of the plan.
TEST(Glm4MoeHParamsTest, NextnLayersAreNotInTheMemoryPlan) {
  testing_gguf::TempDir dir;
  const std::string path = dir.File("nextn.gguf");
  GgufWriter w(path);
  w.metadata() = Glm45AirKeys();
  w.metadata().Set("glm4moe.block_count", GgufValue::Uint32(3));  // 2 trunk layers + NextN
  w.metadata().Set("glm4moe.embedding_length", GgufValue::Uint32(32));
  const std::vector<std::pair<std::string, std::vector<uint64_t>>> tensors = {
      {"blk.0.attn_norm.weight", {32}},
      {"blk.1.ffn_gate_exps.weight", {32, 8, 4}},
      {"blk.2.attn_norm.weight", {32}},  // the NextN layer: a whole block ...
      {"blk.2.ffn_gate_exps.weight", {32, 8, 4}},
      {"blk.2.nextn.eh_proj.weight", {64, 32}},  // ... and its own projections
  };
  uint64_t bytes = 0;
  for (const auto& [name, shape] : tensors) {
    ASSERT_TRUE(w.AddTensor(name, GgmlType::kF32, shape).ok());
  }
  ASSERT_TRUE(w.Begin().ok());
  for (const auto& [name, shape] : tensors) {
    uint64_t n = 4;
    for (uint64_t d : shape) n *= d;
    ASSERT_TRUE(w.Write(std::vector<uint8_t>(n, 0)).ok());
    bytes += n;
  }
  ASSERT_TRUE(w.Finish().ok());
  Result<GgufModel> model = GgufModel::Open(path);
  ASSERT_TRUE(model.ok()) << model.status().message();
  Result<MemoryPlan> plan = ComputeMemoryPlan(model.value());
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->layers.size(), 2u);
  EXPECT_EQ(plan->dense_bytes, 32u * 4);
  EXPECT_EQ(plan->expert_bytes, 32u * 8 * 4 * 4);
  EXPECT_EQ(plan->total_bytes, plan->dense_bytes + plan->expert_bytes);
  EXPECT_EQ(plan->unused_bytes, 32u * 4 + 32 * 8 * 4 * 4 + 64 * 32 * 4);
  EXPECT_EQ(plan->total_bytes + plan->unused_bytes, bytes);
}

}  // namespace
}  // namespace mt
