#include "synth/file_type.h"

#include <array>

#include <fmt/format.h>

namespace mt {
namespace {

// llama.cpp's enum llama_ftype values.
constexpr std::array<FileType, 8> kFileTypes = {{
    {"f32", 0, GgmlType::kF32},
    {"f16", 1, GgmlType::kF16},
    {"q4_0", 2, GgmlType::kQ4_0},
    {"q8_0", 7, GgmlType::kQ8_0},
    {"q4_k_m", 15, GgmlType::kQ4_K},
    {"q6_k", 18, GgmlType::kQ6_K},
    {"bf16", 32, GgmlType::kBF16},
    {"mxfp4", 38, GgmlType::kMXFP4},  // MXFP4_MOE: experts MXFP4, the rest Q8_0
}};

constexpr uint32_t kFtypeQ4KM = 15;
constexpr uint32_t kFtypeMxfp4Moe = 38;

bool IsFloatType(GgmlType t) {
  return t == GgmlType::kF32 || t == GgmlType::kF16 || t == GgmlType::kBF16;
}

// llama.cpp spends more bits on the first and last eighth of layers and every third one
// in between.
bool UseMoreBits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// The block-32 type llama.cpp falls back to when a row is not a multiple of 256.
std::optional<GgmlType> Fallback(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_K: return GgmlType::kQ5_0;
    case GgmlType::kQ5_K: return GgmlType::kQ5_1;
    case GgmlType::kQ6_K: return GgmlType::kQ8_0;
    default: return std::nullopt;
  }
}

// llama-quantize's tensor categories (tensor_get_category), by name.
enum class Category { kOutput, kTokenEmbd, kAttnV, kAttnK, kAttnOutput, kFfnDown, kOther };

Category CategoryOf(const std::string& name) {
  auto has = [&](std::string_view part) { return name.find(part) != std::string::npos; };
  if (name == "output.weight") return Category::kOutput;
  if (name == "token_embd.weight") return Category::kTokenEmbd;
  if (has("attn_qkv.weight") || has("attn_kv_b.weight") || has("attn_v.weight")) {
    return Category::kAttnV;
  }
  if (has("attn_k.weight")) return Category::kAttnK;
  if (has("attn_output.weight")) return Category::kAttnOutput;
  if (has("ffn_up") || has("ffn_gate")) return Category::kOther;  // no rule for our types
  if (has("ffn_down")) return Category::kFfnDown;
  return Category::kOther;
}

}  // namespace

const FileType* FindFileType(std::string_view name) {
  for (const FileType& f : kFileTypes) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

std::string FileTypeNames() {
  std::string out;
  for (const FileType& f : kFileTypes) {
    if (!out.empty()) out += ", ";
    out += f.name;
  }
  return out;
}

TensorTypeMixer::TensorTypeMixer(const FileType& file_type, const HParams& hp,
                                 const std::vector<std::string>& names)
    : ft_(file_type), hp_(hp) {
  for (const std::string& name : names) n_attention_wv_ += CategoryOf(name) == Category::kAttnV;
}

std::optional<GgmlType> TensorTypeMixer::Next(const TensorDesc& desc, const std::string& name,
                                              std::string* error) {
  // 1-D tensors (norms, biases, the shared-expert gate) and the routers stay f32, as the
  // converter writes them and llama-quantize leaves them.
  bool keep_f32 = desc.shape.size() < 2 || desc.role == TensorRole::kFfnGateInp ||
                  desc.suffix == TensorSuffix::kBias;
  if (keep_f32 || ft_.base == GgmlType::kF32) return GgmlType::kF32;
  if (IsFloatType(ft_.base)) return ft_.base;

  GgmlType t = QuantizedType(desc, name);
  uint64_t ncols = desc.shape[0];
  if (ncols % TraitsOf(t).block_size == 0) return t;
  std::optional<GgmlType> fb = Fallback(t);
  if (!fb) {
    *error = fmt::format("tensor {}: row length {} is not a multiple of {}'s block size {}", name,
                         ncols, TypeName(t), TraitsOf(t).block_size);
    return std::nullopt;
  }
  if (ncols % TraitsOf(*fb).block_size == 0) return *fb;
  return GgmlType::kF16;  // llama.cpp's last resort for rows that are not a multiple of 32
}

GgmlType TensorTypeMixer::QuantizedType(const TensorDesc& desc, const std::string& name) {
  GgmlType t = ft_.base;
  const bool q4_k_m = ft_.llama_ftype == kFtypeQ4KM;
  const bool eight_experts = hp_.n_expert == 8;
  const Category category = CategoryOf(name);
  if (category == Category::kOutput) {
    if (ft_.llama_ftype == kFtypeMxfp4Moe || desc.shape[0] % TraitsOf(t).block_size != 0) {
      return GgmlType::kQ8_0;
    }
    return t == GgmlType::kQ8_0 ? t : GgmlType::kQ6_K;
  }
  if (ft_.llama_ftype == kFtypeMxfp4Moe) {
    // Every 3-D tensor, as llama-quantize decides it: MLA's per-head attn_k_b and attn_v_b too.
    return desc.shape.size() > 2 && desc.shape[2] > 1 ? GgmlType::kMXFP4 : GgmlType::kQ8_0;
  }
  switch (category) {
    case Category::kAttnV:
      if (q4_k_m && UseMoreBits(i_attention_wv_, n_attention_wv_)) t = GgmlType::kQ6_K;
      if (eight_experts) t = GgmlType::kQ8_0;  // llama.cpp: cheap for 8-expert models
      ++i_attention_wv_;
      return t;
    case Category::kAttnK:
      return eight_experts ? GgmlType::kQ8_0 : t;
    case Category::kAttnOutput:
      return eight_experts && q4_k_m ? GgmlType::kQ5_K : t;
    case Category::kFfnDown:
      if (q4_k_m && UseMoreBits(desc.layer, static_cast<int>(hp_.n_layer))) return GgmlType::kQ6_K;
      return t;
    default:
      return t;
  }
}

}  // namespace mt
