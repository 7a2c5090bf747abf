// Fuzz target: Hugging Face tokenizer.json import (ImportHfTokenizerJson) on arbitrary bytes,
// then, when the import succeeds, a tokenizer built from it encodes and decodes a fixed
// text. Bad input must give an error Status, never a crash, a hang or a huge allocation.
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/check.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  // n_vocab bounds the allocation: an id at or past it is an error.
  mt::Result<mt::VocabSpec> vocab = mt::ImportHfTokenizerJson(json, "fuzz.json", "qwen2", 4096);
  if (!vocab.ok()) {
    MT_CHECK(!vocab.status().message().empty());
    return 0;
  }
  MT_CHECK(vocab->size() == 4096);
  mt::Result<mt::Tokenizer> tok = mt::Tokenizer::Create(std::move(*vocab));
  if (!tok.ok()) return 0;
  mt::Result<std::vector<int32_t>> ids =
      tok->Encode("Hello, world! 123 \xE4\xBD\xA0\xFF", true, true);
  MT_CHECK(ids.ok());
  for (int32_t id : *ids) MT_CHECK(id >= 0 && id < tok->n_vocab());
  (void)tok->Decode(*ids);
  return 0;
}
