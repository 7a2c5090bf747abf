// libFuzzer target for the GGUF reader: any bytes give a model or a one-line error naming the
// input, never a crash, a hang or an out-of-bounds read. A parsed model is walked in full, and
// the first and last byte of every tensor is read, so ASan checks the bounds the parser promised.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>

#include "gguf/gguf.h"

namespace {

volatile uint64_t g_sink = 0;  // keeps the walk from being optimized away

void Fail(const char* what) {
  std::fprintf(stderr, "gguf_reader_fuzz: %s\n", what);
  std::abort();
}

// Touches every value, nested arrays included; returns a checksum so nothing is optimized out.
uint64_t Walk(const mt::GgufValue& v) {
  uint64_t sum = static_cast<uint64_t>(v.type()) + v.ToShortString().size();
  if (const mt::GgufArray* a = v.AsArray()) {
    for (const mt::GgufValue& item : a->items) {
      if (item.type() != a->element_type) Fail("array item of another type");
      sum += Walk(item);
    }
  } else if (const std::string* s = v.AsString()) {
    for (char c : *s) sum += static_cast<uint8_t>(c);
  } else {
    sum += v.AsUint().value_or(0) + static_cast<uint64_t>(v.AsDouble().value_or(0) != 0);
  }
  return sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string kName = "fuzz.gguf";
  mt::Result<mt::GgufModel> m = mt::GgufModel::Parse(std::span<const uint8_t>(data, size), kName);
  if (!m.ok()) {
    const std::string& msg = m.status().message();
    if (msg.rfind(kName + ": ", 0) != 0) Fail("error does not start with the file name");
    if (msg.find('\n') != std::string::npos) Fail("error is not one line");
    return 0;
  }
  uint64_t sum = 0;
  for (const mt::GgufMetadata::Entry& e : m->metadata().entries()) {
    sum += e.key.size() + Walk(e.value);
  }
  const mt::GgufShard& shard = m->shards().front();
  if (shard.data_offset > size || shard.alignment == 0) Fail("bad shard layout");
  for (const mt::GgufTensor& t : m->tensors()) {
    if (t.n_bytes == 0 || t.shape.empty() || t.shape.size() > 4) Fail("bad tensor shape");
    if (t.data != data + t.file_offset || t.file_offset + t.n_bytes > size) Fail("bad extent");
    if (t.file_offset % shard.alignment != 0) Fail("misaligned tensor");
    sum += t.data[0] + t.data[t.n_bytes - 1] + t.rows();
    if (m->FindTensor(t.name) != &t) Fail("FindTensor");
  }
  g_sink = sum;
  return 0;
}
