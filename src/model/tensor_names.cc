#include "model/tensor_names.h"

#include <array>
#include <charconv>

#include <fmt/format.h>

#include "base/check.h"

namespace mt {
namespace {

struct NameEntry {
  TensorRole role;
  std::string_view base;  // without "blk.N." and without ".weight"
  bool per_layer;
};

constexpr std::array<NameEntry, 19> kNames = {{
    {TensorRole::kTokenEmbd, "token_embd", false},
    {TensorRole::kOutputNorm, "output_norm", false},
    {TensorRole::kOutput, "output", false},
    {TensorRole::kAttnNorm, "attn_norm", true},
    {TensorRole::kAttnQ, "attn_q", true},
    {TensorRole::kAttnK, "attn_k", true},
    {TensorRole::kAttnV, "attn_v", true},
    {TensorRole::kAttnOutput, "attn_output", true},
    {TensorRole::kAttnQNorm, "attn_q_norm", true},
    {TensorRole::kAttnKNorm, "attn_k_norm", true},
    {TensorRole::kFfnNorm, "ffn_norm", true},
    {TensorRole::kFfnGateInp, "ffn_gate_inp", true},
    {TensorRole::kFfnGateExps, "ffn_gate_exps", true},
    {TensorRole::kFfnUpExps, "ffn_up_exps", true},
    {TensorRole::kFfnDownExps, "ffn_down_exps", true},
    {TensorRole::kFfnGateInpShexp, "ffn_gate_inp_shexp", true},
    {TensorRole::kFfnGateShexp, "ffn_gate_shexp", true},
    {TensorRole::kFfnUpShexp, "ffn_up_shexp", true},
    {TensorRole::kFfnDownShexp, "ffn_down_shexp", true},
}};

}  // namespace

std::string TensorName(TensorRole role, int layer, TensorSuffix suffix) {
  const char* ext = suffix == TensorSuffix::kWeight ? "weight" : "bias";
  for (const NameEntry& e : kNames) {
    if (e.role != role) continue;
    if (e.per_layer) return fmt::format("blk.{}.{}.{}", layer, e.base, ext);
    return fmt::format("{}.{}", e.base, ext);
  }
  MT_CHECK_MSG(false, "TensorRole missing from the name table");
}

bool IsRoutedExpertTensorName(std::string_view name) {
  for (std::string_view part : {".ffn_gate_exps.", ".ffn_up_exps.", ".ffn_down_exps.",
                                ".ffn_gate_up_exps."}) {
    if (name.find(part) != std::string_view::npos) return true;
  }
  return false;
}

int LayerOfTensorName(std::string_view name) {
  constexpr std::string_view kPrefix = "blk.";
  if (!name.starts_with(kPrefix)) return -1;
  std::string_view rest = name.substr(kPrefix.size());
  int layer = -1;
  auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), layer);
  if (ec != std::errc() || end == rest.data() || end == rest.data() + rest.size() || *end != '.')
    return -1;
  return layer;
}

}  // namespace mt
