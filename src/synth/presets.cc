#include "synth/presets.h"

#include <array>
#include <string_view>

namespace mt {
namespace {

HParams Make(std::string arch, uint32_t n_layer, uint32_t n_embd, uint32_t n_head,
             uint32_t n_head_kv, uint32_t head_dim, uint32_t n_expert, uint32_t n_expert_used,
             uint32_t n_ff_exp, uint32_t n_ff, uint32_t n_vocab, uint32_t n_ctx, float rope_base,
             float rms_eps, uint32_t n_ff_shexp = 0) {
  HParams hp;
  hp.arch = std::move(arch);
  hp.n_layer = n_layer;
  hp.n_embd = n_embd;
  hp.n_head = n_head;
  hp.n_head_kv = n_head_kv;
  hp.head_dim_k = hp.head_dim_v = hp.n_rot = head_dim;
  hp.n_expert = n_expert;
  hp.n_expert_used = n_expert_used;
  hp.n_ff_exp = n_ff_exp;
  hp.n_ff = n_ff;
  hp.n_ff_shexp = n_ff_shexp;
  hp.n_vocab = n_vocab;
  hp.n_ctx_train = n_ctx;
  hp.rope_freq_base = rope_base;
  hp.rms_eps = rms_eps;
  return hp;
}

// A deepseek2 model with MLA in the current layout (legacy: synth --legacy-mla). `rope` dims
// of each head rotate; YaRN as in the real configs (factor, original context, mscale_all_dim).
struct DeepseekShape {
  uint32_t n_layer, n_embd, n_head, q_lora, kv_lora, nope, rope, v_head;
  uint32_t n_ff, n_ff_exp, n_expert, n_expert_used, n_shared, n_dense_lead;
  uint32_t n_group, n_group_used;
  ExpertScoring gating;
  bool norm;
  float scale;
  uint32_t n_ctx, n_ctx_orig;
  float rope_base, yarn_factor, mscale_all_dim;
};

HParams Deepseek(const DeepseekShape& d) {
  HParams hp;
  hp.arch = "deepseek2";
  hp.n_layer = d.n_layer;
  hp.n_embd = d.n_embd;
  hp.n_head = d.n_head;
  hp.n_head_kv = 1;  // the converter writes MLA as MQA over the latent
  hp.n_lora_q = d.q_lora;
  hp.n_lora_kv = d.kv_lora;
  hp.n_rot = d.rope;
  hp.head_dim_k = d.kv_lora + d.rope;
  hp.head_dim_v = d.kv_lora;
  hp.head_dim_k_mla = d.nope + d.rope;
  hp.head_dim_v_mla = d.v_head;
  hp.n_ff = d.n_ff;
  hp.n_ff_exp = d.n_ff_exp;
  hp.n_expert = d.n_expert;
  hp.n_expert_used = d.n_expert_used;
  hp.n_expert_shared = d.n_shared;
  hp.n_ff_shexp = d.n_ff_exp * d.n_shared;
  hp.n_layer_dense_lead = d.n_dense_lead;
  hp.n_expert_groups = d.n_group;
  hp.n_group_used = d.n_group_used;
  hp.expert_gating = d.gating;
  hp.expert_weights_norm = d.norm;
  hp.expert_weights_scale = d.scale;
  hp.n_vocab = 129280;  // DeepSeek-V3's tokenizer (padded as the V3 checkpoints are)
  hp.n_ctx_train = d.n_ctx;
  hp.rope_freq_base = d.rope_base;
  hp.rope_scaling = RopeScalingType::kYarn;
  hp.rope_freq_scale = 1.0f / d.yarn_factor;
  hp.n_ctx_orig_yarn = d.n_ctx_orig;
  hp.rope_yarn_log_mul = d.mscale_all_dim;
  hp.rms_eps = 1e-6f;
  return hp;
}

// A glm4moe model: GQA with biases, NEOX RoPE over half of each head, sigmoid router with a
// selection bias, renormalised and scaled, one shared expert, leading dense layers.
struct GlmShape {
  uint32_t n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_ff_exp, n_expert, n_expert_used,
      n_dense_lead, n_vocab;
  float scale;
  uint32_t n_nextn;  // NextN/MTP blocks after the trunk (GLM-4.5's: 1)
};

HParams Glm4Moe(const GlmShape& g) {
  HParams hp =
      Make("glm4moe", g.n_layer, g.n_embd, g.n_head, g.n_head_kv, g.head_dim, g.n_expert,
           g.n_expert_used, g.n_ff_exp, g.n_ff, g.n_vocab, 131072, 1e6f, 1e-5f, g.n_ff_exp);
  hp.n_rot = g.head_dim / 2;  // partial_rotary_factor 0.5
  hp.n_expert_shared = 1;
  hp.n_layer_dense_lead = g.n_dense_lead;
  hp.expert_gating = ExpertScoring::kSigmoid;
  hp.expert_weights_norm = true;
  hp.expert_weights_scale = g.scale;
  hp.n_layer_nextn = g.n_nextn;
  return hp;
}

// A gpt-oss model: 64-dim heads with q/k/v/o biases and sinks, a 128-position window on the
// even layers, NEOX RoPE with YaRN (x32 over 4096), experts of n_embd width behind a biased
// top-k-softmax router; o200k_harmony's 201088 tokens.
HParams GptOss(uint32_t n_layer, uint32_t n_embd, uint32_t n_head, uint32_t n_head_kv,
               uint32_t n_expert, uint32_t n_expert_used, uint32_t n_ff_exp) {
  HParams hp = Make("gpt-oss", n_layer, n_embd, n_head, n_head_kv, 64, n_expert, n_expert_used,
                    n_ff_exp, n_ff_exp, 201088, 131072, 150000.0f, 1e-5f);
  hp.expert_gating = ExpertScoring::kSoftmaxOfTopK;
  hp.n_swa = 128;
  hp.swa_pattern = 2;
  hp.rope_scaling = RopeScalingType::kYarn;
  hp.rope_freq_scale = 1.0f / 32;
  hp.n_ctx_orig_yarn = 4096;
  return hp;
}

// A qwen3next / qwen35moe model: DeltaNet layers with full attention every 4th (GQA with an
// output gate over 256-wide heads, rope over a quarter of each), experts plus a gated shared
// expert of the same width, one NextN block after the trunk (as the converter writes it).
struct HybridShape {
  const char* arch;
  uint32_t n_layer, n_embd, n_head, n_head_kv, head_dim, n_expert, n_expert_used, n_ff_exp;
  uint32_t n_k_heads, n_v_heads, state;
};

HParams HybridDeltaNet(const HybridShape& h) {
  HParams hp = Make(h.arch, h.n_layer, h.n_embd, h.n_head, h.n_head_kv, h.head_dim, h.n_expert,
                    h.n_expert_used, h.n_ff_exp, 5120, 151936, 262144, 1e7f, 1e-6f, h.n_ff_exp);
  hp.n_rot = h.head_dim / 4;  // partial_rotary_factor 0.25
  hp.expert_weights_norm = true;
  hp.ssm_d_conv = 4;
  hp.ssm_n_group = h.n_k_heads;
  hp.ssm_dt_rank = h.n_v_heads;
  hp.ssm_d_state = h.state;
  hp.ssm_d_inner = h.n_v_heads * h.state;
  hp.full_attn_interval = 4;
  hp.n_layer_nextn = 1;
  if (std::string_view(h.arch) == "qwen35moe") {
    // Qwen3.5's mrope_section [11, 11, 10] of 32 rotated pairs, scaled to the model's pairs.
    const uint32_t pairs = hp.n_rot / 2;
    const uint32_t t = (pairs * 11 + 31) / 32, hgt = (pairs * 11 + 31) / 32;
    hp.rope_sections = {t, hgt, pairs - t - hgt, 0};
  }
  return hp;
}

constexpr ExpertScoring kSoftmax = ExpertScoring::kSoftmax;
constexpr ExpertScoring kSigmoid = ExpertScoring::kSigmoid;

// Shapes of the real models come from their Hugging Face config.json files.
const std::array<SynthPreset, 20> kPresets = {{
    {"tiny", "qwen3moe, 4 layers, n_embd 256, 8 experts top-2 (tests)",
     Make("qwen3moe", 4, 256, 4, 2, 64, 8, 2, 512, 1024, 151936, 40960, 1e6f, 1e-6f),
     PresetTokenizer::kQwen3, "qwen2"},
    {"mixtral-tiny", "llama with experts (Mixtral layout), 4 layers, n_embd 256, 8 experts top-2",
     Make("llama", 4, 256, 4, 2, 64, 8, 2, 512, 512, 32000, 32768, 1e6f, 1e-5f),
     PresetTokenizer::kBuiltinSpm, ""},
    {"olmoe-tiny", "olmoe, 4 layers, n_embd 256, 16 experts top-4 (tests)",
     Make("olmoe", 4, 256, 4, 4, 64, 16, 4, 256, 256, 50304, 4096, 10000.0f, 1e-5f),
     PresetTokenizer::kBuiltinBpe, "olmo"},
    {"qwen2moe-tiny", "qwen2moe with a shared expert, 4 layers, n_embd 256, 8 experts top-2",
     Make("qwen2moe", 4, 256, 4, 2, 64, 8, 2, 256, 1024, 151936, 32768, 1e6f, 1e-6f, 512),
     PresetTokenizer::kQwen3, "qwen2"},
    {"olmoe-1b-7b", "OLMoE-1B-7B shape: 16 layers, n_embd 2048, 64 experts top-8, n_ff_exp 1024",
     Make("olmoe", 16, 2048, 16, 16, 128, 64, 8, 1024, 1024, 50304, 4096, 10000.0f, 1e-5f),
     PresetTokenizer::kBuiltinBpe, "olmo"},
    {"qwen3-30b-a3b",
     "Qwen3-30B-A3B shape: 48 layers, n_embd 2048, 128 experts top-8, n_ff_exp 768",
     Make("qwen3moe", 48, 2048, 32, 4, 128, 128, 8, 768, 6144, 151936, 40960, 1e6f, 1e-6f),
     PresetTokenizer::kQwen3, "qwen2"},
    {"qwen3-235b-a22b",
     "Qwen3-235B-A22B shape: 94 layers, n_embd 4096, 128 experts top-8, n_ff_exp 1536",
     Make("qwen3moe", 94, 4096, 64, 4, 128, 128, 8, 1536, 12288, 151936, 40960, 1e6f, 1e-6f),
     PresetTokenizer::kQwen3, "qwen2"},
    // V2-Lite's layout: no q LoRA, softmax router, 2 shared experts, one dense layer; 352-wide
    // experts (not a multiple of 256: llama.cpp's quant fallbacks apply, as to V2-Lite's 1408).
    {"deepseek2-tiny",
     "deepseek2 in DeepSeek-V2-Lite's layout: 4 layers (1 dense), n_embd 256, MLA (kv rank 128), "
     "16 experts top-4 + 2 shared, n_ff_exp 352 (tests)",
     Deepseek({4, 256, 4, 0, 128,      64,    32,   64,     1024, 352,   16, 4,
               2, 1,   1, 1, kSoftmax, false, 1.0f, 163840, 4096, 10000, 40, 0.707f}),
     PresetTokenizer::kDeepseekV3, "deepseek-v3"},
    // V3's layout: q LoRA, sigmoid router with exp_probs_b, 4 groups of which 2 are used,
    // renormalised and scaled by 2.5, one shared expert, two dense layers.
    {"deepseek3-tiny",
     "deepseek2 in DeepSeek-V3's layout: 6 layers (2 dense), n_embd 256, MLA (q rank 128, kv rank "
     "128), 16 experts in 4 groups (2 used) top-4 + 1 shared, sigmoid router (tests)",
     Deepseek({6, 256, 4, 128, 128,      64,   32,   64,     768,  256,   16, 4,
               1, 2,   4, 2,   kSigmoid, true, 2.5f, 163840, 4096, 10000, 40, 1.0f}),
     PresetTokenizer::kDeepseekV3, "deepseek-v3"},
    {"deepseek-v2-lite",
     "DeepSeek-V2-Lite shape: 27 layers (1 dense), n_embd 2048, 16 heads, MLA kv rank 512, 64 "
     "experts top-6 + 2 shared, n_ff_exp 1408 (DeepSeek-V3's tokenizer)",
     Deepseek({27, 2048, 16, 0, 512,      128,   64,   128,    10944, 1408,  64, 6,
               2,  1,    1,  1, kSoftmax, false, 1.0f, 163840, 4096,  10000, 40, 0.707f}),
     PresetTokenizer::kDeepseekV3, "deepseek-v3"},
    {"deepseek-v3",
     "DeepSeek-V3/R1 shape: 61 layers (3 dense), n_embd 7168, 128 heads, MLA, 256 experts in 8 "
     "groups (4 used) top-8 + 1 shared, n_ff_exp 2048 (--layers N for a slice)",
     Deepseek({61, 7168, 128, 1536, 512,      128,  64,   128,    18432, 2048,  256, 8,
               1,  3,    8,   4,    kSigmoid, true, 2.5f, 163840, 4096,  10000, 40,  1.0f}),
     PresetTokenizer::kDeepseekV3, "deepseek-v3"},
    {"kimi-k2",
     "Kimi-K2 shape: 61 layers (1 dense), n_embd 7168, 64 heads, MLA, 384 experts top-8 + 1 "
     "shared, n_ff_exp 2048 (DeepSeek-V3's tokenizer; --layers N for a slice)",
     Deepseek({61, 7168, 64, 1536, 512,      128,  64,     128,    18432, 2048,  384, 8,
               1,  1,    1,  1,    kSigmoid, true, 2.827f, 131072, 4096,  50000, 32,  1.0f}),
     PresetTokenizer::kDeepseekV3, "deepseek-v3"},
    // GLM-4.5's layout at test size (with its per-head q/k norms, which Air lacks); Qwen3's
    // tokenizer stands in for GLM's (no package ships it).
    {"glm4moe-tiny",
     "glm4moe in GLM-4.5's layout: 4 layers (1 dense) + a NextN block, n_embd 256, GQA with "
     "biases and q/k norms, rope over half of each head, 16 experts top-4 + 1 shared, sigmoid "
     "router (tests)",
     Glm4Moe({4, 256, 4, 2, 64, 768, 256, 16, 4, 1, 151936, 2.5f, 1}), PresetTokenizer::kQwen3,
     "qwen2"},
    {"glm-4.5-air",
     "GLM-4.5-Air shape: 46 layers (1 dense) + a NextN block, n_embd 4096, 96 heads (8 kv), 128 "
     "experts top-8 "
     "+ 1 shared, n_ff_exp 1408 (Qwen3's tokenizer; --layers N for a slice)",
     Glm4Moe({46, 4096, 96, 8, 128, 10944, 1408, 128, 8, 1, 151936, 1.0f, 1}),
     PresetTokenizer::kQwen3,
     "qwen2",
     {TensorRole::kAttnQNorm, TensorRole::kAttnKNorm}},
    {"gpt-oss-tiny",
     "gpt-oss, 4 layers (window 128 on the even ones), n_embd 256, 8 heads of 64 (2 kv) with "
     "sinks, 16 experts top-4, n_ff_exp 256 (tests)",
     GptOss(4, 256, 8, 2, 16, 4, 256), PresetTokenizer::kGptOss, "gpt-4o"},
    {"gpt-oss-20b",
     "gpt-oss-20b shape: 24 layers, n_embd 2880, 64 heads of 64 (8 kv), 32 experts top-4, "
     "n_ff_exp 2880",
     GptOss(24, 2880, 64, 8, 32, 4, 2880), PresetTokenizer::kGptOss, "gpt-4o"},
    {"gpt-oss-120b",
     "gpt-oss-120b shape: 36 layers, n_embd 2880, 64 heads of 64 (8 kv), 128 experts top-4, "
     "n_ff_exp 2880 (--layers N for a slice)",
     GptOss(36, 2880, 64, 8, 128, 4, 2880), PresetTokenizer::kGptOss, "gpt-4o"},
    {"qwen3next-tiny",
     "qwen3next, 4 layers (3 gated DeltaNet, then full attention with an output gate) + a NextN "
     "block, n_embd 256, 2 key and 4 value heads of 64, 16 experts top-4 + a gated shared "
     "expert (tests)",
     HybridDeltaNet({"qwen3next", 4, 256, 4, 2, 64, 16, 4, 128, 2, 4, 64}), PresetTokenizer::kQwen3,
     "qwen2"},
    {"qwen35moe-tiny",
     "qwen35moe (Qwen3.5 MoE), 4 layers (3 gated DeltaNet, then full attention) + a NextN block, "
     "n_embd 256, 2 key and 4 value heads of 64 (tiled), 16 experts top-4 + a gated shared "
     "expert (tests; Qwen3's tokenizer)",
     HybridDeltaNet({"qwen35moe", 4, 256, 4, 2, 64, 16, 4, 128, 2, 4, 64}), PresetTokenizer::kQwen3,
     "qwen2"},
    {"qwen3-next-80b-a3b",
     "Qwen3-Next-80B-A3B shape: 48 layers (every 4th full attention) + a NextN block, n_embd "
     "2048, 16 key and 32 value heads of 128, 512 experts top-10 + a shared expert, n_ff_exp 512 "
     "(--layers N for a slice)",
     HybridDeltaNet({"qwen3next", 48, 2048, 16, 2, 256, 512, 10, 512, 16, 32, 128}),
     PresetTokenizer::kQwen3, "qwen2"},
}};

}  // namespace

std::span<const SynthPreset> SynthPresets() { return kPresets; }

const SynthPreset* FindSynthPreset(std::string_view name) {
  for (const SynthPreset& p : kPresets) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

std::string SynthPresetNames() {
  std::string out;
  for (const SynthPreset& p : kPresets) {
    if (!out.empty()) out += ", ";
    out += p.name;
  }
  return out;
}

}  // namespace mt
