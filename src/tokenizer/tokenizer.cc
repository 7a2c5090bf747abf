#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <queue>
#include <span>
#include <unordered_map>

#include "base/check.h"
#include "gguf/gguf.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace mt {
namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581 "▁"

// Texts llama.cpp's vocabulary loader treats as end of turn (for eot_id, in this order of
// preference) and as end of generation. Source text is UTF-8.
constexpr std::string_view kEotTexts[] = {
    "<|eot_id|>",        "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>",   "<EOT>",      "_<EOT>",  "[EOT]",         "<｜end▁of▁sentence｜>",
    "<end_of_utterance>"};
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~[",
    // FIM pad / repo / file-separator tokens, which llama.cpp also stops at.
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", "<|fim_repo|>", "<|repo_name|>",
    "<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>"};

// Texts llama.cpp's vocabulary loader takes as the fill-in-the-middle tokens when the ids are
// not in the metadata.
constexpr std::string_view kFimPrefixTexts[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
                                                "<PRE>", "\xE2\x96\x81<PRE>"};
constexpr std::string_view kFimSuffixTexts[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
                                                "<SUF>", "\xE2\x96\x81<SUF>"};
constexpr std::string_view kFimMiddleTexts[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
                                                "<MID>", "\xE2\x96\x81<MID>"};
constexpr std::string_view kFimRepoTexts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                              "<REPO>", "<reponame>"};
constexpr std::string_view kFimFileSepTexts[] = {"<|file_sep|>"};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TextMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// A special token as the input splitter sees it.
struct Special {
  std::string_view text;
  int32_t id;
  bool always;  // USER_DEFINED: split out even without parse_special
};

}  // namespace

struct Tokenizer::Impl {
  VocabSpec vocab;
  bool bpe = false;  // model "gpt2"; otherwise "llama" (SentencePiece)
  std::optional<PreTokenizer> pre;
  bool nfc = false;
  bool add_bos = false;
  bool add_space_prefix = false;
  std::optional<int32_t> bos, eos, eot, unk;
  std::optional<Tokenizer::Fim> fim;  // all three fill-in-the-middle tokens, or none
  TextMap token_to_id;
  std::vector<TokenType> types;     // (n_vocab) the file's types with llama.cpp's overrides
  std::vector<std::string> pieces;  // (n_vocab) decoded bytes of each token
  std::vector<bool> eog;            // (n_vocab)
  std::array<std::vector<Special>, 256> specials;  // by first byte, longest first

  // BPE: symbols are the byte-level strings that take part in merges; a symbol that is a
  // vocabulary token has its id in sym_token, others -1.
  std::vector<std::string> sym_text;
  std::vector<int32_t> sym_token;
  TextMap sym_by_text;
  std::array<int32_t, 256> byte_sym{};  // symbol of each byte's byte-level character
  struct Merge {
    int32_t rank;
    int32_t result;  // symbol
  };
  std::unordered_map<uint64_t, Merge> merges;  // (left symbol, right symbol) -> merge

  // SentencePiece: the token for each byte (<0xXX>, else the one-byte text), -1 if none.
  std::array<int32_t, 256> byte_token{};

  int32_t n() const { return static_cast<int32_t>(vocab.tokens.size()); }
  TokenType type(int32_t id) const { return types[id]; }
  std::optional<int32_t> Find(std::string_view text) const {
    auto it = token_to_id.find(text);
    if (it == token_to_id.end()) return std::nullopt;
    return it->second;
  }
  void AddSpecial(std::string_view text, int32_t id, bool always) {
    specials[static_cast<uint8_t>(text[0])].push_back({text, id, always});
  }
  int32_t Intern(std::string_view text) {
    auto it = sym_by_text.find(text);
    if (it != sym_by_text.end()) return it->second;
    const int32_t id = static_cast<int32_t>(sym_text.size());
    sym_text.emplace_back(text);
    const std::optional<int32_t> token = Find(text);
    sym_token.push_back(token.value_or(-1));
    sym_by_text.emplace(std::string(text), id);
    return id;
  }

  void EncodeBpeWord(std::string_view word, std::vector<int32_t>& out) const;
  void EncodeSpm(std::string_view text, std::vector<int32_t>& out) const;
  void PushUnknownBytes(std::string_view bytes, std::vector<int32_t>& out) const;
};

