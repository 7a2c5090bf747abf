// Import of a Hugging Face tokenizer.json (+ tokenizer_config.json, config.json,
// chat_template.jinja beside it) into a VocabSpec, following what llama.cpp's converter
// (convert_hf_to_gguf.py get_vocab_base / _set_vocab_gpt2 and gguf-py's SpecialVocab) writes.
//
// Not reproduced: the converter's decode(encode(token)) re-normalization of added tokens
// whose "normalized" flag is false (an identity for the tokens of known models), the
// normalizer lowercase/strip_accents keys (BERT-style models only), and EOT/EOM juggling
// for TemplateProcessing post-processors whose last token differs from eos_token.
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/file_io.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocab_spec.h"

namespace mt {
namespace {

using json = nlohmann::json;

// Far above any real vocabulary (the largest are a few hundred thousand tokens); a larger
// id is a corrupt file, not a reason to allocate gigabytes.
constexpr uint32_t kMaxVocab = 1u << 24;

Result<json> ParseJson(std::string_view text, std::string_view path) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    // e.byte is the 1-based position of the error; keep the message to one line.
    std::string what = e.what();
    const size_t colon = what.find("syntax error");
    return Corrupt("{}: bad JSON at byte {}: {}", path, e.byte,
                   colon == std::string::npos ? what : what.substr(colon));
  } catch (const json::exception& e) {  // e.g. a number too large to represent
    return Corrupt("{}: bad JSON: {}", path, e.what());
  }
}

Result<json> ReadJson(const std::string& path) {
  std::string text = MT_TRY(ReadWholeFile(path));
  return ParseJson(text, path);
}

// convert_hf_to_gguf.py does_token_look_special: some models leave control-like added
// tokens unmarked as special.
bool LooksSpecial(const std::string& t) {
  auto starts = [&](std::string_view p) {
    return t.size() >= p.size() && t.compare(0, p.size(), p) == 0;
  };
  auto ends = [&](std::string_view s) {
    return t.size() >= s.size() && t.compare(t.size() - s.size(), s.size(), s) == 0;
  };
  if (t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]") return true;
  if (starts("<|") && ends("|>")) return true;
  if (starts("<\xEF\xBD\x9C") && ends("\xEF\xBD\x9C>")) return true;  // "<｜" ... "｜>"
  return starts("<unused") && ends(">");
}

std::string ReplaceAll(std::string s, std::string_view from, std::string_view to) {
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size()) {
    s.replace(pos, from.size(), to);
  }
  return s;
}

struct AddedToken {
  uint32_t id;
  std::string content;
  bool special;
};

// The special-token part of SpecialVocab: ids by content from tokenizer_config.json (looked
// up among added_tokens), then from config.json for types not yet set.
struct SpecialIds {
  std::map<std::string, uint32_t> ids;  // "bos", "eos", ... -> id
  std::map<std::string, bool> add;      // "bos", "eos" -> add_*_token
  std::string chat_template;
};

constexpr const char* kSpecialTypes[] = {"bos", "eos", "unk", "sep", "pad", "cls", "mask", "eot"};

void SetSpecial(SpecialIds& s, const std::string& type, const json& id) {
  if (!id.is_number_integer() || id.get<int64_t>() < 0) return;
  s.ids.emplace(type, static_cast<uint32_t>(id.get<int64_t>()));  // first setter wins
}

