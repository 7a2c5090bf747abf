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
//   GPT-4o / gpt-oss (o200k_base, o200k_harmony; openai/gpt-oss-20b's tokenizer.json, tiktoken's
//   pattern): a word is an optional non-letter, then upper-case letters followed by at least
//   one lower-case letter, or upper-case letters alone; Lm, Lo and marks \p{M} count as both
//   cases. So a word splits where lower case turns to upper ("camelCase" -> "camel" "Case";
//   "HTTPServer" stays whole), and a contraction joins the word before it (case-insensitive).
//   Digits in runs of 1 to 3; punctuation takes trailing newlines and slashes. llama.cpp
//   (LLAMA_VOCAB_PRE_TYPE_GPT4O) matches a rewrite of this regex over its collapsed
//   categories, where marks are not letters and non-ASCII letters have no case: there
//   "\u0928\u092e\u0938\u094d\u0924\u0947" (Hindi) is "\u0928\u092e\u0938" "\u094d\u0924"
//   "\u0947" and "\u043c\u0438\u0440\u041c\u0418\u0420" one piece; here the first is one
//   piece and the second two, as tokenizer.json and tiktoken split them.
constexpr std::string_view kGpt4o =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+)"
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*)"
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
//   DeepSeek-V3/R1 (deepseek-ai/DeepSeek-V3): three passes. Digits in runs of 1 to 3, then
//   runs of CJK ideographs (U+4E00..U+9FA5) and kana (U+3040..U+30FF), then a GPT-4-like
//   split where one ASCII punctuation mark joins the ASCII word after it ("(x", ".md") and
//   marks \p{M} stay with their letters.
constexpr std::string_view kDeepseek3Digits = R"(\p{N}{1,3})";
constexpr std::string_view kDeepseek3Cjk =
    R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)";
constexpr std::string_view kDeepseek3 =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+)"
    R"(| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
//   DeepSeek LLM (deepseek-ai/deepseek-llm-7b-base), six passes: newlines alone; an optional
//   space and a run of letters of the alphabetic scripts (Latin, Greek, Cyrillic, Armenian,
//   Georgian, Cherokee, Glagolitic, Coptic, Deseret, Osage, ...: an explicit list of ranges);
//   an optional space and a run of ASCII, fullwidth and CJK punctuation and quotes; trailing
//   whitespace; runs of CJK ideographs, Hangul and the scripts from U+0800 to U+4E00; digit
//   runs. The ranges are written as code points because several (U+1F7D, U+1FBE, U+1FD3,
//   U+1FDB, U+2126, U+212A) have NFC forms that an editor could silently substitute.
//   These follow the tokenizer.json regexes as Hugging Face matches them. llama.cpp turns
//   non-ASCII whitespace into U+000B before matching regexes written with non-ASCII
//   characters, so there the explicit ranges miss the whitespace inside them (U+3000 in the
//   punctuation class; U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000 in
//   U+0800..U+4E00): e.g. "中\u2000文" is one piece here and three in llama.cpp.
constexpr std::string_view kDeepseekLlmNewline = R"([\r\n])";
constexpr std::string_view kDeepseekLlmLetters =
    R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293})"
    R"(\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A})"
    R"(\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556})"
    R"(\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF})"
    R"(\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D})"
    R"(\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D})"
    R"(\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4})"
    R"(\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4})"
    R"(\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124})"
    R"(\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F})"
    R"(\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})"
    R"(\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F})"
    R"(\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17})"
    R"(\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3})"
    R"(\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF})"
    R"(\x{1E900}-\x{1E943}]+)";
constexpr std::string_view kDeepseekLlmPunct =
    R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)";
constexpr std::string_view kDeepseekLlmTrailingSpace = R"(\s+$)";
constexpr std::string_view kDeepseekLlmCjk =
    R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";
constexpr std::string_view kDeepseekLlmDigits = R"(\p{N}+)";
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
    p.add_bos_ = true;
  } else if (name == "glm4" || name == "chatglm-bpe") {
    patterns = {kLlama3};
    p.no_bos_ = true;
  } else if (in(kGpt2Names)) {
    patterns = {kGpt2};
  } else if (name == "gpt-4o") {
    patterns = {kGpt4o};
    // tokenizer.json's model.ignore_merges, and tiktoken looks a piece up whole before
    // merging. llama.cpp keeps the merges for gpt-4o, which changes nothing here: the merges
    // build every o200k token that is one piece of this split.
    p.ignore_merges_ = true;
  } else if (name == "deepseek-v3") {
    patterns = {kDeepseek3Digits, kDeepseek3Cjk, kDeepseek3};
  } else if (name == "deepseek-llm") {
    patterns = {kDeepseekLlmNewline,       kDeepseekLlmLetters, kDeepseekLlmPunct,
                kDeepseekLlmTrailingSpace, kDeepseekLlmCjk,     kDeepseekLlmDigits};
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
    // DOLLAR_ENDONLY: "$" is the end of the piece only, as in llama.cpp's std::regex (PCRE2
    // would also match before a final newline; deepseek-llm's pieces never end in one anyway).
    regex->code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(expanded.data()), expanded.size(),
                      PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY,
                      &error, &offset, nullptr);
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