void Tokenizer::Impl::PushUnknownBytes(std::string_view bytes, std::vector<int32_t>& out) const {
  for (char c : bytes) {
    const uint8_t b = static_cast<uint8_t>(c);
    const int32_t t = bpe ? sym_token[byte_sym[b]] : byte_token[b];
    if (t >= 0) {
      out.push_back(t);
    } else if (unk) {
      out.push_back(*unk);
    }
  }
}

// Byte-level BPE of one pre-token: merge the adjacent pair of lowest rank (leftmost on
// ties) until no pair has a merge.
void Tokenizer::Impl::EncodeBpeWord(std::string_view word, std::vector<int32_t>& out) const {
  if (pre->ignore_merges()) {
    if (std::optional<int32_t> whole = Find(utf8::BytesToByteLevel(word))) {
      out.push_back(*whole);
      return;
    }
  }
  struct Node {
    int32_t sym;
    int32_t prev, next;  // indexes in `nodes`, -1 at the ends
  };
  std::vector<Node> nodes(word.size());
  for (size_t i = 0; i < word.size(); ++i) {
    nodes[i] = {byte_sym[static_cast<uint8_t>(word[i])], static_cast<int32_t>(i) - 1,
                i + 1 < word.size() ? static_cast<int32_t>(i + 1) : -1};
  }
  struct Candidate {
    int32_t rank, pos, left, right;  // pos: node index of the left symbol
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](int32_t pos) {
    if (pos < 0 || nodes[pos].next < 0) return;
    const int32_t l = nodes[pos].sym, r = nodes[nodes[pos].next].sym;
    auto it = merges.find(PairKey(l, r));
    if (it != merges.end()) queue.push({it->second.rank, pos, l, r});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(word.size()); ++i) consider(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Node& left = nodes[c.pos];
    if (left.sym != c.left || left.next < 0 || nodes[left.next].sym != c.right) continue;  // stale
    left.sym = merges.at(PairKey(c.left, c.right)).result;
    const int32_t gone = left.next;
    left.next = nodes[gone].next;
    if (left.next >= 0) nodes[left.next].prev = c.pos;
    nodes[gone].sym = -1;
    consider(left.prev);
    consider(c.pos);
  }
  for (int32_t i = word.empty() ? -1 : 0; i >= 0; i = nodes[i].next) {
    const int32_t token = sym_token[nodes[i].sym];
    if (token >= 0) {
      out.push_back(token);
      continue;
    }
    std::string bytes;  // a symbol outside the vocabulary: its bytes one by one
    utf8::ByteLevelToBytes(sym_text[nodes[i].sym], bytes);
    PushUnknownBytes(bytes, out);
  }
}

// SentencePiece (llama.cpp's algorithm): characters are merged into the adjacent pair
// whose concatenation is the vocabulary piece of highest score (leftmost on ties).
void Tokenizer::Impl::EncodeSpm(std::string_view text, std::vector<int32_t>& out) const {
  struct Symbol {
    size_t offset, length;  // bytes of `text`; length 0 once merged into its left neighbour
    int32_t prev, next;
  };
  std::vector<Symbol> syms;
  for (size_t pos = 0; pos < text.size();) {
    const size_t len = std::max<size_t>(1, utf8::ValidSequenceLength(text, pos));
    const int32_t index = static_cast<int32_t>(syms.size());
    syms.push_back({pos, len, index - 1, pos + len < text.size() ? index + 1 : -1});
    pos += len;
  }
  struct Bigram {
    float score;
    int32_t left, right;
    size_t length;
    bool operator<(const Bigram& o) const {
      return score != o.score ? score < o.score : left > o.left;
    }
  };
  std::priority_queue<Bigram> queue;
  auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const size_t length = syms[left].length + syms[right].length;
    const std::optional<int32_t> token = Find(text.substr(syms[left].offset, length));
    if (!token) return;
    const float score = vocab.scores.empty() ? 0.0f : vocab.scores[*token];
    queue.push({score, left, right, length});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(syms.size()); ++i) consider(i - 1, i);
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& left = syms[b.left];
    Symbol& right = syms[b.right];
    if (left.length == 0 || right.length == 0 || left.length + right.length != b.length) continue;
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) syms[right.next].prev = b.left;
    consider(left.prev, b.left);
    consider(b.left, left.next);
  }
  for (int32_t i = syms.empty() ? -1 : 0; i >= 0; i = syms[i].next) {
    const std::string_view piece = text.substr(syms[i].offset, syms[i].length);
    if (std::optional<int32_t> token = Find(piece)) {
      out.push_back(*token);
    } else {
      PushUnknownBytes(piece, out);
    }
  }
}

