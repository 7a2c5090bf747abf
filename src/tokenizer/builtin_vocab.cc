// Built-in vocabularies for synthetic models: BPE merges learned deterministically from the
// embedded corpus (builtin_corpus.cc).
//
// Training: the corpus is split into words by a fixed, simple rule (below; it does not
// depend on the Unicode tables of any library, so the result never changes with library
// versions), then the most frequent adjacent pair of symbols is merged repeatedly, ties
// broken by the smaller (left id, right id), until no pair occurs twice or the vocabulary
// is full.
#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/check.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocab_spec.h"

namespace mt {
namespace internal {
std::string_view BuiltinCorpus();
}  // namespace internal

namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581 "▁"

enum class CharClass { kLetter, kDigit, kSpace, kNewline, kOther };

// ASCII letters and every non-ASCII code point except a few spaces count as letters:
// good enough to keep merges inside words, and independent of Unicode tables.
CharClass Classify(char32_t c) {
  if (c == '\n' || c == '\r') return CharClass::kNewline;
  if (c == ' ' || c == '\t' || c == 0x3000 || c == 0xA0) return CharClass::kSpace;
  if (c >= '0' && c <= '9') return CharClass::kDigit;
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80) return CharClass::kLetter;
  return CharClass::kOther;
}

struct CodePoint {
  char32_t cp;
  std::string text;  // its UTF-8 bytes
};

std::vector<CodePoint> Decode(std::string_view text) {
  std::vector<CodePoint> out;
  for (size_t pos = 0; pos < text.size();) {
    size_t len = utf8::ValidSequenceLength(text, pos);
    MT_CHECK(len > 0);  // the corpus is valid UTF-8
    out.push_back({utf8::DecodeAt(text, pos, len), std::string(text.substr(pos, len))});
    pos += len;
  }
  return out;
}

// Splits into words: an optional single leading space plus a run of one class (letters,
// digits, other), or a run of spaces, or a run of newlines. With `spm`, newlines and tabs
// are dropped (SentencePiece pieces never hold them) and spaces become "▁".
std::map<std::string, int64_t> SplitWords(std::string_view corpus, bool spm) {
  const std::vector<CodePoint> cps = Decode(corpus);
  std::map<std::string, int64_t> words;
  size_t i = 0;
  while (i < cps.size()) {
    std::string word;
    CharClass cls = Classify(cps[i].cp);
    if (cps[i].cp == ' ' && i + 1 < cps.size()) {
      const CharClass next = Classify(cps[i + 1].cp);
      if (next != CharClass::kSpace && next != CharClass::kNewline) {
        word = spm ? std::string(kSpmSpace) : " ";
        ++i;
        cls = next;
      }
    }
    while (i < cps.size() && Classify(cps[i].cp) == cls) {
      if (spm && cps[i].cp == ' ') {
        word += kSpmSpace;
      } else if (!spm || (cls != CharClass::kNewline && cps[i].cp != '\t')) {
        word += cps[i].text;
      }
      ++i;
      if (cls == CharClass::kSpace && i + 1 < cps.size() && cps[i].cp == ' ' &&
          Classify(cps[i + 1].cp) != CharClass::kSpace &&
          Classify(cps[i + 1].cp) != CharClass::kNewline) {
        break;  // leave the last space to prefix the next word
      }
    }
    if (!word.empty()) words[word] += 1;
  }
  return words;
}

struct Trainer {
  std::vector<std::string> symbols;  // symbol id -> text
  std::map<std::string, int32_t> symbol_by_text;
  std::vector<std::pair<std::vector<int32_t>, int64_t>> words;  // symbol ids, count
  std::vector<std::string> merges;                              // "left right", in merge order
  std::vector<int32_t> merged_ids;  // the symbol each merge produced (new ones only)

  int32_t Intern(const std::string& text) {
    auto [it, inserted] = symbol_by_text.emplace(text, static_cast<int32_t>(symbols.size()));
    if (inserted) symbols.push_back(text);
    return it->second;
  }

  // Learns up to `max_new` new symbols. Pair counts are kept incrementally: a merge only
  // recounts the words that contain the merged pair.
  void Train(size_t max_new) {
    auto key = [](int32_t a, int32_t b) {
      return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b);
    };
    std::unordered_map<uint64_t, int64_t> counts;
    auto count_word = [&](const std::vector<int32_t>& w, int64_t n) {
      for (size_t k = 0; k + 1 < w.size(); ++k) counts[key(w[k], w[k + 1])] += n;
    };
    for (const auto& [w, n] : words) count_word(w, n);
    while (merged_ids.size() < max_new) {
      uint64_t best = 0;
      int64_t best_count = 1;
      for (const auto& [p, n] : counts) {
        if (n > best_count || (n == best_count && n > 1 && p < best)) {
          best = p;
          best_count = n;
        }
      }
      if (best_count < 2) break;  // no pair occurs twice
      const int32_t left = static_cast<int32_t>(best >> 32);
      const int32_t right = static_cast<int32_t>(best & 0xFFFFFFFFu);
      const std::string text = symbols[left] + symbols[right];
      const size_t before = symbols.size();
      const int32_t merged = Intern(text);
      merges.push_back(symbols[left] + " " + symbols[right]);
      if (symbols.size() > before) merged_ids.push_back(merged);
      for (auto& [w, n] : words) {
        bool has = false;
        for (size_t k = 0; k + 1 < w.size() && !has; ++k) has = w[k] == left && w[k + 1] == right;
        if (!has) continue;
        count_word(w, -n);
        std::vector<int32_t> out;
        out.reserve(w.size());
        for (size_t k = 0; k < w.size(); ++k) {
          if (k + 1 < w.size() && w[k] == left && w[k + 1] == right) {
            out.push_back(merged);
            ++k;
          } else {
            out.push_back(w[k]);
          }
        }
        w = std::move(out);
        count_word(w, n);
      }
      counts.erase(best);
    }
  }
};

