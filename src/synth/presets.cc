#include "synth/presets.h"

#include <array>

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

// Shapes of the real models come from their Hugging Face config.json files.
const std::array<SynthPreset, 7> kPresets = {{
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
    {"qwen3-30b-a3b", "Qwen3-30B-A3B shape: 48 layers, n_embd 2048, 128 experts top-8, n_ff_exp 768",
     Make("qwen3moe", 48, 2048, 32, 4, 128, 128, 8, 768, 6144, 151936, 40960, 1e6f, 1e-6f),
     PresetTokenizer::kQwen3, "qwen2"},
    {"qwen3-235b-a22b",
     "Qwen3-235B-A22B shape: 94 layers, n_embd 4096, 128 experts top-8, n_ff_exp 1536",
     Make("qwen3moe", 94, 4096, 64, 4, 128, 128, 8, 1536, 12288, 151936, 40960, 1e6f, 1e-6f),
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