Result<Tokenizer> Tokenizer::Create(VocabSpec vocab, Options options) {
  auto impl = std::make_shared<Impl>();
  const size_t n = vocab.tokens.size();
  if (n == 0) return InvalidArgument("tokenizer: the vocabulary is empty");
  if (n > static_cast<size_t>(INT32_MAX)) return OutOfRange("tokenizer: {} tokens is too many", n);
  if (vocab.token_types.empty()) {
    vocab.token_types.assign(n, static_cast<int32_t>(TokenType::kNormal));
  }
  if (vocab.token_types.size() != n) {
    return InvalidArgument("tokenizer: {} token types for {} tokens", vocab.token_types.size(), n);
  }
  if (!vocab.scores.empty() && vocab.scores.size() != n) {
    return InvalidArgument("tokenizer: {} scores for {} tokens", vocab.scores.size(), n);
  }
  if (vocab.model == "gpt2") {
    impl->bpe = true;
    PreTokenizer pre = MT_TRY(PreTokenizer::ForName(vocab.pre));
    impl->pre.emplace(std::move(pre));
  } else if (vocab.model != "llama") {
    return Unimplemented(
        "tokenizer model '{}' (tokenizer.ggml.model) is not supported (gpt2, llama)", vocab.model);
  }
  using IdField = std::optional<uint32_t> VocabSpec::*;
  const std::pair<IdField, const char*> kIds[] = {{&VocabSpec::bos_id, "bos"},
                                                  {&VocabSpec::eos_id, "eos"},
                                                  {&VocabSpec::eot_id, "eot"},
                                                  {&VocabSpec::eom_id, "eom"},
                                                  {&VocabSpec::unk_id, "unknown"}};
  for (const auto& [field, name] : kIds) {
    if ((vocab.*field).has_value() && *(vocab.*field) >= n) {
      return InvalidArgument("tokenizer: {} token id {} is outside the vocabulary of {}", name,
                             *(vocab.*field), n);
    }
  }
  impl->vocab = std::move(vocab);
  const VocabSpec& v = impl->vocab;
  Impl& t = *impl;

  t.types.reserve(n);
  for (int32_t type : v.token_types) t.types.push_back(static_cast<TokenType>(type));
  t.token_to_id.reserve(n);
  for (size_t i = 0; i < n; ++i) t.token_to_id.emplace(v.tokens[i], static_cast<int32_t>(i));
  t.bos = v.bos_id;
  t.eos = v.eos_id;
  t.unk = v.unk_id;
  // The id from the metadata, else the first of `texts` the vocabulary has.
  auto find = [&](std::optional<uint32_t> id,
                  std::span<const std::string_view> texts) -> std::optional<int32_t> {
    if (id) return static_cast<int32_t>(*id);
    for (std::string_view text : texts) {
      if (std::optional<int32_t> found = t.Find(text)) return found;
    }
    return std::nullopt;
  };
  t.eot = find(v.eot_id, kEotTexts);
  const auto pre = find(v.fim_pre_id, kFimPrefixTexts), suf = find(v.fim_suf_id, kFimSuffixTexts),
             mid = find(v.fim_mid_id, kFimMiddleTexts);
  if (pre && suf && mid) {
    t.fim = Tokenizer::Fim{*pre, *suf, *mid, find(v.fim_rep_id, kFimRepoTexts),
                           find(v.fim_sep_id, kFimFileSepTexts)};
  }
  t.nfc = options.nfc.value_or(t.bpe && t.pre->nfc());
  t.add_bos = v.add_bos.value_or(!t.bpe || t.pre->add_bos());  // llama.cpp's defaults
  if (t.bpe && t.pre->no_bos()) {  // llama.cpp: no BOS token at all (glm4)
    t.bos.reset();
    t.add_bos = false;
  }
  t.add_space_prefix = !t.bpe && v.add_space_prefix.value_or(true);

  t.eog.assign(n, false);
  for (std::string_view text : kEogTexts) {
    if (std::optional<int32_t> id = t.Find(text)) t.eog[*id] = true;
  }
  for (const std::optional<int32_t>& id : {t.eos, t.eot}) {
    if (id) t.eog[*id] = true;
  }
  if (v.eom_id) t.eog[*v.eom_id] = true;  // llama.cpp's special_eom_id (GLM's <|observation|>)
  // llama.cpp's loader special-cases o200k_harmony (gpt-oss): <|start|>, <|channel|>,
  // <|message|> and <|constrain|> are always rendered (USER_DEFINED), so a reply's text keeps
  // its message structure; and where <|return|> and <|call|> (solar-open: <|calls|> and
  // <|flush|>) end generation, <|end|> only closes a message: it leaves the set and is
  // rendered too. eot_id() may still name it.
  for (std::string_view text : {"<|start|>", "<|channel|>", "<|message|>", "<|constrain|>"}) {
    if (std::optional<int32_t> id = t.Find(text)) t.types[*id] = TokenType::kUserDefined;
  }
  auto eog_text = [&](std::string_view text) {
    const std::optional<int32_t> id = t.Find(text);
    return id && t.eog[*id];
  };
  const bool call = eog_text("<|call|>") || eog_text("<|calls|>");
  if (call && (eog_text("<|return|>") || eog_text("<|flush|>")) && eog_text("<|end|>")) {
    const int32_t end = *t.Find("<|end|>");
    t.eog[end] = false;
    t.types[end] = TokenType::kUserDefined;
  }

  // Pieces, and the special tokens the input splitter looks for.
  t.pieces.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& text = v.tokens[i];
    switch (t.type(static_cast<int32_t>(i))) {
      case TokenType::kControl:
      case TokenType::kUnknown:
        t.pieces[i] = text;
        if (!text.empty()) t.AddSpecial(text, static_cast<int32_t>(i), /*always=*/false);
        break;
      case TokenType::kUserDefined:
        t.pieces[i] = text;
        if (!text.empty()) t.AddSpecial(text, static_cast<int32_t>(i), /*always=*/true);
        break;
      case TokenType::kUnused:
        break;
      case TokenType::kByte: {
        unsigned byte = 0;
        if (text.size() == 6 && text.rfind("<0x", 0) == 0 && text[5] == '>' &&
            std::sscanf(text.c_str() + 3, "%2x", &byte) == 1) {
          t.pieces[i] = std::string(1, static_cast<char>(byte));
        } else {
          t.pieces[i] = text;
        }
        break;
      }
      default:  // normal and undefined
        if (t.bpe) {
          if (!utf8::ByteLevelToBytes(text, t.pieces[i])) t.pieces[i] = text;
        } else {
          std::string piece;
          for (size_t pos = 0; pos < text.size();) {
            if (text.compare(pos, kSpmSpace.size(), kSpmSpace) == 0) {
              piece.push_back(' ');
              pos += kSpmSpace.size();
            } else {
              piece.push_back(text[pos++]);
            }
          }
          t.pieces[i] = std::move(piece);
        }
        break;
    }
  }
  for (auto& list : t.specials) {
    std::stable_sort(list.begin(), list.end(), [](const Special& a, const Special& b) {
      return a.text.size() > b.text.size();
    });
  }

  if (t.bpe) {
    t.sym_text.reserve(v.merges.size() + 256);
    for (int b = 0; b < 256; ++b)
      t.byte_sym[b] = t.Intern(utf8::Encode(utf8::ByteToUnicode(static_cast<uint8_t>(b))));
    t.merges.reserve(v.merges.size());
    for (size_t rank = 0; rank < v.merges.size(); ++rank) {
      const std::string& m = v.merges[rank];
      const size_t space = m.find(' ', 1);  // as llama.cpp: a left part may start with ' '
      if (space == std::string::npos) continue;
      const std::string_view left(m.data(), space),
          right(m.data() + space + 1, m.size() - space - 1);
      const int32_t l = t.Intern(left), r = t.Intern(right);
      const int32_t result = t.Intern(std::string(left) + std::string(right));
      t.merges.emplace(PairKey(l, r),
                       Impl::Merge{static_cast<int32_t>(rank), result});  // first wins
    }
  } else {
    for (int b = 0; b < 256; ++b) {
      std::optional<int32_t> id = t.Find(fmt::format("<0x{:02X}>", b));
      if (!id) id = t.Find(std::string(1, static_cast<char>(b)));
      t.byte_token[b] = id.value_or(-1);
    }
  }
  return Tokenizer(std::move(impl));
}