// Every token text must be unique: llama.cpp's loader asserts it.
void CheckUnique(const VocabSpec& vocab) {
  std::unordered_map<std::string_view, size_t> seen;
  for (size_t i = 0; i < vocab.tokens.size(); ++i) {
    MT_CHECK_MSG(seen.emplace(vocab.tokens[i], i).second,
                 "duplicate token text in a built-in vocabulary");
  }
}

void PadTo(VocabSpec& vocab, uint32_t n_vocab, bool with_scores) {
  for (uint32_t i = static_cast<uint32_t>(vocab.tokens.size()); i < n_vocab; ++i) {
    vocab.tokens.push_back(fmt::format("[PAD{}]", i));
    vocab.token_types.push_back(static_cast<int32_t>(TokenType::kUnused));
    if (with_scores) vocab.scores.push_back(-10000.0f);  // the converter's score for padding
  }
}

}  // namespace

VocabSpec BuiltinBpeVocab(uint32_t n_vocab, const std::string& pre,
                          const std::vector<std::string>& specials) {
  MT_CHECK_MSG(n_vocab >= 256 + specials.size(), "vocabulary too small for bytes and specials");
  Trainer t;
  for (int b = 0; b < 256; ++b)
    t.Intern(utf8::Encode(utf8::ByteToUnicode(static_cast<uint8_t>(b))));
  for (const auto& [word, count] : SplitWords(internal::BuiltinCorpus(), /*spm=*/false)) {
    std::vector<int32_t> ids;
    for (char c : word) ids.push_back(static_cast<uint8_t>(c));  // byte b is symbol b
    t.words.push_back({std::move(ids), count});
  }
  t.Train(n_vocab - 256 - specials.size());

  VocabSpec vocab;
  vocab.model = "gpt2";
  vocab.pre = pre;
  vocab.tokens = t.symbols;
  vocab.token_types.assign(vocab.tokens.size(), static_cast<int32_t>(TokenType::kNormal));
  vocab.merges = t.merges;
  for (const std::string& s : specials) {
    MT_CHECK_MSG(t.symbol_by_text.count(s) == 0, "special token collides with a learned token");
    vocab.tokens.push_back(s);
    vocab.token_types.push_back(static_cast<int32_t>(TokenType::kControl));
  }
  PadTo(vocab, n_vocab, /*with_scores=*/false);
  CheckUnique(vocab);
  return vocab;
}

VocabSpec BuiltinSpmVocab(uint32_t n_vocab) {
  constexpr uint32_t kFixed = 3 + 256;  // <unk> <s> </s> and the byte tokens
  MT_CHECK_MSG(n_vocab >= kFixed, "vocabulary too small for the SentencePiece byte tokens");
  const std::map<std::string, int64_t> words = SplitWords(internal::BuiltinCorpus(), /*spm=*/true);

  // Characters, most frequent first (ties by code point order of their UTF-8 bytes).
  std::map<std::string, int64_t> char_counts;
  for (const auto& [word, count] : words) {
    for (const CodePoint& c : Decode(word)) char_counts[c.text] += count;
  }
  std::vector<std::pair<std::string, int64_t>> chars(char_counts.begin(), char_counts.end());
  std::stable_sort(chars.begin(), chars.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  if (chars.size() > n_vocab - kFixed) chars.resize(n_vocab - kFixed);

  Trainer t;
  for (const auto& c : chars) t.Intern(c.first);
  for (const auto& [word, count] : words) {
    std::vector<int32_t> ids;
    for (const CodePoint& c : Decode(word)) {
      auto it = t.symbol_by_text.find(c.text);
      if (it == t.symbol_by_text.end()) {  // a dropped rare character ends the word's use
        ids.clear();
        break;
      }
      ids.push_back(it->second);
    }
    if (!ids.empty()) t.words.push_back({std::move(ids), count});
  }
  t.Train(n_vocab - kFixed - chars.size());

  VocabSpec vocab;
  vocab.model = "llama";
  vocab.pre = "default";
  auto add = [&](std::string text, float score, TokenType type) {
    vocab.tokens.push_back(std::move(text));
    vocab.scores.push_back(score);
    vocab.token_types.push_back(static_cast<int32_t>(type));
  };
  add("<unk>", 0.0f, TokenType::kUnknown);
  add("<s>", 0.0f, TokenType::kControl);
  add("</s>", 0.0f, TokenType::kControl);
  for (int b = 0; b < 256; ++b) add(fmt::format("<0x{:02X}>", b), 0.0f, TokenType::kByte);
  // Merged pieces score by merge order (earlier = higher), then single characters below
  // them, as in a SentencePiece BPE model.
  float score = 0.0f;
  for (int32_t id : t.merged_ids) add(t.symbols[id], score--, TokenType::kNormal);
  for (const auto& c : chars) add(c.first, score--, TokenType::kNormal);
  PadTo(vocab, n_vocab, /*with_scores=*/true);
  vocab.unk_id = 0;
  vocab.bos_id = 1;
  vocab.eos_id = 2;
  vocab.add_bos = true;
  vocab.add_eos = false;
  CheckUnique(vocab);
  return vocab;
}

}  // namespace mt
