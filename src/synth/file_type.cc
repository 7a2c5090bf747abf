#include "synth/file_type.h"

#include <fmt/format.h>

#include <array>

namespace mt {
namespace {

// llama.cpp's enum llama_ftype values (general.file_type).
enum Ftype : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ8_0 = 7,
  kQ2_K = 10,
  kQ3_K_S = 11,
  kQ3_K_M = 12,
  kQ3_K_L = 13,
  kQ4_K_M = 15,
  kQ6_K = 18,
  kIQ2_XXS = 19,
  kIQ2_XS = 20,
  kIQ3_XXS = 23,
  kIQ1_S = 24,
  kIQ4_NL = 25,
  kIQ3_S = 26,
  kIQ2_S = 28,
  kIQ4_XS = 30,
  kIQ1_M = 31,
  kBF16 = 32,
  kMXFP4_MOE = 38,
};

using T = GgmlType;

// The base types are llama-quantize's defaults per file type (IQ2_S's is IQ2_XS, as there).
constexpr std::array<FileType, 23> kFileTypes = {{
    {"f32", kF32, T::kF32},
    {"f16", kF16, T::kF16},
    {"q4_0", kQ4_0, T::kQ4_0},
    {"q8_0", kQ8_0, T::kQ8_0},
    {"q4_k_m", kQ4_K_M, T::kQ4_K},
    {"q6_k", kQ6_K, T::kQ6_K},
    {"bf16", kBF16, T::kBF16},
    {"mxfp4", kMXFP4_MOE, T::kMXFP4},  // MXFP4_MOE: 3-D tensors MXFP4, the rest Q8_0
    {"q2_k", kQ2_K, T::kQ2_K},
    {"q3_k_s", kQ3_K_S, T::kQ3_K},
    {"q3_k_m", kQ3_K_M, T::kQ3_K},
    {"q3_k_l", kQ3_K_L, T::kQ3_K},
    {"iq4_xs", kIQ4_XS, T::kIQ4_XS},
    {"iq4_nl", kIQ4_NL, T::kIQ4_NL},
    {"iq3_xxs", kIQ3_XXS, T::kIQ3_XXS},
    {"iq3_s", kIQ3_S, T::kIQ3_S},
    {"iq2_xxs", kIQ2_XXS, T::kIQ2_XXS},
    {"iq2_xs", kIQ2_XS, T::kIQ2_XS},
    {"iq2_s", kIQ2_S, T::kIQ2_XS},
    {"iq1_s", kIQ1_S, T::kIQ1_S},
    {"iq1_m", kIQ1_M, T::kIQ1_M},
    // The dynamic mixes of the widely used low-bit releases (Unsloth's "UD" files): routed
    // experts at the low type, a few of them one step up, and everything else at 4-6 bits.
    {"ud-iq1_s", kIQ1_S, T::kIQ1_S, FileType::Mix::kDynamic},
    {"ud-q2_k_xl", kQ2_K, T::kQ2_K, FileType::Mix::kDynamic},
}};

bool IsFloatType(GgmlType t) { return t == T::kF32 || t == T::kF16 || t == T::kBF16; }

// llama.cpp spends more bits on the first and last eighth of layers and every third one
// in between.
bool UseMoreBits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// The type llama.cpp falls back to when a row is not a multiple of the block
// (tensor_type_fallback).
std::optional<GgmlType> Fallback(GgmlType t) {
  switch (t) {
    case T::kIQ1_S:
    case T::kIQ1_M:
    case T::kIQ2_XXS:
    case T::kIQ2_XS:
    case T::kIQ2_S:
    case T::kIQ3_XXS:
    case T::kIQ3_S:
    case T::kIQ4_XS:
      return T::kIQ4_NL;
    case T::kQ2_K:
    case T::kQ3_K:
      return T::kQ4_0;
    case T::kQ4_K:
      return T::kQ5_0;
    case T::kQ5_K:
      return T::kQ5_1;
    case T::kQ6_K:
      return T::kQ8_0;
    default:
      return std::nullopt;
  }
}

// llama-quantize's tensor categories (tensor_get_category), by name, in its order.
enum class Category {
  kOutput,
  kTokenEmbd,
  kAttnV,  // attn_qkv, attn_kv_b and attn_v: "attn_v-like"
  kAttnK,
  kAttnQ,
  kAttnOutput,
  kAttnQkv,  // also attn_v-like; apart for its own q4_k_m/q3_k rules
  kFfnUp,
  kFfnGate,
  kFfnDown,
  kOther,
};

Category CategoryOf(const std::string& name) {
  auto has = [&](std::string_view part) { return name.find(part) != std::string::npos; };
  if (name == "output.weight") return Category::kOutput;
  if (name == "token_embd.weight") return Category::kTokenEmbd;
  if (has("attn_qkv.weight")) return Category::kAttnQkv;
  if (has("attn_kv_b.weight") || has("attn_v.weight")) return Category::kAttnV;
  if (has("attn_k.weight")) return Category::kAttnK;
  if (has("attn_q.weight")) return Category::kAttnQ;
  if (has("attn_output.weight")) return Category::kAttnOutput;
  if (has("ffn_up")) return Category::kFfnUp;
  if (has("ffn_gate")) return Category::kFfnGate;
  if (has("ffn_down")) return Category::kFfnDown;
  return Category::kOther;
}

bool IsAttnVLike(Category c) { return c == Category::kAttnV || c == Category::kAttnQkv; }

bool IsRoutedExpert(const TensorDesc& d) {
  return d.role == TensorRole::kFfnGateExps || d.role == TensorRole::kFfnUpExps ||
         d.role == TensorRole::kFfnDownExps;
}

}  // namespace

