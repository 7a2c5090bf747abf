#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>

#include "base/check.h"

namespace mt {
namespace {

// The regexes as the models' tokenizer.json files write them.
//   Qwen2/Qwen3 (tokenizer.json of Qwen/Qwen3-*): single digits.
constexpr std::string_view kQwen2 = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N})"
                                    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
//   Llama 3 (meta-llama/Meta-Llama-3-8B): digits in runs of 1 to 3.
constexpr std::string_view kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
//   GPT-2 (the ByteLevel pre-tokenizer's built-in regex; also GPT-NeoX/OLMo).
constexpr std::string_view kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
//   llama.cpp's default for BPE vocabularies without a known pre-tokenizer: four passes.
constexpr std::string_view kDefaultPunct = R"([\p{P}\$\+<=>\^~\|]+)";
constexpr std::string_view kDefaultDigits = R"(\p{N}+)";
constexpr std::string_view kDefaultThree = R"([0-9][0-9][0-9])";

// Oniguruma's Unicode \s: U+0009..U+000D, U+0085, and the separators Zs, Zl, Zp. (PCRE2's
// own \s under UCP would also take U+180E.)
constexpr std::string_view kSpaceItems = R"(\t\n\x0B\f\r\x{85}\p{Z})";

// Rewrites \s and \S into explicit classes with the Oniguruma meaning.
std::string ExpandSpace(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char n = pattern[i + 1];
      if (n == 's' || n == 'S') {
        MT_CHECK(!(in_class && n == 'S'));  // not used by any of the patterns above
        if (in_class) {
          out += kSpaceItems;
        } else {
          out += n == 's' ? "[" : "[^";
          out += kSpaceItems;
          out += "]";
        }
      } else {
        out += c;
        out += n;
      }
      ++i;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
    } else if (c == ']' && in_class) {
      in_class = false;
    }
    out += c;
  }
  return out;
}

}  // namespace

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

Result<PreTokenizer> PreTokenizer::ForName(std::string_view name) {
  static constexpr std::array<std::string_view, 3> kQwen2Names = {"qwen2", "deepseek-r1-qwen",
                                                                  "stablelm2"};
  static constexpr std::array<std::string_view, 5> kLlama3Names = {"llama-bpe", "llama3",
                                                                   "llama-v3", "dbrx", "smaug-bpe"};
  static constexpr std::array<std::string_view, 5> kGpt2Names = {"gpt-2", "olmo", "mpt", "phi-2",
                                                                 "jais"};
  auto in = [&](const auto& names) {
    for (std::string_view n : names) {
      if (n == name) return true;
    }
    return false;
  };
  PreTokenizer p;
  p.name_ = std::string(name);
  std::vector<std::string_view> patterns;
  if (in(kQwen2Names)) {
    patterns = {kQwen2};
    // Qwen2/Qwen3 tokenizer.json files have an NFC normalizer (not known for stablelm2).
    p.nfc_ = name != "stablelm2";
  } else if (in(kLlama3Names)) {
    patterns = {kLlama3};
    p.ignore_merges_ = true;
  } else if (in(kGpt2Names)) {
    patterns = {kGpt2};
  } else if (name.empty() || name == "default") {
    patterns = {kDefaultPunct, kGpt2, kDefaultDigits, kDefaultThree};
  } else {
    return Unimplemented("pre-tokenizer '{}' (tokenizer.ggml.pre) is not supported", name);
  }
  for (std::string_view pattern : patterns) {
    const std::string expanded = ExpandSpace(pattern);
    int error = 0;
    PCRE2_SIZE offset = 0;
    auto regex = std::make_unique<Regex>();
    regex->code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(expanded.data()), expanded.size(),
                      PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
    MT_CHECK_MSG(regex->code != nullptr, "built-in pre-tokenizer regex does not compile");
    pcre2_jit_compile(regex->code,
                      PCRE2_JIT_COMPLETE);  // optional: the interpreter is the fallback
    p.regexes_.push_back(std::move(regex));
  }
  return p;
}

Status PreTokenizer::Split(std::string_view text, std::vector<std::string_view>& pieces) const {
  std::vector<std::string_view> current = {text};
  std::vector<std::string_view> next;
  for (const auto& regex : regexes_) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(regex->code, nullptr);
    MT_CHECK(md != nullptr);
    next.clear();
    for (std::string_view piece : current) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t start = 0;    // where the next search begins
      size_t emitted = 0;  // end of the text already turned into pieces
      while (start < piece.size()) {
        int rc = pcre2_match(regex->code, subject, piece.size(), start, 0, md, nullptr);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
          rc = pcre2_match(regex->code, subject, piece.size(), start, PCRE2_NO_JIT, md, nullptr);
        }
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          pcre2_match_data_free(md);
          std::array<PCRE2_UCHAR, 256> message{};
          pcre2_get_error_message(rc, message.data(), message.size());
          return Status(StatusCode::kResourceExhausted,
                        fmt::format("pre-tokenizer {}: regex match failed at byte {}: {}", name_,
                                    start, reinterpret_cast<const char*>(message.data())));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const size_t begin = ov[0], end = ov[1];
        if (end == begin) {  // no pattern matches empty text; guard against looping anyway
          start = end + 1;
          continue;
        }
        if (begin > emitted) next.push_back(piece.substr(emitted, begin - emitted));
        next.push_back(piece.substr(begin, end - begin));
        emitted = start = end;
      }
      if (emitted < piece.size()) next.push_back(piece.substr(emitted));
    }
    pcre2_match_data_free(md);
    current.swap(next);
  }
  pieces.insert(pieces.end(), current.begin(), current.end());
  return Status::Ok();
}

}  // namespace mt
