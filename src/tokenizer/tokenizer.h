// Text <-> token ids for the vocabularies GGUF files carry (tokenizer.ggml.*):
//   - model "gpt2": byte-level BPE. Text is pre-tokenized by the regexes named by
//     tokenizer.ggml.pre (pre_tokenizer.h); each piece's bytes are mapped to GPT-2's
//     printable code points and merged by merge rank (lowest rank first, leftmost first on
//     ties), as Hugging Face tokenizers and llama.cpp do.
//   - model "llama": SentencePiece as llama.cpp runs it. Spaces become U+2581 "▁"; with
//     add_space_prefix (default on) a "▁" is put before the text and before text that
//     follows a special token; adjacent symbols are merged greedily by the score of the
//     merged piece (highest first, leftmost on ties); a symbol that is not a piece falls
//     back to its <0xXX> byte tokens.
//
// Special tokens: with parse_special, the text of CONTROL, USER_DEFINED and UNKNOWN tokens
// in the input becomes those tokens (leftmost-longest match, as Hugging Face's added-token
// matcher); without it, only USER_DEFINED tokens are, as llama.cpp does.
//
// Normalization (a deliberate choice): Hugging Face's tokenizer.json of Qwen2/Qwen3 has an
// NFC normalizer; llama.cpp does not apply it. The model was trained with HF's tokenizer,
// so for pre "qwen2" (and "deepseek-r1-qwen") text outside special tokens is NFC-normalized
// before pre-tokenization, matching HF. On text that is already NFC (nearly all text) both
// agree. Options::nfc overrides the choice. NFC is applied to each maximal valid UTF-8
// run; invalid bytes are kept as they are.
//
// Round trip: Decode(Encode(x, false, false)) == x for any bytes x (valid UTF-8 or not)
// with a byte-level BPE vocabulary that has all 256 byte tokens, when no NFC is applied or
// x is NFC. For SentencePiece the leading "▁" that add_space_prefix adds is dropped by
// Decode.
//
// Thread-safety: a Tokenizer is immutable after Create; all const methods are thread-safe.
// Copies share the same immutable state.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/vocab_spec.h"

namespace mt {

class GgufMetadata;

class Tokenizer {
 public:
  struct Options {
    // NFC-normalize input text. nullopt: as the pre-tokenizer's model does (qwen2: on).
    std::optional<bool> nfc;
  };

  // Errors: an unknown tokenizer.ggml.model (only "gpt2" and "llama" are supported) or
  // pre-tokenizer, an empty vocabulary, or arrays (types, scores) whose length differs
  // from the token count.
  static Result<Tokenizer> Create(VocabSpec vocab, Options options);
  static Result<Tokenizer> Create(VocabSpec vocab) { return Create(std::move(vocab), Options{}); }
  // ReadVocabFromMetadata + Create; errors name the metadata key.
  static Result<Tokenizer> FromMetadata(const GgufMetadata& metadata, Options options = {});

  // Token ids of `text` (any bytes). With add_bos, bos_id() is put first when the vocabulary
  // has one (nothing otherwise). No EOS is ever appended. Fails only on an internal regex
  // engine error (resource limits), never on the content of `text`.
  Result<std::vector<int32_t>> Encode(std::string_view text, bool add_bos,
                                      bool parse_special) const;

  // The bytes a token stands for; may be part of a UTF-8 sequence. CONTROL tokens give
  // their text when `special` (as llama-tokenize prints them), nothing otherwise; UNUSED
  // tokens and ids outside [0, n_vocab) give "".
  std::string TokenPiece(int32_t id, bool special = true) const;

  // The concatenated pieces of `ids` (raw bytes; may be invalid UTF-8 if the ids split a
  // character). For SentencePiece with add_space_prefix, the leading space of the first
  // non-control piece is dropped.
  std::string Decode(std::span<const int32_t> ids, bool special = true) const;

  int32_t n_vocab() const;
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  // tokenizer.ggml.eot_token_id, else the first of llama.cpp's end-of-turn texts the
  // vocabulary has ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
  // ...). For Qwen3 that is <|im_end|>.
  std::optional<int32_t> eot_id() const;
  // Fill-in-the-middle: the tokens around a prefix and a suffix, before the middle the model
  // writes ("<|fim_prefix|>" ... "<|fim_suffix|>" ... "<|fim_middle|>" for Qwen coders).
  // From tokenizer.ggml.fim_{pre,suf,mid}_token_id, else the texts llama.cpp's loader looks
  // for; nullopt unless all three are found.
  // `repo` and `file_sep` (tokenizer.ggml.fim_{rep,sep}_token_id, else "<|repo_name|>",
  // "<|file_sep|>" and llama.cpp's other texts) open a repository's name and each file in
  // repo-level prompts (Qwen coders); either may be absent.
  struct Fim {
    int32_t prefix, suffix, middle;
    std::optional<int32_t> repo = std::nullopt, file_sep = std::nullopt;
  };
  std::optional<Fim> fim() const;
  // Whether the model wants BOS put first (tokenizer.ggml.add_bos_token, else llama.cpp's
  // default: true for SentencePiece and the Llama 3 pre-tokenizer, false otherwise).
  bool add_bos() const;
  // Generation stops at these: EOS, EOT, EOM, and every token whose text llama.cpp treats as
  // end-of-generation (<|im_end|>, <|endoftext|>, <|eot_id|>, <|end|>, <end_of_turn>, ...,
  // and the FIM pad/repo/file-separator tokens). As in llama.cpp, <|end|> is not one where
  // <|return|> and <|call|> are (gpt-oss: there it closes a message, not the reply).
  bool IsEndOfGeneration(int32_t id) const;
  // TokenType of `id` as llama.cpp's loader sees it (kUndefined for ids out of range):
  // vocab().token_types, except that <|start|>, <|channel|>, <|message|>, <|constrain|> and
  // an <|end|> that is not end-of-generation (gpt-oss) are USER_DEFINED, so they are rendered
  // by TokenPiece(id, false) and found in text without parse_special.
  TokenType token_type(int32_t id) const;
  // The raw vocabulary text of `id` (byte-level or "▁" form); "" out of range.
  std::string_view token_text(int32_t id) const;
  const std::string& model() const;
  const std::string& pre() const;
  bool nfc() const;
  const VocabSpec& vocab() const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// Turns generated tokens into printable text as they arrive: bytes of a UTF-8 character
// split across tokens are held back until the character is complete. Not thread-safe (one
// per stream); the Tokenizer must outlive it.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool special = true)
      : tokenizer_(&tokenizer), special_(special) {}

  // The text that became complete with `id` (possibly empty).
  std::string Push(int32_t id);
  // Whatever is still held back (an incomplete UTF-8 sequence), and resets.
  std::string Flush();

 private:
  const Tokenizer* tokenizer_;
  bool special_;
  std::string pending_;  // bytes of an incomplete UTF-8 sequence (at most 3)
};

}  // namespace mt