Result<Tokenizer> Tokenizer::FromMetadata(const GgufMetadata& metadata, Options options) {
  VocabSpec vocab = MT_TRY(ReadVocabFromMetadata(metadata));
  return Create(std::move(vocab), options);
}

Result<std::vector<int32_t>> Tokenizer::Encode(std::string_view text, bool add_bos,
                                               bool parse_special) const {
  const Impl& t = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_bos && t.bos) out.push_back(*t.bos);

  bool prev_special = true;  // SentencePiece: a space prefix goes before the first text too
  std::vector<std::string_view> words;
  auto encode_text = [&](std::string_view raw) -> Status {
    std::string normalized;
    std::string_view piece = raw;
    if (t.nfc) {
      normalized = utf8::Nfc(raw);
      piece = normalized;
    }
    if (t.bpe) {
      words.clear();
      MT_RETURN_IF_ERROR(t.pre->Split(piece, words));
      for (std::string_view w : words) t.EncodeBpeWord(w, out);
    } else {
      std::string escaped =
          t.add_space_prefix && prev_special ? std::string(kSpmSpace) : std::string();
      for (char c : piece) {
        if (c == ' ') {
          escaped += kSpmSpace;
        } else {
          escaped.push_back(c);
        }
      }
      t.EncodeSpm(escaped, out);
    }
    prev_special = false;
    return Status::Ok();
  };

  // Split out special tokens (leftmost-longest), encoding the text between them.
  size_t start = 0;
  for (size_t pos = 0; pos < text.size();) {
    const Special* hit = nullptr;
    for (const Special& s : t.specials[static_cast<uint8_t>(text[pos])]) {
      if ((parse_special || s.always) && text.compare(pos, s.text.size(), s.text) == 0) {
        hit = &s;
        break;
      }
    }
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    if (pos > start) MT_RETURN_IF_ERROR(encode_text(text.substr(start, pos - start)));
    out.push_back(hit->id);
    prev_special = true;
    pos += hit->text.size();
    start = pos;
  }
  if (start < text.size()) MT_RETURN_IF_ERROR(encode_text(text.substr(start)));
  return out;
}

