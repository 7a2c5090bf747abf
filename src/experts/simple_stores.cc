#include "experts/simple_stores.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "base/check.h"
#include "base/thread_pool.h"
#include "experts/kernel_layout.h"
#include "kernels/isa.h"

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

Result<std::optional<ReadyExpert>> InMemoryStore::NextReady(bool /*wait*/, bool /*defer_checks*/) {
  if (next_ >= pending_.size()) return std::optional<ReadyExpert>();
  const int32_t e = pending_[next_++];
  return std::optional<ReadyExpert>(
      ReadyExpert{e, ExpertLease(this, -1, Matrices(layer_, static_cast<uint32_t>(e)))});
}

Result<std::unique_ptr<ResidentStore>> ResidentStore::Create(const ExpertLayout& layout,
                                                             ThreadPool* pool,
                                                             std::span<const uint8_t> skip,
                                                             CopiedFn copied) {
  std::unique_ptr<ResidentStore> s(new ResidentStore(layout));
  s->copied_ = std::move(copied);
  const uint32_t E = layout.n_expert();
  MT_CHECK(skip.empty() || skip.size() == size_t{layout.n_layer()} * E);
  s->copies_.resize(layout.n_layer());
  s->position_.assign(size_t{layout.n_layer()} * E, -1);
  std::vector<Status> failed(E);  // per expert: no lock between threads
  for (uint32_t il = 0; il < layout.n_layer(); ++il) {
    if (!layout.has_experts(il)) continue;
    int32_t kept = 0;
    for (uint32_t e = 0; e < E; ++e) {
      if (skip.empty() || !skip[size_t{il} * E + e]) s->position_[size_t{il} * E + e] = kept++;
    }
    if (kept == 0) continue;
    for (int p = 0; p < kNumExpertParts; ++p) {
      const ExpertPart part = static_cast<ExpertPart>(p);
      Result<AlignedBuffer> buf =
          AlignedBuffer::Allocate(layout.extent(il, 0, part).length * static_cast<uint64_t>(kept));
      if (!buf.ok()) return buf.status().WithContext("resident experts");
      s->copies_[il][p] = std::move(buf.value());
    }
    // Expert by expert: the parts are contiguous in a stacked tensor, apart in a pack. A
    // pack's record is checked against its checksum first (xxh3 is far faster than the
    // page-ins the copy needs anyway), so a corrupt expert is never loaded.
    auto load = [&](int64_t e0, int64_t e1, int) {
      for (int64_t ei = e0; ei < e1; ++ei) {
        const auto e = static_cast<uint32_t>(ei);
        const int32_t at_position = s->position_[size_t{il} * E + e];
        if (at_position < 0) continue;  // another tier's
        if (layout.has_records()) {
          failed[e] = layout.CheckMappedRecord(il, e);
          if (!failed[e].ok()) continue;
        }
        s->Copy(il, e);
      }
    };
    if (pool != nullptr) {
      pool->ParallelForDynamic(layout.n_expert(), load, 1);
    } else {
      load(0, layout.n_expert(), 0);
    }
    for (const Status& st : failed) MT_RETURN_IF_ERROR(st);  // the lowest expert's error
  }
  // Once all are copied (released earlier, a page would be mapped in again by the next
  // expert's reads: the kernel maps the cached pages around a fault), neighbours joined (a
  // page shared by two copied experts goes back too).
  std::vector<std::span<const uint8_t>> sources;
  for (uint32_t il = 0; il < layout.n_layer(); ++il) {
    for (uint32_t e = 0; e < E; ++e) {
      if (s->position_[size_t{il} * E + e] < 0) continue;  // none
      for (int p = 0; p < kNumExpertParts; ++p) {
        const ExpertPart part = static_cast<ExpertPart>(p);
        sources.emplace_back(layout.mapped(il, e, part), layout.extent(il, e, part).length);
      }
    }
  }
  std::sort(sources.begin(), sources.end(),
            [](const auto& a, const auto& b) { return a.data() < b.data(); });
  for (size_t i = 0; i < sources.size() && s->copied_;) {
    const uint8_t* begin = sources[i].data();
    const uint8_t* end = begin + sources[i].size();
    for (++i; i < sources.size() && sources[i].data() == end; ++i) end += sources[i].size();
    s->copied_(begin, static_cast<uint64_t>(end - begin));
  }
  return s;
}

