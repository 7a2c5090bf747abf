#include "experts/simple_stores.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include <cstring>

namespace mt {

InMemoryStore::InMemoryStore(const ExpertLayout& layout, std::string tier) : layout_(layout) {
  stats_.tier = std::move(tier);
  stats_.layers.resize(layout.n_layer());
}

void InMemoryStore::ResetStats() {
  TierStats fresh;
  fresh.tier = stats_.tier;
  fresh.layers.resize(layout_.n_layer());
  stats_ = std::move(fresh);
}

void InMemoryStore::BeginLayer(uint32_t layer, std::span<const int32_t> experts) {
  layer_ = layer;
  pending_.assign(experts.begin(), experts.end());
  next_ = 0;
  stats_.layers[layer].requests += experts.size();
  stats_.layers[layer].hits += experts.size();
  stats_.total.requests += experts.size();
  stats_.total.hits += experts.size();
}

Result<std::optional<ReadyExpert>> InMemoryStore::NextReady(bool /*wait*/) {
  if (next_ >= pending_.size()) return std::optional<ReadyExpert>();
  const int32_t e = pending_[next_++];
  return std::optional<ReadyExpert>(
      ReadyExpert{e, ExpertLease(this, -1, Matrices(layer_, static_cast<uint32_t>(e)))});
}

Result<std::unique_ptr<ResidentStore>> ResidentStore::Create(const ExpertLayout& layout) {
  std::unique_ptr<ResidentStore> s(new ResidentStore(layout));
  s->copies_.resize(layout.n_layer());
  for (uint32_t il = 0; il < layout.n_layer(); ++il) {
    for (int p = 0; p < kNumExpertParts; ++p) {
      const ExpertPart part = static_cast<ExpertPart>(p);
      const uint64_t bytes = layout.part_tensor_bytes(il, part);
      Result<AlignedBuffer> buf = AlignedBuffer::Allocate(bytes);
      if (!buf.ok()) return buf.status().WithContext("resident experts");
      std::memcpy(buf->data(), layout.mapped(il, 0, part), bytes);
      s->copies_[il][p] = std::move(buf.value());
    }
  }
  return s;
}

ExpertMatrices ResidentStore::Matrices(uint32_t layer, uint32_t expert) const {
  auto at = [&](ExpertPart p) {
    return copies_[layer][p].data() + uint64_t{expert} * layout_.extent(layer, expert, p).length;
  };
  return layout_.Matrices(layer, at(kGate), at(kUp), at(kDown));
}

Result<std::unique_ptr<MmapStore>> MmapStore::Create(const ExpertLayout& layout, bool warm) {
  std::unique_ptr<MmapStore> s(new MmapStore(layout));
  Result<FileWatch> watch = FileWatch::Open(layout.files());
  if (!watch.ok()) return watch.status();
  s->watch_ = std::move(watch.value());
  // Experts are read at random: readahead would only pull in neighbours nobody asked for.
  const uintptr_t page = 4096;
  for (uint32_t il = 0; il < layout.n_layer(); ++il) {
    for (int p = 0; p < kNumExpertParts; ++p) {
      const ExpertPart part = static_cast<ExpertPart>(p);
      const uintptr_t begin = reinterpret_cast<uintptr_t>(layout.mapped(il, 0, part));
      const uintptr_t end = begin + layout.part_tensor_bytes(il, part);
      const uintptr_t b = begin & ~(page - 1);
      ::madvise(reinterpret_cast<void*>(b), end - b, MADV_RANDOM);
    }
  }
  if (warm) s->warm_thread_ = std::thread([ptr = s.get()] { ptr->Warm(); });
  return s;
}

MmapStore::~MmapStore() {
  stop_warm_ = true;
  if (warm_thread_.joinable()) warm_thread_.join();
}

// Touches one byte per page of every expert, lowest priority, so later faults are hits.
void MmapStore::Warm() {
  ::setpriority(PRIO_PROCESS, 0, 19);
  volatile uint8_t sink = 0;
  for (uint32_t il = 0; il < layout_.n_layer() && !stop_warm_; ++il) {
    for (int p = 0; p < kNumExpertParts && !stop_warm_; ++p) {
      const ExpertPart part = static_cast<ExpertPart>(p);
      const uint8_t* base = layout_.mapped(il, 0, part);
      const uint64_t bytes = layout_.part_tensor_bytes(il, part);
      for (uint64_t off = 0; off < bytes && !stop_warm_; off += 4096) sink ^= base[off];
    }
  }
  (void)sink;
}

Status MmapStore::CheckFiles() { return watch_.Check(); }

ExpertMatrices MmapStore::Matrices(uint32_t layer, uint32_t expert) const {
  return layout_.Matrices(layer, layout_.mapped(layer, expert, kGate),
                          layout_.mapped(layer, expert, kUp), layout_.mapped(layer, expert, kDown));
}

}  // namespace mt
