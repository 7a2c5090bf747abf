#include "model/hparams.h"

#include <algorithm>
#include <cmath>

#include "gguf/gguf.h"
#include "model/arch.h"

namespace mt {
namespace {

// Limits that keep a hostile file from asking for absurd allocations. They are far above
// any released model (llama.cpp: at most 512 layers and 512 experts).
constexpr uint64_t kMaxLayers = 512;
constexpr uint64_t kMaxExperts = 1024;

}  // namespace

std::string HParamsKeys::Key(std::string_view suffix) const {
  return fmt::format("{}.{}", arch_, suffix);
}

bool HParamsKeys::Has(std::string_view suffix) const { return md_.Contains(Key(suffix)); }

Status HParamsKeys::Uint(std::string_view suffix, uint32_t& out, std::optional<uint32_t> fallback,
                         uint64_t max) const {
  std::string key = Key(suffix);
  const GgufValue* v = md_.Find(key);
  if (v == nullptr) {
    if (!fallback) return NotFound("missing key {}", key);
    out = *fallback;
    return Status::Ok();
  }
  if (v->AsArray()) return Unimplemented("key {}: per-layer values are not supported", key);
  std::optional<uint64_t> u = v->AsUint();
  if (!u) {
    return InvalidArgument("key {}: expected an unsigned integer, got {}", key,
                           GgufTypeName(v->type()));
  }
  if (*u > max) return OutOfRange("key {}: value {} is larger than {}", key, *u, max);
  out = static_cast<uint32_t>(*u);
  return Status::Ok();
}

Status HParamsKeys::UintArray(std::string_view suffix, std::span<uint32_t> out,
                              uint64_t max) const {
  std::string key = Key(suffix);
  std::fill(out.begin(), out.end(), 0u);
  const GgufValue* v = md_.Find(key);
  if (v == nullptr) return Status::Ok();
  const GgufArray* a = v->AsArray();
  if (a == nullptr || a->items.size() != out.size()) {
    return InvalidArgument("key {}: expected an array of {} integers", key, out.size());
  }
  for (size_t i = 0; i < out.size(); ++i) {
    std::optional<uint64_t> u = a->items[i].AsUint();
    if (!u || *u > max) {
      return InvalidArgument("key {}: element {} is not an integer in 0..{}", key, i, max);
    }
    out[i] = static_cast<uint32_t>(*u);
  }
  return Status::Ok();
}

Status HParamsKeys::Float(std::string_view suffix, float& out,
                          std::optional<float> fallback) const {
  std::string key = Key(suffix);
  const GgufValue* v = md_.Find(key);
  if (v == nullptr) {
    if (!fallback) return NotFound("missing key {}", key);
    out = *fallback;
    return Status::Ok();
  }
  std::optional<double> d = v->AsDouble();
  if (!d || !std::isfinite(*d)) return InvalidArgument("key {}: expected a finite number", key);
  out = static_cast<float>(*d);
  return Status::Ok();
}

Status HParamsKeys::Bool(std::string_view suffix, bool& out, bool fallback) const {
  std::string key = Key(suffix);
  const GgufValue* v = md_.Find(key);
  if (v == nullptr) {
    out = fallback;
    return Status::Ok();
  }
  std::optional<bool> b = v->AsBool();
  if (!b) return InvalidArgument("key {}: expected a bool, got {}", key, GgufTypeName(v->type()));
  out = *b;
  return Status::Ok();
}

Status HParamsKeys::String(std::string_view suffix, std::string& out,
                           std::string_view fallback) const {
  std::string key = Key(suffix);
  const GgufValue* v = md_.Find(key);
  if (v == nullptr) {
    out = fallback;
    return Status::Ok();
  }
  const std::string* str = v->AsString();
  if (str == nullptr) {
    return InvalidArgument("key {}: expected a string, got {}", key, GgufTypeName(v->type()));
  }
  out = *str;
  return Status::Ok();
}

namespace {

// rope.scaling.type as llama.cpp names them; types it knows but moetier does not compute are
// refused rather than read as something else.
Status ReadRopeScaling(const HParamsKeys& r, HParams& hp) {
  std::string type;
  MT_RETURN_IF_ERROR(r.String("rope.scaling.type", type, "linear"));
  if (type == "none") {
    hp.rope_scaling = RopeScalingType::kNone;
  } else if (type == "linear") {
    hp.rope_scaling = RopeScalingType::kLinear;
  } else if (type == "yarn") {
    hp.rope_scaling = RopeScalingType::kYarn;
  } else {
    return Unimplemented("{} '{}' is not supported (moetier computes none, linear and yarn)",
                         r.Key("rope.scaling.type"), Printable(type));
  }
  float factor = 0;
  if (r.Has("rope.scaling.factor")) {
    MT_RETURN_IF_ERROR(r.Float("rope.scaling.factor", factor, 0.0f));
  } else {
    MT_RETURN_IF_ERROR(r.Float("rope.scale_linear", factor, 0.0f));  // the key's old name
  }
  if (!std::isfinite(factor) || factor < 0) {
    return InvalidArgument("{} must be a finite number >= 0 (0: none), not {}",
                           r.Key("rope.scaling.factor"), factor);
  }
  hp.rope_freq_scale = factor == 0 ? 1.0f : 1.0f / factor;
  MT_RETURN_IF_ERROR(r.Uint("rope.scaling.original_context_length", hp.n_ctx_orig_yarn,
                            hp.n_ctx_train, 1ull << 31));
  MT_RETURN_IF_ERROR(r.Float("rope.scaling.attn_factor", hp.rope_attn_factor, 1.0f));
  if (hp.rope_scaling == RopeScalingType::kYarn && hp.n_ctx_orig_yarn == 0) {
    return InvalidArgument("{} must be > 0 for YaRN",
                           r.Key("rope.scaling.original_context_length"));
  }
  return Status::Ok();
}

}  // namespace

Result<HParams> ReadHParams(const GgufMetadata& md) {
  const std::string* arch_name = md.FindString("general.architecture");
  if (arch_name == nullptr) return NotFound("missing key general.architecture");
  const ArchDef* arch = FindArch(*arch_name);
  if (arch == nullptr) {
    return Unimplemented("unsupported architecture '{}' (supported: {})", Printable(*arch_name),
                         SupportedArchNames());
  }
  HParams hp;
  hp.arch = *arch_name;
  HParamsKeys r(md, hp.arch);
  MT_RETURN_IF_ERROR(r.Uint("context_length", hp.n_ctx_train, std::nullopt, 1ull << 31));
  MT_RETURN_IF_ERROR(r.Uint("embedding_length", hp.n_embd, std::nullopt));
  MT_RETURN_IF_ERROR(r.Uint("block_count", hp.n_layer, std::nullopt, kMaxLayers));
  MT_RETURN_IF_ERROR(r.Uint("feed_forward_length", hp.n_ff, 0));
  MT_RETURN_IF_ERROR(r.Uint("attention.head_count", hp.n_head, std::nullopt));
  MT_RETURN_IF_ERROR(r.Uint("attention.head_count_kv", hp.n_head_kv, hp.n_head));
  MT_RETURN_IF_ERROR(r.Uint("expert_count", hp.n_expert, 0, kMaxExperts));
  MT_RETURN_IF_ERROR(r.Uint("expert_used_count", hp.n_expert_used, 0, kMaxExperts));
  MT_RETURN_IF_ERROR(r.Uint("expert_group_count", hp.n_expert_groups, 0, kMaxExperts));
  MT_RETURN_IF_ERROR(r.Uint("expert_group_used_count", hp.n_group_used, 0, kMaxExperts));
  MT_RETURN_IF_ERROR(r.Float("attention.layer_norm_rms_epsilon", hp.rms_eps, std::nullopt));
  MT_RETURN_IF_ERROR(r.Float("rope.freq_base", hp.rope_freq_base, 10000.0f));
  MT_RETURN_IF_ERROR(ReadRopeScaling(r, hp));
  // Values the forward pass would turn into NaN logits (computed with, silently).
  if (!std::isfinite(hp.rms_eps) || hp.rms_eps < 0) {
    return InvalidArgument("{} must be a finite number >= 0, not {}",
                           r.Key("attention.layer_norm_rms_epsilon"), hp.rms_eps);
  }
  if (!std::isfinite(hp.rope_freq_base) || hp.rope_freq_base <= 0) {
    return InvalidArgument("{} must be a finite number > 0, not {}", r.Key("rope.freq_base"),
                           hp.rope_freq_base);
  }

  if (hp.n_embd == 0 || hp.n_layer == 0 || hp.n_head == 0) {
    return InvalidArgument("{}: embedding_length, block_count and attention.head_count must be > 0",
                           hp.arch);
  }
  if (hp.n_head_kv == 0 || hp.n_head % hp.n_head_kv != 0) {
    return InvalidArgument("{}: attention.head_count {} is not a multiple of head_count_kv {}",
                           hp.arch, hp.n_head, hp.n_head_kv);
  }
  MT_RETURN_IF_ERROR(r.Uint("attention.key_length", hp.head_dim_k, hp.n_embd / hp.n_head));
  MT_RETURN_IF_ERROR(r.Uint("attention.value_length", hp.head_dim_v, hp.n_embd / hp.n_head));
  MT_RETURN_IF_ERROR(r.Uint("rope.dimension_count", hp.n_rot, hp.head_dim_k));
  if (hp.head_dim_k == 0 || hp.head_dim_v == 0 || hp.n_rot > hp.head_dim_k || hp.n_rot % 2 != 0) {
    return InvalidArgument("{}: bad head sizes (key_length {}, value_length {}, rope dims {})",
                           hp.arch, hp.head_dim_k, hp.head_dim_v, hp.n_rot);
  }

  if (hp.n_expert == 0 || hp.n_expert_used == 0) {
    return Unimplemented(
        "{}: this is a dense model ({} = {}, {} = {}); moetier runs "
        "Mixture-of-Experts models only",
        hp.arch, r.Key("expert_count"), hp.n_expert, r.Key("expert_used_count"), hp.n_expert_used);
  }
  if (hp.n_expert_used > hp.n_expert) {
    return InvalidArgument("{}: expert_used_count {} exceeds expert_count {}", hp.arch,
                           hp.n_expert_used, hp.n_expert);
  }
  if (hp.n_expert_groups > 1) {
    // llama.cpp's checks, plus enough experts in the used groups for the top-k.
    if (hp.n_expert_groups >= hp.n_expert || hp.n_expert % hp.n_expert_groups != 0 ||
        hp.n_group_used == 0 || hp.n_group_used >= hp.n_expert_groups ||
        uint64_t{hp.n_group_used} * (hp.n_expert / hp.n_expert_groups) < hp.n_expert_used) {
      return InvalidArgument(
          "{}: {} experts in {} groups of which {} are used cannot give the "
          "top {}",
          hp.arch, hp.n_expert, hp.n_expert_groups, hp.n_group_used, hp.n_expert_used);
    }
  }
  MT_RETURN_IF_ERROR(arch->read_keys(r, hp));
  if (hp.n_ff_exp == 0) return InvalidArgument("{}: the experts' hidden size is 0", hp.arch);

  if (const GgufArray* tokens = md.FindArray("tokenizer.ggml.tokens")) {
    hp.n_vocab = static_cast<uint32_t>(tokens->items.size());
  } else {
    MT_RETURN_IF_ERROR(r.Uint("vocab_size", hp.n_vocab, 0, 1u << 24));
  }
  return hp;
}

void WriteHParams(const HParams& hp, GgufMetadata& md) {
  const ArchDef* arch = FindArch(hp.arch);
  auto key = [&](std::string_view suffix) { return fmt::format("{}.{}", hp.arch, suffix); };
  md.Set("general.architecture", GgufValue::String(hp.arch));
  md.Set(key("block_count"), GgufValue::Uint32(hp.n_layer + hp.n_layer_nextn));
  md.Set(key("context_length"), GgufValue::Uint32(hp.n_ctx_train));
  md.Set(key("embedding_length"), GgufValue::Uint32(hp.n_embd));
  md.Set(key("feed_forward_length"), GgufValue::Uint32(hp.n_ff));
  md.Set(key("attention.head_count"), GgufValue::Uint32(hp.n_head));
  md.Set(key("attention.head_count_kv"), GgufValue::Uint32(hp.n_head_kv));
  md.Set(key("rope.freq_base"), GgufValue::Float32(hp.rope_freq_base));
  md.Set(key("attention.layer_norm_rms_epsilon"), GgufValue::Float32(hp.rms_eps));
  md.Set(key("expert_count"), GgufValue::Uint32(hp.n_expert));
  md.Set(key("expert_used_count"), GgufValue::Uint32(hp.n_expert_used));
  if (hp.n_expert_groups > 0) {
    md.Set(key("expert_group_count"), GgufValue::Uint32(hp.n_expert_groups));
    md.Set(key("expert_group_used_count"), GgufValue::Uint32(hp.n_group_used));
  }
  // The converter writes key/value lengths only when the config names a head_dim that is
  // not n_embd / n_head (Qwen3; deepseek2 writes its own).
  if (hp.head_dim_k != hp.n_embd / hp.n_head || hp.head_dim_v != hp.n_embd / hp.n_head) {
    md.Set(key("attention.key_length"), GgufValue::Uint32(hp.head_dim_k));
    md.Set(key("attention.value_length"), GgufValue::Uint32(hp.head_dim_v));
  }
  if (hp.rope_scaling == RopeScalingType::kYarn) {
    md.Set(key("rope.scaling.type"), GgufValue::String("yarn"));
    md.Set(key("rope.scaling.factor"), GgufValue::Float32(1.0f / hp.rope_freq_scale));
    md.Set(key("rope.scaling.original_context_length"), GgufValue::Uint32(hp.n_ctx_orig_yarn));
  } else if (hp.rope_freq_scale != 1.0f) {
    md.Set(key("rope.scaling.type"), GgufValue::String("linear"));
    md.Set(key("rope.scaling.factor"), GgufValue::Float32(1.0f / hp.rope_freq_scale));
  }
  if (arch != nullptr) arch->write_keys(hp, md);
}

}  // namespace mt