void ResidentStore::ReleaseSource(uint32_t il, uint32_t e) const {
  if (!copied_) return;
  for (int p = 0; p < kNumExpertParts; ++p) {
    const ExpertPart part = static_cast<ExpertPart>(p);
    copied_(layout_.mapped(il, e, part), layout_.extent(il, e, part).length);
  }
}

void ResidentStore::Copy(uint32_t il, uint32_t e) {
  const int32_t position = position_[size_t{il} * layout_.n_expert() + e];
  uint8_t* at[kNumExpertParts];
  for (int p = 0; p < kNumExpertParts; ++p) {
    const ExpertPart part = static_cast<ExpertPart>(p);
    const uint64_t stride = layout_.extent(il, e, part).length;
    at[p] = copies_[il][p].data() + static_cast<uint64_t>(position) * stride;
    std::memcpy(at[p], layout_.mapped(il, e, part), stride);
  }
  // Into the layout the kernels read fastest (the numbers do not change).
  RepackExpert(layout_, il, at[kGate], at[kUp], at[kDown]);
}

Status ResidentStore::HandOver(uint32_t layer, uint32_t to_device, uint32_t from_device) {
  const size_t row = size_t{layer} * layout_.n_expert();
  MT_CHECK(position_[row + to_device] >= 0 && position_[row + from_device] < 0);
  if (layout_.has_records()) MT_RETURN_IF_ERROR(layout_.CheckMappedRecord(layer, from_device));
  position_[row + from_device] = std::exchange(position_[row + to_device], -1);
  Copy(layer, from_device);
  ReleaseSource(layer, from_device);
  return Status::Ok();
}

ExpertMatrices ResidentStore::Matrices(uint32_t layer, uint32_t expert) const {
  const int32_t position = position_[size_t{layer} * layout_.n_expert() + expert];
  MT_CHECK_MSG(position >= 0, "ResidentStore: an expert another tier owns was asked for");
  auto at = [&](ExpertPart p) {
    return copies_[layer][p].data() +
           static_cast<uint64_t>(position) * layout_.extent(layer, expert, p).length;
  };
  return RepackedMatrices(layout_, layer, at(kGate), at(kUp), at(kDown));
}

Result<std::unique_ptr<MmapStore>> MmapStore::Create(const ExpertLayout& layout, bool warm) {
  // The kernels read the mapping as it is: a pack's panels only where they read panels.
  for (uint32_t il = 0; il < layout.n_layer(); ++il) {
    if (!layout.has_experts(il)) continue;
    const ExpertMatrices m = layout.Matrices(il, nullptr, nullptr, nullptr);
    for (const WeightMatrix* w : {&m.gate, &m.up, &m.down}) {
      if (w->layout == WeightLayout::kPanels && !PanelsPreferred(w->type, w->rows)) {
        return InvalidArgument(
            "{}: the pack stores expert weights as 16-row panels, which the {} kernels cannot "
            "read in place: use --moe-storage resident or stream, or pack with --rows",
            layout.files().front(), IsaName(ActiveIsa()));
      }
    }
  }
  std::unique_ptr<MmapStore> s(new MmapStore(layout));
  s->watch_ = MT_TRY(FileWatch::Open(layout.files()));
  // Experts are read at random: readahead would only pull in neighbours nobody asked for.
  const uintptr_t page = 4096;
  for (std::span<const uint8_t> range : layout.MappedRanges()) {
    const uintptr_t begin = reinterpret_cast<uintptr_t>(range.data());
    const uintptr_t end = begin + range.size();
    const uintptr_t b = begin & ~(page - 1);
    ::madvise(reinterpret_cast<void*>(b), end - b, MADV_RANDOM);
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
  for (std::span<const uint8_t> range : layout_.MappedRanges()) {
    for (uint64_t off = 0; off < range.size() && !stop_warm_; off += 4096) sink = sink ^ range[off];
    if (stop_warm_) break;
  }
  (void)sink;
}

Status MmapStore::CheckFiles() { return watch_.Check(); }

ExpertMatrices MmapStore::Matrices(uint32_t layer, uint32_t expert) const {
  return layout_.Matrices(layer, layout_.mapped(layer, expert, kGate),
                          layout_.mapped(layer, expert, kUp), layout_.mapped(layer, expert, kDown));
}

}  // namespace mt
