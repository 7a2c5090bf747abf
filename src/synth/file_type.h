// Model file types (llama.cpp's "ftype", general.file_type) and the per-tensor type mix
// each implies, following llama-quantize's rules so a synthetic q4_k_m file has the same
// tensor types as one made by llama.cpp from a real checkpoint.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/arch.h"
#include "quant/ggml_type.h"

namespace mt {

struct FileType {
  // kLlamaQuantize: llama-quantize's per-tensor rules for the file type; kDynamic: the
  // low-bit releases' mixes (routed experts low, the rest 4-6 bits: file_type.cc).
  enum class Mix { kLlamaQuantize, kDynamic };
  std::string_view name;  // "q4_k_m"
  uint32_t llama_ftype;   // general.file_type (enum llama_ftype)
  GgmlType base;          // the default type of quantizable tensors
  Mix mix = Mix::kLlamaQuantize;
};

const FileType* FindFileType(std::string_view name);
// The file type with llama.cpp's ftype id `llama_ftype` (its llama-quantize mix, not a
// dynamic one sharing the id), or nullptr if synth does not write it.
const FileType* FindFileTypeById(uint32_t llama_ftype);
std::string FileTypeNames();

// Picks tensor types in file order, as llama-quantize does: by the tensor's category from
// its name (attn_v-like: attn_v, attn_qkv and MLA's legacy attn_kv_b; ffn_down: every
// tensor whose name has it, dense, routed and shared), the layer from its name, and a count
// of the attn_v-like tensors seen so far. Create one per file with every tensor's name, and
// call Next for every tensor in order.
class TensorTypeMixer {
 public:
  TensorTypeMixer(const FileType& file_type, const HParams& hp,
                  const std::vector<std::string>& names);

  // The type for `desc` (named `name`), or nullopt with `error` set if no type fits its
  // row length (llama.cpp refuses such tensors too).
  std::optional<GgmlType> Next(const TensorDesc& desc, const std::string& name, std::string* error);

 private:
  GgmlType QuantizedType(const TensorDesc& desc, const std::string& name);
  GgmlType DynamicType(const TensorDesc& desc, const std::string& name);

  const FileType& ft_;
  const HParams& hp_;
  int n_attention_wv_ = 0;       // attn_v-like tensors in the file
  int i_attention_wv_ = 0;       // ... seen so far
  int i_ffn_down_ = 0;           // ffn_down tensors seen so far
  bool tied_embeddings_ = true;  // no output.weight: token_embd takes the head's rules
};

}  // namespace mt
