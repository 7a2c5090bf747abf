// The regex pre-tokenizers of byte-level BPE vocabularies, chosen by tokenizer.ggml.pre.
//
// Each pre-tokenizer is a list of regexes applied in turn: every regex splits each piece
// of the previous step into its matches plus the unmatched text between them (Hugging
// Face's Split with behavior "Isolated"). The regexes are the ones in the models'
// tokenizer.json, matched with PCRE2 (UTF + UCP), where `\s` is spelled out as the class
// Oniguruma (which Hugging Face tokenizers uses) gives it: U+0009..U+000D, U+0085 and the
// Unicode separators \p{Z}.
//
// Invalid UTF-8 bytes never match a regex item, so they end up in pieces of their own (or
// with other unmatched bytes); no byte of the input is ever dropped or changed.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace mt {

class PreTokenizer {
 public:
  // Supported names (llama.cpp's tokenizer.ggml.pre):
  //   qwen2 (also deepseek-r1-qwen, stablelm2): the Qwen2/Qwen3 regex, single digits.
  //   llama-bpe (also llama3, llama-v3, dbrx, smaug-bpe): the Llama 3 regex, digits in
  //     runs of up to 3; the BPE ignores merges for whole words found in the vocabulary.
  //   glm4 (also chatglm-bpe; GLM-4, GLM-4.5): the Llama 3 regex without ignore_merges, and
  //     no BOS token (llama.cpp drops it for these vocabularies).
  //   gpt-2 (also olmo, mpt, phi-2, jais): the GPT-2 regex.
  //   gpt-4o (gpt-oss's o200k_harmony, GPT-4o's o200k_base): the o200k regex with
  //     case-aware words and digits in runs of up to 3; whole words found in the vocabulary
  //     skip the merges, as tokenizer.json and tiktoken do.
  //   deepseek-v3 (DeepSeek-V3, R1, V3.1): digits in runs of up to 3, then runs of CJK
  //     ideographs and kana, then DeepSeek-V3's word regex.
  //   deepseek-llm (deepseek-llm-7b): six passes over explicit script ranges.
  //   (Kimi-K2's "kimi-k2" is not supported: llama.cpp splits it with hand-written code.)
  //   default or "": llama.cpp's default list for BPE without a named pre-tokenizer.
  // Any other name is an Unimplemented error naming it.
  static Result<PreTokenizer> ForName(std::string_view name);

  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;
  ~PreTokenizer();

  // Appends the pieces of `text` to `pieces`; they are views into `text`, in order, and
  // together cover it exactly. Thread-safe. Fails only on a PCRE2 matching error.
  Status Split(std::string_view text, std::vector<std::string_view>& pieces) const;

  // Whether the BPE should emit a whole pre-token directly when it is a vocabulary token
  // (Hugging Face's ignore_merges; llama.cpp sets it for the Llama 3 family).
  bool ignore_merges() const { return ignore_merges_; }
  // Whether llama.cpp puts BOS first when tokenizer.ggml.add_bos_token is absent (the
  // Llama 3 family).
  bool add_bos() const { return add_bos_; }
  // Whether the model's Hugging Face tokenizer NFC-normalizes text (Qwen2/Qwen3).
  bool nfc() const { return nfc_; }
  // Whether the vocabulary never takes a BOS token, whatever add_bos_token says (glm4).
  bool no_bos() const { return no_bos_; }
  const std::string& name() const { return name_; }

 private:
  struct Regex;
  PreTokenizer();
  std::string name_;
  bool ignore_merges_ = false;
  bool add_bos_ = false;
  bool nfc_ = false;
  bool no_bos_ = false;
  std::vector<std::unique_ptr<Regex>> regexes_;  // applied in order
};

}  // namespace mt
