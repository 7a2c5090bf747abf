#include "model/tensor_names.h"

#include <fmt/format.h>

#include <array>
#include <charconv>

#include "base/check.h"

namespace mt {
namespace {

struct NameEntry {
  TensorRole role;
  std::string_view base;  // without "blk.N." and without ".weight"
  bool per_layer;
};

constexpr std::array<NameEntry, 47> kNames = {{
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
    {TensorRole::kAttnSinks, "attn_sinks", true},
    {TensorRole::kAttnQkv, "attn_qkv", true},
    {TensorRole::kAttnGate, "attn_gate", true},
    {TensorRole::kSsmConv1d, "ssm_conv1d", true},
    {TensorRole::kSsmDt, "ssm_dt", true},
    {TensorRole::kSsmA, "ssm_a", true},
    {TensorRole::kSsmBetaAlpha, "ssm_ba", true},
    {TensorRole::kSsmBeta, "ssm_beta", true},
    {TensorRole::kSsmAlpha, "ssm_alpha", true},
    {TensorRole::kSsmNorm, "ssm_norm", true},
    {TensorRole::kSsmOut, "ssm_out", true},
    {TensorRole::kAttnQA, "attn_q_a", true},
    {TensorRole::kAttnQANorm, "attn_q_a_norm", true},
    {TensorRole::kAttnQB, "attn_q_b", true},
    {TensorRole::kAttnKvAMqa, "attn_kv_a_mqa", true},
    {TensorRole::kAttnKvANorm, "attn_kv_a_norm", true},
    {TensorRole::kAttnKB, "attn_k_b", true},
    {TensorRole::kAttnVB, "attn_v_b", true},
    {TensorRole::kAttnKvB, "attn_kv_b", true},
    {TensorRole::kFfnNorm, "ffn_norm", true},
    {TensorRole::kAttnPostNorm, "post_attention_norm", true},
    {TensorRole::kFfnGate, "ffn_gate", true},
    {TensorRole::kFfnUp, "ffn_up", true},
    {TensorRole::kFfnDown, "ffn_down", true},
    {TensorRole::kFfnGateInp, "ffn_gate_inp", true},
    {TensorRole::kFfnExpProbsB, "exp_probs_b", true},
    {TensorRole::kFfnGateExps, "ffn_gate_exps", true},
    {TensorRole::kFfnUpExps, "ffn_up_exps", true},
    {TensorRole::kFfnDownExps, "ffn_down_exps", true},
    {TensorRole::kFfnGateInpShexp, "ffn_gate_inp_shexp", true},
    {TensorRole::kFfnGateShexp, "ffn_gate_shexp", true},
    {TensorRole::kFfnUpShexp, "ffn_up_shexp", true},
    {TensorRole::kFfnDownShexp, "ffn_down_shexp", true},
    {TensorRole::kNextnEhProj, "nextn.eh_proj", true},
    {TensorRole::kNextnEnorm, "nextn.enorm", true},
    {TensorRole::kNextnHnorm, "nextn.hnorm", true},
    {TensorRole::kNextnSharedHeadNorm, "nextn.shared_head_norm", true},
}};

}  // namespace

std::string TensorName(TensorRole role, int layer, TensorSuffix suffix) {
  const std::string_view ext = suffix == TensorSuffix::kWeight ? ".weight"
                               : suffix == TensorSuffix::kBias ? ".bias"
                                                               : "";
  for (const NameEntry& e : kNames) {
    if (e.role != role) continue;
    if (e.per_layer) return fmt::format("blk.{}.{}{}", layer, e.base, ext);
    return fmt::format("{}{}", e.base, ext);
  }
  MT_CHECK_MSG(false, "TensorRole missing from the name table");
}

namespace {

struct PerExpertBase {
  TensorRole stacked;
  std::string_view base;  // llama.cpp's LLM_TENSOR_FFN_*_EXP name without "blk.%d." and ".%d"
};
constexpr std::array<PerExpertBase, 3> kPerExpertNames = {{
    {TensorRole::kFfnGateExps, "ffn_gate"},
    {TensorRole::kFfnUpExps, "ffn_up"},
    {TensorRole::kFfnDownExps, "ffn_down"},
}};

// Parses a decimal number without sign or leading zeros at the front of `s`; advances `s`.
std::optional<int> TakeNumber(std::string_view& s) {
  int v = -1;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end == s.data() || v < 0 || (s[0] == '0' && end - s.data() > 1)) {
    return std::nullopt;
  }
  s.remove_prefix(static_cast<size_t>(end - s.data()));
  return v;
}

}  // namespace

std::string PerExpertTensorName(TensorRole stacked, int layer, int expert) {
  for (const PerExpertBase& e : kPerExpertNames) {
    if (e.stacked == stacked) return fmt::format("blk.{}.{}.{}.weight", layer, e.base, expert);
  }
  MT_CHECK_MSG(false, "PerExpertTensorName takes a stacked expert role");
}

std::optional<PerExpertName> ParsePerExpertTensorName(std::string_view name) {
  constexpr std::string_view kPrefix = "blk.", kSuffix = ".weight";
  if (!name.starts_with(kPrefix) || !name.ends_with(kSuffix)) return std::nullopt;
  std::string_view s = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  std::optional<int> layer = TakeNumber(s);
  if (!layer || !s.starts_with('.')) return std::nullopt;
  s.remove_prefix(1);
  for (const PerExpertBase& e : kPerExpertNames) {
    if (!s.starts_with(e.base) || s.size() <= e.base.size() || s[e.base.size()] != '.') continue;
    std::string_view rest = s.substr(e.base.size() + 1);
    std::optional<int> expert = TakeNumber(rest);
    if (!expert || !rest.empty()) return std::nullopt;
    return PerExpertName{e.stacked, *layer, *expert};
  }
  return std::nullopt;
}

bool IsRoutedExpertTensorName(std::string_view name) {
  for (std::string_view part : {".ffn_gate_exps.weight", ".ffn_up_exps.weight",
                                ".ffn_down_exps.weight", ".ffn_gate_up_exps.weight"}) {
    if (name.ends_with(part)) return true;  // (their .bias, gpt-oss's, are dense)
  }
  return ParsePerExpertTensorName(name).has_value();
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
