// Model file types (llama.cpp's "ftype", general.file_type) and the per-tensor type mix
// each implies, following llama-quantize's rules so a synthetic q4_k_m file has the same
// tensor types as one made by llama.cpp from a real checkpoint.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "model/arch.h"
#include "quant/ggml_type.h"

namespace mt {

struct FileType {
  std::string_view name;  // "q4_k_m"
  uint32_t llama_ftype;   // general.file_type (enum llama_ftype)
  GgmlType base;          // the default type of quantizable tensors
};

const FileType* FindFileType(std::string_view name);
std::string FileTypeNames();

// Picks tensor types in file order. Stateful because llama.cpp's mix counts attn_v
// tensors as it goes; create one per file and call Next for every tensor in order.
class TensorTypeMixer {
 public:
  TensorTypeMixer(const FileType& file_type, const HParams& hp);

  // The type for `desc` (named `name`), or nullopt with `error` set if no type fits its
  // row length (llama.cpp refuses such tensors too).
  std::optional<GgmlType> Next(const TensorDesc& desc, const std::string& name, std::string* error);

 private:
  GgmlType QuantizedType(const TensorDesc& desc);

  const FileType& ft_;
  const HParams& hp_;
  int i_attention_wv_ = 0;
};

}  // namespace mt
