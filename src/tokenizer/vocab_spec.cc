// VocabSpec <-> GGUF metadata (the tokenizer.ggml.* keys of llama.cpp's converter).
#include "tokenizer/vocab_spec.h"

#include "gguf/gguf.h"

namespace mt {
namespace {

// Key names as llama.cpp's gguf-py constants spell them (Keys.Tokenizer).
constexpr std::string_view kKeyModel = "tokenizer.ggml.model";
constexpr std::string_view kKeyPre = "tokenizer.ggml.pre";
constexpr std::string_view kKeyTokens = "tokenizer.ggml.tokens";
constexpr std::string_view kKeyTokenType = "tokenizer.ggml.token_type";
constexpr std::string_view kKeyScores = "tokenizer.ggml.scores";
constexpr std::string_view kKeyMerges = "tokenizer.ggml.merges";
constexpr std::string_view kKeyAddBos = "tokenizer.ggml.add_bos_token";
constexpr std::string_view kKeyAddEos = "tokenizer.ggml.add_eos_token";
constexpr std::string_view kKeyAddSpacePrefix = "tokenizer.ggml.add_space_prefix";
constexpr std::string_view kKeyChatTemplate = "tokenizer.chat_template";

// The special-token id keys, in the order the converter writes them.
struct IdKey {
  std::string_view key;
  std::optional<uint32_t> VocabSpec::*field;
};
constexpr IdKey kIdKeys[] = {
    {"tokenizer.ggml.bos_token_id", &VocabSpec::bos_id},
    {"tokenizer.ggml.eos_token_id", &VocabSpec::eos_id},
    {"tokenizer.ggml.eot_token_id", &VocabSpec::eot_id},
    {"tokenizer.ggml.eom_token_id", &VocabSpec::eom_id},
    {"tokenizer.ggml.unknown_token_id", &VocabSpec::unk_id},
    {"tokenizer.ggml.seperator_token_id", &VocabSpec::sep_id},  // sic: llama.cpp's spelling
    {"tokenizer.ggml.padding_token_id", &VocabSpec::pad_id},
    {"tokenizer.ggml.fim_pre_token_id", &VocabSpec::fim_pre_id},
    {"tokenizer.ggml.fim_suf_token_id", &VocabSpec::fim_suf_id},
    {"tokenizer.ggml.fim_mid_token_id", &VocabSpec::fim_mid_id},
    {"tokenizer.ggml.fim_rep_token_id", &VocabSpec::fim_rep_id},
    {"tokenizer.ggml.fim_sep_token_id", &VocabSpec::fim_sep_id},
};

struct BoolKey {
  std::string_view key;
  std::optional<bool> VocabSpec::*field;
};
constexpr BoolKey kBoolKeys[] = {
    {kKeyAddBos, &VocabSpec::add_bos},
    {kKeyAddEos, &VocabSpec::add_eos},
    {kKeyAddSpacePrefix, &VocabSpec::add_space_prefix},
};

Status WrongType(std::string_view key, const GgufValue& value, std::string_view expected) {
  std::string got(GgufTypeName(value.type()));
  if (const GgufArray* a = value.AsArray()) {
    got = fmt::format("array of {}", GgufTypeName(a->element_type));
  }
  return Corrupt("metadata key {}: expected {}, got {}", key, expected, got);
}

// Finds an array whose elements have one of `types`; nullptr + ok status when absent.
Result<const GgufArray*> FindArray(const GgufMetadata& md, std::string_view key,
                                   std::initializer_list<GgufType> types,
                                   std::string_view expected) {
  const GgufValue* v = md.Find(key);
  if (v == nullptr) return static_cast<const GgufArray*>(nullptr);
  const GgufArray* a = v->AsArray();
  if (a == nullptr) return WrongType(key, *v, expected);
  for (GgufType t : types) {
    if (a->element_type == t) return a;
  }
  return WrongType(key, *v, expected);
}

Status CheckLength(std::string_view key, const GgufArray& a, size_t n_tokens) {
  if (a.items.size() != n_tokens) {
    return Corrupt("metadata key {}: {} entries for {} tokens", key, a.items.size(), n_tokens);
  }
  return Status::Ok();
}

}  // namespace

void WriteVocabToMetadata(const VocabSpec& vocab, GgufMetadata& md) {
  md.Set(std::string(kKeyModel), GgufValue::String(vocab.model));
  if (!vocab.pre.empty()) md.Set(std::string(kKeyPre), GgufValue::String(vocab.pre));
  if (!vocab.tokens.empty()) md.Set(std::string(kKeyTokens), GgufValue::StringArray(vocab.tokens));
  if (!vocab.scores.empty()) md.Set(std::string(kKeyScores), GgufValue::Float32Array(vocab.scores));
  if (!vocab.token_types.empty()) {
    md.Set(std::string(kKeyTokenType), GgufValue::Int32Array(vocab.token_types));
  }
  if (!vocab.merges.empty()) md.Set(std::string(kKeyMerges), GgufValue::StringArray(vocab.merges));
  for (const IdKey& k : kIdKeys) {
    if (const auto& id = vocab.*k.field) md.Set(std::string(k.key), GgufValue::Uint32(*id));
  }
  for (const BoolKey& k : kBoolKeys) {
    if (const auto& b = vocab.*k.field) md.Set(std::string(k.key), GgufValue::Bool(*b));
  }
  if (!vocab.chat_template.empty()) {
    md.Set(std::string(kKeyChatTemplate), GgufValue::String(vocab.chat_template));
  }
}

Result<VocabSpec> ReadVocabFromMetadata(const GgufMetadata& md) {
  VocabSpec vocab;
  const GgufValue* model = md.Find(kKeyModel);
  if (model == nullptr) return NotFound("metadata key {} is missing (no tokenizer)", kKeyModel);
  if (model->AsString() == nullptr) return WrongType(kKeyModel, *model, "string");
  vocab.model = *model->AsString();
  if (const GgufValue* pre = md.Find(kKeyPre)) {
    if (pre->AsString() == nullptr) return WrongType(kKeyPre, *pre, "string");
    vocab.pre = *pre->AsString();
  }

  const GgufArray* tokens =
      MT_TRY(FindArray(md, kKeyTokens, {GgufType::kString}, "array of string"));
  if (tokens == nullptr) return NotFound("metadata key {} is missing (no vocabulary)", kKeyTokens);
  const size_t n = tokens->items.size();
  vocab.tokens.reserve(n);
  for (const GgufValue& v : tokens->items) {
    if (v.AsString() == nullptr) return WrongType(kKeyTokens, v, "string elements");
    vocab.tokens.push_back(*v.AsString());
  }

  const GgufArray* types =
      MT_TRY(FindArray(md, kKeyTokenType, {GgufType::kInt32}, "array of int32"));
  if (types != nullptr) {
    MT_RETURN_IF_ERROR(CheckLength(kKeyTokenType, *types, n));
    vocab.token_types.reserve(n);
    for (const GgufValue& v : types->items) {
      if (!v.AsInt().has_value()) return WrongType(kKeyTokenType, v, "int32 elements");
      vocab.token_types.push_back(static_cast<int32_t>(*v.AsInt()));
    }
  } else {
    vocab.token_types.assign(n, static_cast<int32_t>(TokenType::kNormal));
  }

  const GgufArray* scores = MT_TRY(FindArray(md, kKeyScores, {GgufType::kFloat32, GgufType::kInt32},
                                             "array of float32 or int32"));
  if (scores != nullptr) {
    MT_RETURN_IF_ERROR(CheckLength(kKeyScores, *scores, n));
    vocab.scores.reserve(n);
    for (const GgufValue& v : scores->items) {
      if (!v.AsDouble().has_value()) return WrongType(kKeyScores, v, "numeric elements");
      vocab.scores.push_back(static_cast<float>(*v.AsDouble()));
    }
  }

  const GgufArray* merges =
      MT_TRY(FindArray(md, kKeyMerges, {GgufType::kString}, "array of string"));
  if (merges != nullptr) {
    vocab.merges.reserve(merges->items.size());
    for (const GgufValue& v : merges->items) {
      if (v.AsString() == nullptr) return WrongType(kKeyMerges, v, "string elements");
      vocab.merges.push_back(*v.AsString());
    }
  }

  for (const IdKey& k : kIdKeys) {
    const GgufValue* v = md.Find(k.key);
    if (v == nullptr) continue;
    const std::optional<uint64_t> id = v->AsUint();
    if (!id.has_value()) return WrongType(k.key, *v, "unsigned integer");
    if (*id < n) vocab.*k.field = static_cast<uint32_t>(*id);
  }
  for (const BoolKey& k : kBoolKeys) {
    const GgufValue* v = md.Find(k.key);
    if (v == nullptr) continue;
    if (!v->AsBool().has_value()) return WrongType(k.key, *v, "bool");
    vocab.*k.field = *v->AsBool();
  }
  if (const GgufValue* t = md.Find(kKeyChatTemplate)) {
    if (t->AsString() == nullptr) return WrongType(kKeyChatTemplate, *t, "string");
    vocab.chat_template = *t->AsString();
  }
  return vocab;
}

std::optional<uint32_t> FindTokenId(const VocabSpec& vocab, std::string_view text) {
  for (size_t i = 0; i < vocab.tokens.size(); ++i) {
    if (vocab.tokens[i] == text) return static_cast<uint32_t>(i);
  }
  return std::nullopt;
}

}  // namespace mt