std::string Tokenizer::TokenPiece(int32_t id, bool special) const {
  const Impl& t = *impl_;
  if (id < 0 || id >= t.n()) return "";
  const TokenType type = t.type(id);
  if (!special && (type == TokenType::kControl || type == TokenType::kUnknown)) return "";
  return t.pieces[id];
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool special) const {
  const Impl& t = *impl_;
  std::string out;
  bool strip_space = t.add_space_prefix;
  for (int32_t id : ids) {
    std::string piece = TokenPiece(id, special);
    if (strip_space && id >= 0 && id < t.n() && t.type(id) != TokenType::kControl) {
      if (!piece.empty() && piece[0] == ' ') piece.erase(0, 1);
      strip_space = false;
    }
    out += piece;
  }
  return out;
}

int32_t Tokenizer::n_vocab() const { return impl_->n(); }
std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos; }
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->eos; }
std::optional<int32_t> Tokenizer::eot_id() const { return impl_->eot; }
std::optional<Tokenizer::Fim> Tokenizer::fim() const { return impl_->fim; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }
bool Tokenizer::IsEndOfGeneration(int32_t id) const {
  return id >= 0 && id < impl_->n() && impl_->eog[id];
}
TokenType Tokenizer::token_type(int32_t id) const {
  return id >= 0 && id < impl_->n() ? impl_->type(id) : TokenType::kUndefined;
}
std::string_view Tokenizer::token_text(int32_t id) const {
  return id >= 0 && id < impl_->n() ? std::string_view(impl_->vocab.tokens[id])
                                    : std::string_view();
}
const std::string& Tokenizer::model() const { return impl_->vocab.model; }
const std::string& Tokenizer::pre() const { return impl_->vocab.pre; }
bool Tokenizer::nfc() const { return impl_->nfc; }
const VocabSpec& Tokenizer::vocab() const { return impl_->vocab; }

std::string StreamDecoder::Push(int32_t id) {
  pending_ += tokenizer_->TokenPiece(id, special_);
  const size_t complete = utf8::CompletePrefixLength(pending_);
  std::string out = pending_.substr(0, complete);
  pending_.erase(0, complete);
  return out;
}

std::string StreamDecoder::Flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace mt