const FileType* FindFileType(std::string_view name) {
  for (const FileType& f : kFileTypes) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

const FileType* FindFileTypeById(uint32_t llama_ftype) {
  for (const FileType& f : kFileTypes) {
    if (f.llama_ftype == llama_ftype && f.mix == FileType::Mix::kLlamaQuantize) return &f;
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
  for (const std::string& name : names) {
    const Category c = CategoryOf(name);
    n_attention_wv_ += IsAttnVLike(c);
    tied_embeddings_ = tied_embeddings_ && c != Category::kOutput;
  }
}

std::optional<GgmlType> TensorTypeMixer::Next(const TensorDesc& desc, const std::string& name,
                                              std::string* error) {
  // 1-D tensors (norms, biases, the shared-expert gate), the routers and the DeltaNet
  // convolution stay f32, as the converter writes them and llama-quantize leaves them.
  bool keep_f32 = desc.shape.size() < 2 || desc.role == TensorRole::kFfnGateInp ||
                  desc.role == TensorRole::kSsmConv1d || desc.suffix != TensorSuffix::kWeight;
  if (keep_f32 || ft_.base == T::kF32) return T::kF32;
  if (IsFloatType(ft_.base)) return ft_.base;

  GgmlType t =
      ft_.mix == FileType::Mix::kDynamic ? DynamicType(desc, name) : QuantizedType(desc, name);
  uint64_t ncols = desc.shape[0];
  if (ncols % TraitsOf(t).block_size == 0) return t;
  std::optional<GgmlType> fb = Fallback(t);
  if (!fb) {
    *error = fmt::format("tensor {}: row length {} is not a multiple of {}'s block size {}", name,
                         ncols, TypeName(t), TraitsOf(t).block_size);
    return std::nullopt;
  }
  if (ncols % TraitsOf(*fb).block_size == 0) return *fb;
  return T::kF16;  // llama.cpp's last resort for rows that are not a multiple of 32
}

// llama_tensor_get_type_impl for the file types above, without an importance matrix (synth
// has none) and for MoE models.
GgmlType TensorTypeMixer::QuantizedType(const TensorDesc& desc, const std::string& name) {
  const uint32_t f = ft_.llama_ftype;
  GgmlType t = ft_.base;
  const bool eight_experts = hp_.n_expert == 8;
  const uint32_t n_gqa = hp_.n_head_kv ? hp_.n_head / hp_.n_head_kv : 1;
  // llama.cpp's n_layer_all: the NextN/MTP blocks count too.
  const int n_layer = static_cast<int>(hp_.n_layer + hp_.n_layer_nextn);
  Category category = CategoryOf(name);
  if (category == Category::kTokenEmbd && tied_embeddings_) category = Category::kOutput;
  const bool iq2_family =
      f == kIQ2_XXS || f == kIQ2_XS || f == kIQ1_S || f == kIQ2_S || f == kIQ1_M;

  if (category == Category::kOutput) {
    if (f == kMXFP4_MOE || desc.shape[0] % TraitsOf(t).block_size != 0) return T::kQ8_0;
    if (iq2_family || f == kIQ3_XXS) return T::kQ5_K;
    return t == T::kQ8_0 ? t : T::kQ6_K;
  }
  if (f == kMXFP4_MOE) {
    // Every 3-D tensor, as llama-quantize decides it: MLA's per-head attn_k_b and attn_v_b too.
    return desc.shape.size() > 2 && desc.shape[2] > 1 ? T::kMXFP4 : T::kQ8_0;
  }
  if (category == Category::kTokenEmbd) {
    if (f == kIQ2_XXS || f == kIQ2_XS || f == kIQ1_S || f == kIQ1_M) return T::kQ2_K;
    if (f == kIQ2_S) return T::kIQ3_S;
    if (f == kIQ3_XXS) return T::kIQ3_S;
    return t;
  }
  if (iq2_family) {
    if (IsAttnVLike(category)) {
      ++i_attention_wv_;
      if (n_gqa >= 4 || hp_.n_expert >= 4) return T::kQ4_K;
      return f == kIQ2_S ? T::kIQ3_S : T::kQ2_K;
    }
    if (eight_experts && category == Category::kAttnK) return T::kQ4_K;
    if (category == Category::kFfnDown) {
      // Counted per ffn_down tensor, not per layer (llama.cpp's i_ffn_down).
      const bool early = i_ffn_down_++ < n_layer / 8;
      if (early) return f == kIQ2_S ? T::kIQ3_S : T::kQ2_K;
      return t;
    }
    if (category == Category::kAttnOutput) {
      if (eight_experts) return T::kQ5_K;
      if (f == kIQ1_S || f == kIQ1_M) return T::kIQ2_XXS;
      if (f == kIQ2_S) return T::kIQ3_S;
    }
    return t;
  }
  if (IsAttnVLike(category)) {
    if (f == kQ2_K) {
      t = n_gqa >= 4 ? T::kQ4_K : T::kQ3_K;
    } else if (f == kIQ3_XXS) {
      t = n_gqa >= 4 ? T::kQ4_K : T::kIQ3_S;  // IQ3_S: synth has no importance matrix
    } else if (f == kIQ3_S && n_gqa >= 4) {
      t = T::kQ4_K;
    } else if (f == kQ3_K_M) {
      t = i_attention_wv_ < 2 ? T::kQ5_K : T::kQ4_K;
    } else if (f == kQ3_K_L) {
      t = T::kQ5_K;
    } else if ((f == kIQ4_NL || f == kIQ4_XS) && n_gqa >= 4) {
      t = T::kQ5_K;
    } else if (f == kQ4_K_M && UseMoreBits(i_attention_wv_, n_attention_wv_)) {
      t = T::kQ6_K;
    }
    if (eight_experts) t = T::kQ8_0;  // llama.cpp: cheap for 8-expert models
    ++i_attention_wv_;
    return t;
  }
  switch (category) {
    case Category::kAttnK:
      if (eight_experts) return T::kQ8_0;
      if (f == kIQ3_XXS) return T::kIQ2_S;
      return t;
    case Category::kAttnQ:
      return f == kIQ3_XXS ? T::kIQ2_S : t;
    case Category::kFfnDown: {
      // For MoE models llama.cpp takes the layer from the tensor's name.
      const int il = desc.layer;
      ++i_ffn_down_;
      if (f == kQ2_K) return T::kQ3_K;
      if (f == kIQ3_XXS) return il < n_layer / 8 ? T::kQ4_K : T::kQ3_K;
      if (f == kQ3_K_M) return il < n_layer / 16 ? T::kQ5_K : T::kQ4_K;
      if (f == kQ3_K_L) return T::kQ5_K;
      if (f == kQ4_K_M) return UseMoreBits(il, n_layer) ? T::kQ6_K : t;
      if ((f == kIQ4_NL || f == kIQ4_XS) && il < n_layer / 8) return T::kQ5_K;
      return t;
    }
    case Category::kAttnOutput:
      if (eight_experts) {
        const bool bump = f == kQ2_K || f == kIQ3_XXS || f == kQ3_K_S || f == kQ3_K_M ||
                          f == kIQ4_NL || f == kQ4_K_M || f == kIQ3_S || f == kIQ4_XS;
        return bump ? T::kQ5_K : t;
      }
      if (f == kQ2_K) return T::kQ3_K;
      if (f == kIQ3_XXS) return T::kIQ3_S;
      if (f == kQ3_K_M) return T::kQ4_K;
      if (f == kQ3_K_L) return T::kQ5_K;
      return t;
    case Category::kAttnQkv:  // (handled as attn_v-like above; kept for the switch)
    default:
      return t;
  }
}

// The dynamic mixes (ud-iq1_s, ud-q2_k_xl): routed experts at the file type's base type,
// their ffn_down one step up in the layers llama.cpp gives more bits (IQ2_XXS over IQ1_S,
// Q3_K over Q2_K); attention Q4_K with its attn_v-like tensors and attn_output Q5_K/Q6_K;
// shared experts and dense FFNs Q4_K with ffn_down Q6_K; the head Q6_K, the embedding Q4_K.
GgmlType TensorTypeMixer::DynamicType(const TensorDesc& desc, const std::string& name) {
  const Category category = CategoryOf(name);
  // llama.cpp's n_layer_all: the NextN/MTP blocks count too.
  const int n_layer = static_cast<int>(hp_.n_layer + hp_.n_layer_nextn);
  if (category == Category::kOutput) return T::kQ6_K;
  if (category == Category::kTokenEmbd) return T::kQ4_K;
  if (IsRoutedExpert(desc)) {
    if (category == Category::kFfnDown && UseMoreBits(desc.layer, n_layer)) {
      return ft_.base == T::kIQ1_S ? T::kIQ2_XXS : T::kQ3_K;
    }
    return ft_.base;
  }
  if (IsAttnVLike(category)) return T::kQ6_K;
  if (category == Category::kAttnOutput) return T::kQ5_K;
  if (category == Category::kFfnDown) return T::kQ6_K;
  return T::kQ4_K;
}

}  // namespace mt
