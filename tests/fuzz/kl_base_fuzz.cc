// Fuzzes the KL-divergence base-file reader (src/engine/perplexity.cc): any bytes must give
// a reader or a Status, never a crash, and every record the header promises must read back.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/perplexity.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/kl_base_fuzz_" + std::to_string(getpid()) + ".kld";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  mt::Result<mt::KlBaseReader> r = mt::KlBaseReader::Open(path);
  if (!r.ok()) return 0;
  (void)r->CheckCompatible(r->n_vocab(), r->n_ctx());
  const int64_t n_records = static_cast<int64_t>(r->n_chunk()) * (r->n_ctx() - 1 - r->n_ctx() / 2);
  // Without records (n_ctx 2 or 3) the file size says nothing of n_vocab, so a record buffer
  // could be gigabytes; with records the exact size check bounds it by the input's size.
  if (n_records == 0) return 0;
  std::vector<uint16_t> record(mt::KlRecordWords(r->n_vocab()));
  for (int64_t i = 0; i < n_records; ++i) {
    if (!r->ReadRecord(record).ok()) __builtin_trap();  // the size check promised it
    for (int32_t t = 0; t < r->n_vocab(); ++t) (void)mt::RecordLogProb(record, t);
  }
  if (r->ReadRecord(record).ok()) __builtin_trap();  // nothing after the last record
  return 0;
}