Status ReadTokenizerConfig(const std::optional<std::filesystem::path>& config_dir,
                           const json& tokenizer, const std::vector<AddedToken>& added,
                           SpecialIds& out) {
  const std::filesystem::path dir = config_dir.value_or(".");
  const std::filesystem::path config_path = dir / "tokenizer_config.json";
  json config;
  if (config_dir && std::filesystem::is_regular_file(config_path)) {
    json parsed = MT_TRY(ReadJson(config_path.string()));
    if (!parsed.is_object()) return Corrupt("{}: expected a JSON object", config_path.string());
    config = std::move(parsed);
  }
  auto token_text = [](const json& entry) -> std::optional<std::string> {
    if (entry.is_string()) return entry.get<std::string>();
    if (entry.is_object() && entry.contains("content") && entry["content"].is_string()) {
      return entry["content"].get<std::string>();
    }
    return std::nullopt;
  };
  auto config_text = [&](const char* key) -> std::optional<std::string> {
    return config.is_object() && config.contains(key) ? token_text(config[key]) : std::nullopt;
  };
  std::optional<std::string> bos = config_text("bos_token"), eos = config_text("eos_token");
  const std::optional<std::string> cls = config_text("cls_token"), sep = config_text("sep_token");
  std::optional<std::string> eot;  // set when the post-processor's last token replaces eos
  if ((!bos || bos->empty()) && cls && config.is_object()) bos = cls;
  if ((!eos || eos->empty()) && sep && config.is_object()) eos = sep;

  // Post-processor: whether BOS/EOS are added (crude, like SpecialVocab).
  if (tokenizer.contains("post_processor") && tokenizer["post_processor"].is_object()) {
    const json& pp = tokenizer["post_processor"];
    std::vector<json> procs;
    if (pp.contains("processors") && pp["processors"].is_array()) {
      for (const json& p : pp["processors"]) procs.push_back(p);
    } else {
      procs.push_back(pp);
    }
    for (const json& p : procs) {
      if (!p.is_object() || !p.contains("type")) continue;
      if (p["type"] == "RobertaProcessing") {
        out.add["bos"] = true;
        out.add["eos"] = true;
      } else if (p["type"] == "TemplateProcessing" && p.contains("single") &&
                 p["single"].is_array() && p["single"].size() > 1) {
        const json& single = p["single"];
        auto special_id = [](const json& item) -> std::optional<std::string> {
          if (item.is_object() && item.contains("SpecialToken") &&
              item["SpecialToken"].is_object() && item["SpecialToken"].contains("id") &&
              item["SpecialToken"]["id"].is_string()) {
            return item["SpecialToken"]["id"].get<std::string>();
          }
          return std::nullopt;
        };
        if (std::optional<std::string> first = special_id(single.front())) {
          if (!config.is_object() || !bos) bos = *first;
          out.add["bos"] = (*first == bos || *first == cls);
        }
        if (std::optional<std::string> last = special_id(single.back())) {
          // The template's last token becomes eos; a different configured eos becomes eot.
          if (config.is_object() && eos && *eos != *last && !eot) eot = eos;
          eos = *last;
          out.add["eos"] = true;
        }
      }
    }
  }
  if (!config.is_object()) return Status::Ok();

  // Chat template: tokenizer_config.json, else chat_template.jinja, else chat_template.json.
  if (config.contains("chat_template")) {
    const json& t = config["chat_template"];
    if (t.is_string()) {
      out.chat_template = t.get<std::string>();
    } else if (t.is_array()) {  // named templates: keep "default"
      for (const json& e : t) {
        if (e.is_object() && e.value("name", "") == "default" && e.contains("template") &&
            e["template"].is_string()) {
          out.chat_template = e["template"].get<std::string>();
        }
      }
    }
  } else if (std::filesystem::is_regular_file(dir / "chat_template.jinja")) {
    out.chat_template = MT_TRY(ReadWholeFile((dir / "chat_template.jinja").string()));
  } else if (std::filesystem::is_regular_file(dir / "chat_template.json")) {
    json t = MT_TRY(ReadJson((dir / "chat_template.json").string()));
    if (t.is_object() && t.contains("chat_template") && t["chat_template"].is_string()) {
      out.chat_template = t["chat_template"].get<std::string>();
    }
  }

  for (const char* type : kSpecialTypes) {
    const std::string add_key = fmt::format("add_{}_token", type);
    if (config.contains(add_key) && config[add_key].is_boolean()) {
      out.add[type] = config[add_key].get<bool>();
    }
    std::optional<std::string> text = config_text(fmt::format("{}_token", type).c_str());
    if (std::string_view(type) == "bos") text = bos;
    if (std::string_view(type) == "eos") text = eos;
    if (std::string_view(type) == "eot") text = eot;
    if (!text) continue;
    for (const AddedToken& a : added) {
      if (a.content == *text) {
        SetSpecial(out, type, a.id);
        break;
      }
    }
  }
  return Status::Ok();
}

