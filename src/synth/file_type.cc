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

TensorTypeMixer::TensorTypeMixer(const FileType& file_type, const HParams& hp)
    : ft_(file_type), hp_(hp) {}

std::optional<GgmlType> TensorTypeMixer::Next(const TensorDesc& desc, const std::string& name,
                                              std::string* error) {
  // 1-D tensors (norms, biases, the shared-expert gate) and the routers stay f32, as the
  // converter writes them and llama-quantize leaves them.
  bool keep_f32 = desc.shape.size() < 2 || desc.role == TensorRole::kFfnGateInp ||
                  desc.suffix == TensorSuffix::kBias;
  if (keep_f32 || ft_.base == GgmlType::kF32) return GgmlType::kF32;
  if (IsFloatType(ft_.base)) return ft_.base;

  GgmlType t = QuantizedType(desc);
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

GgmlType TensorTypeMixer::QuantizedType(const TensorDesc& desc) {
  GgmlType t = ft_.base;
  const bool q4_k_m = ft_.llama_ftype == kFtypeQ4KM;
  const bool eight_experts = hp_.n_expert == 8;
  switch (desc.role) {
    case TensorRole::kOutput:
      if (ft_.llama_ftype == kFtypeMxfp4Moe || desc.shape[0] % TraitsOf(t).block_size != 0) {
        return GgmlType::kQ8_0;
      }
      return t == GgmlType::kQ8_0 ? t : GgmlType::kQ6_K;
    default:
      break;
  }
  if (ft_.llama_ftype == kFtypeMxfp4Moe) {
    return desc.shape.size() > 2 && desc.shape[2] > 1 ? GgmlType::kMXFP4 : GgmlType::kQ8_0;
  }
  switch (desc.role) {
    case TensorRole::kTokenEmbd:
      return t;
    case TensorRole::kAttnV:
      if (q4_k_m && UseMoreBits(i_attention_wv_, static_cast<int>(hp_.n_layer))) t = GgmlType::kQ6_K;
      if (eight_experts) t = GgmlType::kQ8_0;  // llama.cpp: cheap for 8-expert models
      ++i_attention_wv_;
      return t;
    case TensorRole::kAttnK:
      return eight_experts ? GgmlType::kQ8_0 : t;
    case TensorRole::kAttnOutput:
      return eight_experts && q4_k_m ? GgmlType::kQ5_K : t;
    case TensorRole::kFfnDownExps:
    case TensorRole::kFfnDownShexp:
      if (q4_k_m && UseMoreBits(desc.layer, static_cast<int>(hp_.n_layer))) return GgmlType::kQ6_K;
      return t;
    default:
      return t;
  }
}

}  // namespace mt
