// Fuzz target: tokenizer encode/decode on arbitrary bytes (invalid UTF-8 included) with the
// built-in vocabularies (byte-level BPE with the qwen2, olmo, deepseek-v3, deepseek-llm and
// gpt-4o pre-tokenizers, SentencePiece), plus chat-template detection and rendering of the same
// bytes.
//
// Input: byte 0 holds flags (bit 0 parse_special, bit 1 add_bos); the rest is the text.
// Checks: Encode succeeds and every id is in range; without special parsing or BOS,
// Decode(Encode(x)) == x (NFC(x) for qwen2; SentencePiece only when x has no "▁"); a
// StreamDecoder fed the ids one by one prints exactly the concatenated pieces.
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/check.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

struct Tokenizers {
  mt::Tokenizer qwen =
      Build(mt::BuiltinBpeVocab(4096, "qwen2", {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}));
  mt::Tokenizer olmo = Build(mt::BuiltinBpeVocab(2048, "olmo", {"<|endoftext|>", "<|padding|>"}));
  mt::Tokenizer deepseek3 = Build(mt::BuiltinBpeVocab(2048, "deepseek-v3", {"<｜User｜>"}));
  mt::Tokenizer deepseek_llm = Build(mt::BuiltinBpeVocab(2048, "deepseek-llm", {}));
  // gpt-oss's harmony tokens: <|start|>, <|message|> and <|end|> are USER_DEFINED for the loader
  // (found in text without parse_special), <|return|> and <|call|> CONTROL.
  mt::Tokenizer gpt4o = Build(mt::BuiltinBpeVocab(
      2048, "gpt-4o", {"<|start|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>"}));
  mt::Tokenizer spm = Build(mt::BuiltinSpmVocab(2048));

  static mt::Tokenizer Build(mt::VocabSpec v) {
    mt::Result<mt::Tokenizer> t = mt::Tokenizer::Create(std::move(v));
    MT_CHECK(t.ok());
    return std::move(t).value();
  }
};

void Check(const mt::Tokenizer& tok, std::string_view text, bool parse_special, bool add_bos) {
  mt::Result<std::vector<int32_t>> ids = tok.Encode(text, add_bos, parse_special);
  MT_CHECK(ids.ok());
  std::string pieces;
  for (int32_t id : *ids) {
    MT_CHECK(id >= 0 && id < tok.n_vocab());
    pieces += tok.TokenPiece(id);
  }
  mt::StreamDecoder stream(tok);
  std::string streamed;
  for (int32_t id : *ids) streamed += stream.Push(id);
  streamed += stream.Flush();
  MT_CHECK(streamed == pieces);
  if (parse_special || add_bos) return;
  const bool spm = tok.model() == "llama";
  if (spm && text.find("\xE2\x96\x81") != std::string_view::npos) return;
  const std::string want = tok.nfc() ? mt::utf8::Nfc(text) : std::string(text);
  MT_CHECK(tok.Decode(*ids) == want);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Tokenizers* tokenizers = new Tokenizers();
  if (size == 0) return 0;
  const bool parse_special = data[0] & 1;
  const bool add_bos = data[0] & 2;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  Check(tokenizers->qwen, text, parse_special, add_bos);
  Check(tokenizers->olmo, text, parse_special, add_bos);
  Check(tokenizers->deepseek3, text, parse_special, add_bos);
  Check(tokenizers->deepseek_llm, text, parse_special, add_bos);
  Check(tokenizers->gpt4o, text, parse_special, add_bos);
  Check(tokenizers->spm, text, parse_special, add_bos);

  // The whole input as a chat template, and as message content.
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  (void)mt::ChatTemplate::Detect(all);
  for (auto kind : {mt::ChatTemplate::Kind::kChatml, mt::ChatTemplate::Kind::kTulu,
                    mt::ChatTemplate::Kind::kLlama2, mt::ChatTemplate::Kind::kDeepseek3}) {
    mt::ChatTemplate tmpl(kind, "<|endoftext|>", "fuzz");
    const mt::ChatMessage messages[] = {{"system", std::string(text)}, {"user", std::string(text)}};
    mt::Result<mt::ChatPrompt> p = tmpl.Render(messages, true);
    MT_CHECK(p.ok());
  }
  return 0;
}
