// The tokenizer of a model as GGUF stores it (the tokenizer.ggml.* keys), independent of
// how it is used to encode text. Synth builds one; the tokenizer is built from one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
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
  // (n_vocab) token text; byte-level BPE uses GPT-2's byte->unicode map
  std::vector<std::string> tokens;
  std::vector<float> scores;         // (n_vocab) SentencePiece piece scores; empty for BPE
  std::vector<int32_t> token_types;  // (n_vocab) TokenType values
  std::vector<std::string> merges;   // (n_merges) "left right"; BPE only
  std::optional<uint32_t> bos_id, eos_id, eot_id, unk_id, pad_id, sep_id;
  // tokenizer.ggml.eom_token_id: end of message, an end of generation (GLM-4.5's
  // <|observation|>, after a tool call).
  std::optional<uint32_t> eom_id;
  // Fill-in-the-middle: tokenizer.ggml.fim_{pre,suf,mid,rep,sep}_token_id (code models; rep
  // and sep mark a repository's name and its files in repo-level prompts).
  std::optional<uint32_t> fim_pre_id, fim_suf_id, fim_mid_id, fim_rep_id, fim_sep_id;
  std::optional<bool> add_bos, add_eos;
  std::optional<bool> add_space_prefix;  // tokenizer.ggml.add_space_prefix (SentencePiece)
  std::string chat_template;             // tokenizer.chat_template (Jinja text), empty if none

  size_t size() const { return tokens.size(); }
};

// Writes the tokenizer.ggml.* keys (and tokenizer.chat_template) the way llama.cpp's
// converter does: model, pre (strings); tokens (string array), scores (float32 array, only
// when non-empty), token_type (int32 array), merges (string array, only when non-empty);
// the set ids as uint32 (bos, eos, eot, unknown, seperator [sic], padding); add_bos_token,
// add_eos_token, add_space_prefix as bool when set; tokenizer.chat_template when non-empty.
// Unset optionals and empty strings/arrays are not written.
void WriteVocabToMetadata(const VocabSpec& vocab, GgufMetadata& metadata);

// Reads a VocabSpec back from GGUF metadata. Required: tokenizer.ggml.model and
// tokenizer.ggml.tokens. token_type defaults to all kNormal when absent; scores stay empty
// when absent (int32 scores, which llama.cpp also accepts, are converted). Errors name the
// missing or malformed key (wrong type, array length that differs from the token count).
// A special-token id outside the vocabulary is dropped (left unset), as llama.cpp ignores it.
Result<VocabSpec> ReadVocabFromMetadata(const GgufMetadata& metadata);

// The id of the token whose text is exactly `text`, if any (linear scan).
std::optional<uint32_t> FindTokenId(const VocabSpec& vocab, std::string_view text);

// Imports a Hugging Face tokenizer.json as llama.cpp's converter would (token order by id,
// added tokens CONTROL when special or control-looking, else USER_DEFINED; merges as
// "a b"), with tokenizer_config.json, config.json and chat_template.jinja beside it, when
// present, for special ids, add_bos/add_eos and the chat template (tokenizer_config.json
// first, config.json for ids still unset), padded with
// "[PAD<id>]" unused tokens up to `n_vocab` (0 = no padding). `pre` is the llama.cpp
// pre-tokenizer name to record. Errors name the file and what is wrong (missing file, bad
// JSON with its byte offset, missing model.vocab, bad ids or merges, a vocabulary over
// 2^24 tokens or an id that does not fit `n_vocab`).
Result<VocabSpec> ImportHfTokenizer(const std::string& tokenizer_json_path, const std::string& pre,
                                    uint32_t n_vocab);
// The same from tokenizer.json text already in memory, without the files beside it (so no
// special ids, add_bos/add_eos or chat template from tokenizer_config.json beyond what the
// post-processor implies). `name` is used in errors. For tests and fuzzing.
Result<VocabSpec> ImportHfTokenizerJson(std::string_view tokenizer_json, const std::string& name,
                                        const std::string& pre, uint32_t n_vocab);

// A small built-in byte-level BPE (model "gpt2"): ids 0..255 are the byte tokens (id b is
// byte b, in GPT-2's byte->unicode form), then the tokens of the merges learned
// deterministically from an embedded English/code/multilingual text (633 when n_vocab
// allows), then `specials` as CONTROL tokens (e.g. "<|endoftext|>"), then "[PAD<id>]"
// UNUSED tokens up to `n_vocab`. No special ids are set: find them with FindTokenId.
// Requires n_vocab >= 256 + specials.size() (checked). Takes well under 0.1 s.
VocabSpec BuiltinBpeVocab(uint32_t n_vocab, const std::string& pre,
                          const std::vector<std::string>& specials);

// A small built-in SentencePiece-style vocab (model "llama"): 0 <unk>, 1 <s>, 2 </s>, 3..258
// the <0xXX> byte tokens, then "▁"-style pieces learned from the same embedded text with
// decreasing scores (merged pieces first, then single characters), then "[PAD<id>]" UNUSED
// tokens (score -10000) up to n_vocab. Sets unk 0, bos 1, eos 2, add_bos true, add_eos
// false, pre "default". Requires n_vocab >= 259 (checked).
VocabSpec BuiltinSpmVocab(uint32_t n_vocab);

}  // namespace mt
