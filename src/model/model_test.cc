// Tests of the architecture table, tensor names and hyperparameter keys.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "gguf/gguf.h"
#include "model/arch.h"
#include "model/hparams.h"
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

TEST(ArchTest, TableHasTheFourFamilies) {
  EXPECT_EQ(SupportedArchNames(), "qwen3moe, olmoe, llama, qwen2moe");
  ASSERT_NE(FindArch("olmoe"), nullptr);
  EXPECT_EQ(FindArch("olmoe")->qk_norm, QkNorm::kWholeProjection);
  EXPECT_EQ(FindArch("llama")->rope_type, RopeType::kNorm);
  EXPECT_EQ(FindArch("qwen3moe")->rope_type, RopeType::kNeox);
  EXPECT_TRUE(FindArch("qwen3moe")->norm_topk_prob);
  EXPECT_FALSE(FindArch("olmoe")->norm_topk_prob);
  EXPECT_EQ(FindArch("qwen2moe")->shared_expert, SharedExpert::kSigmoidGated);
  EXPECT_EQ(FindArch("gpt2"), nullptr);
}

TEST(ArchTest, Qwen3MoeTensorsHaveLlamaCppShapes) {
  HParams hp = Qwen3Like();
  std::vector<TensorDesc> t = ArchTensors(*FindArch("qwen3moe"), hp);
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
  for (const TensorDesc& d : ArchTensors(*FindArch("olmoe"), hp)) {
    if (d.role == TensorRole::kAttnQNorm) EXPECT_EQ(d.shape, std::vector<uint64_t>{256});
    if (d.role == TensorRole::kAttnKNorm) EXPECT_EQ(d.shape, std::vector<uint64_t>{128});
  }
  hp.arch = "qwen2moe";
  hp.n_ff_shexp = 768;
  int shexp = 0, bias = 0;
  for (const TensorDesc& d : ArchTensors(*FindArch("qwen2moe"), hp)) {
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
  EXPECT_EQ(hp->n_head_kv, 8u);          // defaults to n_head
  EXPECT_EQ(hp->head_dim_k, 64u);        // n_embd / n_head
  EXPECT_EQ(hp->n_ff_exp, 800u);         // feed_forward_length / expert_used_count
  EXPECT_FLOAT_EQ(hp->rope_freq_base, 10000.0f);
  EXPECT_EQ(hp->n_vocab, 3u);
}

TEST(HParamsTest, ErrorsNameTheKey) {
  GgufMetadata md;
  EXPECT_EQ(ReadHParams(md).status().message(), "missing key general.architecture");
  md.Set("general.architecture", GgufValue::String("gpt2"));
  EXPECT_EQ(ReadHParams(md).status().message(),
            "unsupported architecture 'gpt2' (supported: qwen3moe, olmoe, llama, qwen2moe)");
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