Status ReadModelConfig(const std::filesystem::path& dir, SpecialIds& out) {
  const std::filesystem::path path = dir / "config.json";
  if (!std::filesystem::is_regular_file(path)) return Status::Ok();
  json config = MT_TRY(ReadJson(path.string()));
  if (!config.is_object()) return Corrupt("{}: expected a JSON object", path.string());
  for (const char* type : kSpecialTypes) {
    const std::string key = fmt::format("{}_token_id", type);
    if (config.contains(key)) {
      SetSpecial(out, type, config[key]);
    } else if (config.contains("text_config") && config["text_config"].is_object() &&
               config["text_config"].contains(key)) {
      SetSpecial(out, type, config["text_config"][key]);
    }
  }
  return Status::Ok();
}

// The common part: `root` is the parsed tokenizer.json named `path` in errors; `dir`, when
// set, is where tokenizer_config.json and config.json may be.
Result<VocabSpec> Import(const json& root, const std::string& path,
                         const std::optional<std::filesystem::path>& dir, const std::string& pre,
                         uint32_t n_vocab) {
  if (!root.is_object()) return Corrupt("{}: expected a JSON object at the top level", path);
  if (!root.contains("model") || !root["model"].is_object()) {
    return Corrupt("{}: missing object 'model'", path);
  }
  const json& model = root["model"];
  if (model.contains("type") && model["type"] != "BPE") {
    return Unimplemented("{}: model.type {} is not supported (only BPE)", path,
                         model["type"].dump());
  }
  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    return Corrupt("{}: missing object 'model.vocab'", path);
  }

  // id -> text: the model vocab, then added tokens (which may repeat a vocab entry).
  std::map<uint32_t, std::string> by_id;
  for (const auto& [text, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      return Corrupt("{}: model.vocab[{}]: id {} is not a non-negative integer", path,
                     json(text).dump(), id.dump());
    }
    const auto [it, inserted] = by_id.emplace(static_cast<uint32_t>(id.get<int64_t>()), text);
    if (!inserted) {
      return Corrupt("{}: model.vocab: id {} is used by both {} and {}", path, it->first,
                     json(it->second).dump(), json(text).dump());
    }
  }
  std::vector<AddedToken> added;
  std::map<std::string, size_t> added_by_text;  // content -> index in `added`
  if (root.contains("added_tokens")) {
    if (!root["added_tokens"].is_array()) {
      return Corrupt("{}: 'added_tokens' is not an array", path);
    }
    for (size_t i = 0; i < root["added_tokens"].size(); ++i) {
      const json& a = root["added_tokens"][i];
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
          a["id"].get<int64_t>() < 0 || a["id"].get<int64_t>() > INT32_MAX ||
          !a.contains("content") || !a["content"].is_string()) {
        return Corrupt("{}: added_tokens[{}]: needs an integer 'id' and a string 'content'", path,
                       i);
      }
      AddedToken t{static_cast<uint32_t>(a["id"].get<int64_t>()), a["content"].get<std::string>(),
                   a.contains("special") && a["special"].is_boolean() && a["special"].get<bool>()};
      by_id[t.id] = t.content;
      added_by_text[t.content] = added.size();
      added.push_back(std::move(t));
    }
  }
  if (by_id.empty()) return Corrupt("{}: model.vocab is empty", path);
  const uint32_t max_id = by_id.rbegin()->first;
  if (n_vocab == 0) n_vocab = max_id + 1;
  if (n_vocab > kMaxVocab) {
    return OutOfRange("{}: vocabulary size {} is over the limit of {}", path, n_vocab, kMaxVocab);
  }
  if (max_id >= n_vocab) {
    return OutOfRange("{}: token id {} does not fit the vocabulary size {}", path, max_id, n_vocab);
  }

  VocabSpec vocab;
  vocab.model = "gpt2";
  vocab.pre = pre;
  vocab.tokens.resize(n_vocab);
  vocab.token_types.resize(n_vocab);
  for (uint32_t i = 0; i < n_vocab; ++i) {
    auto it = by_id.find(i);
    if (it == by_id.end()) {
      vocab.tokens[i] = fmt::format("[PAD{}]", i);
      vocab.token_types[i] = static_cast<int32_t>(TokenType::kUnused);
      continue;
    }
    std::string text = it->second;
    TokenType type = TokenType::kNormal;
    if (auto a = added_by_text.find(text); a != added_by_text.end()) {
      if (added[a->second].special || LooksSpecial(text)) {
        type = TokenType::kControl;
      } else {
        text = ReplaceAll(std::move(text), "\xE2\x96\x81", " ");  // pre-normalize "▁" spaces
        type = TokenType::kUserDefined;
      }
    }
    vocab.tokens[i] = std::move(text);
    vocab.token_types[i] = static_cast<int32_t>(type);
  }

  // Merges: "a b" strings, or ["a", "b"] pairs (transformers >= 4.45), whose spaces the
  // converter writes as U+0120 so that the first space still separates the pair.
  if (model.contains("merges") && !model["merges"].is_null()) {
    const json& merges = model["merges"];
    if (!merges.is_array()) return Corrupt("{}: model.merges is not an array", path);
    vocab.merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      const json& m = merges[i];
      if (m.is_string()) {
        vocab.merges.push_back(m.get<std::string>());
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        const std::string space = utf8::Encode(U'\u0120');
        vocab.merges.push_back(ReplaceAll(m[0].get<std::string>(), " ", space) + " " +
                               ReplaceAll(m[1].get<std::string>(), " ", space));
      } else {
        return Corrupt("{}: model.merges[{}]: expected \"a b\" or [\"a\", \"b\"]", path, i);
      }
    }
  }

  SpecialIds specials;
  MT_RETURN_IF_ERROR(ReadTokenizerConfig(dir, root, added, specials));
  if (dir) MT_RETURN_IF_ERROR(ReadModelConfig(*dir, specials));
  auto id_of = [&](const char* type) -> std::optional<uint32_t> {
    auto it = specials.ids.find(type);
    if (it == specials.ids.end() || it->second >= n_vocab) return std::nullopt;
    return it->second;
  };
  vocab.bos_id = id_of("bos");
  vocab.eos_id = id_of("eos");
  vocab.eot_id = id_of("eot");
  vocab.unk_id = id_of("unk");
  vocab.sep_id = id_of("sep");
  vocab.pad_id = id_of("pad");
  if (auto it = specials.add.find("bos"); it != specials.add.end()) vocab.add_bos = it->second;
  if (auto it = specials.add.find("eos"); it != specials.add.end()) vocab.add_eos = it->second;
  vocab.chat_template = std::move(specials.chat_template);
  return vocab;
}

}  // namespace

Result<VocabSpec> ImportHfTokenizer(const std::string& path, const std::string& pre,
                                    uint32_t n_vocab) {
  json parsed = MT_TRY(ReadJson(path));
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  try {
    return Import(parsed, path, dir.empty() ? std::filesystem::path(".") : dir, pre, n_vocab);
  } catch (const json::exception& e) {  // a value of an unexpected type the checks missed
    return Corrupt("{}: unexpected JSON structure: {}", path, e.what());
  }
}

Result<VocabSpec> ImportHfTokenizerJson(std::string_view text, const std::string& name,
                                        const std::string& pre, uint32_t n_vocab) {
  json parsed = MT_TRY(ParseJson(text, name));
  try {
    return Import(parsed, name, std::nullopt, pre, n_vocab);
  } catch (const json::exception& e) {
    return Corrupt("{}: unexpected JSON structure: {}", name, e.what());
  }
}

}  // namespace mt
