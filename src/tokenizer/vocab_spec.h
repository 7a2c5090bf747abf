// The tokenizer of a model as GGUF stores it (the tokenizer.ggml.* keys), independent of
// how it is used to encode text. Synth builds one; the tokenizer is built from one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace mt {

class GgufMetadata;

// llama.cpp's token types (tokenizer.ggml.token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct VocabSpec {
  std::string model;  // tokenizer.ggml.model: "gpt2" (byte-level BPE) or "llama" (SentencePiece)
  std::string pre;    // tokenizer.ggml.pre: "qwen2", "olmo", "llama-bpe", "gpt-2", "default"
  std::vector<std::string> tokens;   // (n_vocab) token text; byte-level BPE uses GPT-2's byte->unicode map
  std::vector<float> scores;         // (n_vocab) SentencePiece piece scores; empty for BPE
  std::vector<int32_t> token_types;  // (n_vocab) TokenType values
  std::vector<std::string> merges;   // (n_merges) "left right"; BPE only
  std::optional<uint32_t> bos_id, eos_id, eot_id, unk_id, pad_id, sep_id;
  std::optional<bool> add_bos, add_eos;
  std::string chat_template;  // tokenizer.chat_template (Jinja text), empty if none

  size_t size() const { return tokens.size(); }
};

// Writes the tokenizer.ggml.* keys (and tokenizer.chat_template) the way llama.cpp's
// converter does.
void WriteVocabToMetadata(const VocabSpec& vocab, GgufMetadata& metadata);

// Reads a VocabSpec back from GGUF metadata. Errors name the missing or malformed key.
Result<VocabSpec> ReadVocabFromMetadata(const GgufMetadata& metadata);

// Imports a Hugging Face tokenizer.json (plus tokenizer_config.json beside it, when present,
// for the chat template and BOS/EOS) as llama.cpp's converter would, padded with
// "[PAD<id>]" unused tokens up to `n_vocab` (0 = no padding). `pre` is the llama.cpp
// pre-tokenizer name to record. Errors name the file and what is wrong.
Result<VocabSpec> ImportHfTokenizer(const std::string& tokenizer_json_path, const std::string& pre,
                                    uint32_t n_vocab);

// A small built-in byte-level BPE (model "gpt2"): the 256 byte tokens, merges learned
// deterministically from an embedded English/code/multilingual text, special tokens
// `specials` (e.g. "<|endoftext|>"), padded with unused tokens to `n_vocab`.
VocabSpec BuiltinBpeVocab(uint32_t n_vocab, const std::string& pre,
                          const std::vector<std::string>& specials);

// A small built-in SentencePiece-style vocab (model "llama"): <unk>, <s>, </s>, the 256
// <0xXX> byte tokens, then scored pieces learned from the same embedded text, up to n_vocab.
VocabSpec BuiltinSpmVocab(uint32_t n_vocab);

}  // namespace mt
