#include "experts/stream_store.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/log.h"
#include "base/memory_info.h"
#include "experts/kernel_layout.h"
#include "experts/record_checksum.h"

namespace mt {
namespace {

constexpr uint64_t kAlign = kDirectIoAlignment;

uint64_t RoundUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// A part of `len` payload bytes at any file offset needs at most this much aligned room.
uint64_t StagedBytes(uint64_t len) { return RoundUp(len, kAlign) + kAlign; }

// Where part p starts inside a slot for a layer's spec.
std::array<uint64_t, 3> StagedOffsets(const ExpertSpec& s) {
  const uint64_t g = StagedBytes(s.gate_bytes()), u = StagedBytes(s.up_bytes());
  return {0, g, g + u};
}

// The tag of a read: slot * 4 + what it reads (a part, or the whole record of a pack).
constexpr uint64_t kRecordTag = 3;
constexpr const char* kWhat[4] = {"gate", "up", "down", "record"};

uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

uint64_t SlotPlan::bytes() const {
  uint64_t total = 0;
  for (size_t c = 0; c < slot_bytes.size(); ++c) total += n_slots[c] * slot_bytes[c];
  return total;
}

uint32_t SlotPlan::total_slots() const {
  uint32_t total = 0;
  for (uint32_t n : n_slots) total += n;
  return total;
}

Result<SlotPlan> StreamStore::PlanSlots(const ExpertLayout& layout, const StreamOptions& options) {
  SlotPlan plan;
  std::vector<uint64_t> need(layout.n_layer(), 0);  // (n_layer) each layer's slot size
  for (uint32_t il = 0; il < layout.n_layer(); ++il) {
    if (!layout.has_experts(il)) continue;
    const ExpertSpec& spec = layout.spec(il);
    // A pack's record starts aligned: it is read whole, rounded up to the alignment.
    need[il] = layout.has_records()
                   ? RoundUp(layout.record_shape(il).length, kAlign)
                   : StagedBytes(spec.gate_bytes()) + StagedBytes(spec.up_bytes()) +
                         StagedBytes(spec.down_bytes());
    plan.slot_bytes.push_back(need[il]);
  }
  std::sort(plan.slot_bytes.begin(), plan.slot_bytes.end());
  plan.slot_bytes.erase(std::unique(plan.slot_bytes.begin(), plan.slot_bytes.end()),
                        plan.slot_bytes.end());
  const size_t n_class = plan.slot_bytes.size();
  std::vector<uint64_t> experts(n_class, 0);  // (n_class) experts of each class
  for (uint32_t il = 0; il < layout.n_layer(); ++il) {
    if (!layout.has_experts(il)) {
      plan.layer_class.push_back(SlotPlan::kNoClass);
      continue;
    }
    const auto c = std::lower_bound(plan.slot_bytes.begin(), plan.slot_bytes.end(), need[il]) -
                   plan.slot_bytes.begin();
    plan.layer_class.push_back(static_cast<uint32_t>(c));
    experts[c] += layout.n_expert();
  }
  const uint64_t all = uint64_t{layout.n_expert_layers()} * layout.n_expert();
  const uint32_t k = std::max<uint32_t>(options.min_slots, 1);
  std::vector<uint64_t> least(n_class);  // (n_class) one layer's top-k, or all there are
  uint64_t floor_bytes = 0;              // every class holding its least
  for (size_t c = 0; c < n_class; ++c) {
    least[c] = std::min<uint64_t>(k, experts[c]);
    floor_bytes += least[c] * plan.slot_bytes[c];
  }
  plan.n_slots.assign(n_class, 0);
  if (options.cache_fraction) {
    const double f = *options.cache_fraction;
    const uint64_t held = std::min<uint64_t>(all, static_cast<uint64_t>(std::ceil(f * all)));
    if (held < k) {
      return InvalidArgument(
          "the expert cache holds {} experts, but one layer needs {}: raise --expert-cache to "
          "at least {:.1f}% ({} bytes)",
          held, k, all ? 100.0 * k / all : 100.0, floor_bytes);
    }
    for (size_t c = 0; c < n_class; ++c) {
      const uint64_t n = static_cast<uint64_t>(std::ceil(f * experts[c]));
      plan.n_slots[c] = static_cast<uint32_t>(std::clamp<uint64_t>(n, least[c], experts[c]));
    }
    return plan;
  }
  if (options.cache_bytes < floor_bytes) {
    return InvalidArgument(
        "the expert cache of {} bytes holds fewer experts than one layer needs ({}) in slots "
        "of each size ({}): raise --expert-cache to at least {} bytes",
        options.cache_bytes, k, fmt::join(plan.slot_bytes, ", "), floor_bytes);
  }
  // The same share of every class's experts, but at least k slots per class: classes that
  // the share leaves under k get k, and the rest share what is left.
  std::vector<bool> fixed(n_class, false);
  for (bool changed = true; changed;) {
    changed = false;
    uint64_t left = options.cache_bytes, open_bytes = 0;
    for (size_t c = 0; c < n_class; ++c) {
      if (fixed[c])
        left -= plan.n_slots[c] * plan.slot_bytes[c];
      else
        open_bytes += experts[c] * plan.slot_bytes[c];
    }
    const double share = open_bytes ? std::min(1.0, double(left) / double(open_bytes)) : 0;
    for (size_t c = 0; c < n_class; ++c) {
      if (fixed[c]) continue;
      plan.n_slots[c] = static_cast<uint32_t>(std::floor(share * double(experts[c])));
      if (plan.n_slots[c] < least[c]) {
        plan.n_slots[c] = static_cast<uint32_t>(least[c]);
        fixed[c] = true;
        changed = true;
      }
    }
  }
  // What rounding left over goes to the classes furthest behind, a slot at a time.
  for (uint64_t left = options.cache_bytes - plan.bytes();;) {
    size_t best = n_class;
    for (size_t c = 0; c < n_class; ++c) {
      if (plan.n_slots[c] == experts[c] || plan.slot_bytes[c] > left) continue;
      if (best == n_class || plan.n_slots[c] * experts[best] < plan.n_slots[best] * experts[c]) {
        best = c;
      }
    }
    if (best == n_class) break;
    ++plan.n_slots[best];
    left -= plan.slot_bytes[best];
  }
  return plan;
}

StreamStore::StreamStore(const ExpertLayout& layout, std::unique_ptr<IoEngine> io)
    : layout_(layout), io_(std::move(io)) {}

StreamStore::~StreamStore() {
  stop_populate_ = true;
  if (populate_.joinable()) populate_.join();
  // The device may still be writing into the pool: wait for every read before freeing it.
  while (in_flight_ > 0) Reap(true);
}

Result<std::unique_ptr<StreamStore>> StreamStore::Create(const ExpertLayout& layout,
                                                         std::unique_ptr<IoEngine> io,
                                                         const StreamOptions& options) {
  std::unique_ptr<StreamStore> s(new StreamStore(layout, std::move(io)));
  SlotPlan plan = MT_TRY(PlanSlots(layout, options));
  Result<AlignedBuffer> pool = AlignedBuffer::Allocate(plan.bytes());
  if (!pool.ok()) return pool.status().WithContext("expert cache");
  s->pool_ = std::move(pool.value());
  s->populate_ = std::thread([store = s.get()] {
    // One huge page a call: each call holds the process's mmap lock, and every mmap of
    // the other threads (the rest of start-up: KV cache, scratch) waits for it. With 32 MiB
    // calls on a VM that zeroes fresh memory at 0.5 GB/s, qwen3-30b-a3b started 10 s later.
    constexpr size_t kChunk = size_t{2} << 20;
    AlignedBuffer& pool = store->pool_;
    for (size_t off = 0; off < pool.size() && !store->stop_populate_; off += kChunk) {
      // Advisory: a page it cannot populate is faulted in by its first read, as before.
      if (!pool.Populate(off, std::min(kChunk, pool.size() - off)).ok()) return;
    }
  });
  const uint32_t n_slots = plan.total_slots();
  s->slots_.resize(n_slots);
  s->filled_.assign(n_slots, 0);
  const uint32_t n_keys = layout.n_layer() * layout.n_expert();  // (layer, expert) keys
  if (n_slots == layout.n_expert_layers() * layout.n_expert()) s->repack_after_uses_ = 1;
  for (uint32_t il = 0; il < layout.n_layer(); ++il) {
    s->in_kernel_layout_.push_back(InKernelLayout(layout, il));
  }
  s->layer_class_ = plan.layer_class;
  uint64_t at = 0;
  for (size_t c = 0; c < plan.slot_bytes.size(); ++c) {
    SlotClass& sc = s->classes_.emplace_back();
    sc.slot_bytes = plan.slot_bytes[c];
    sc.first_slot = static_cast<int32_t>(s->slot_at_.size());
    sc.n_slots = static_cast<int32_t>(plan.n_slots[c]);
    for (int32_t i = sc.n_slots - 1; i >= 0; --i) sc.free.push_back(sc.first_slot + i);
    for (int32_t i = 0; i < sc.n_slots; ++i, at += sc.slot_bytes) {
      s->slot_at_.push_back(at);
      s->slot_class_.push_back(static_cast<uint32_t>(c));
    }
    sc.policy = MakeEvictionPolicy(options.policy, sc.n_slots, n_keys, options.score);
    if (sc.policy == nullptr) {
      return InvalidArgument("unknown eviction policy '{}' (lru, lfu, placement)", options.policy);
    }
  }
  s->slot_of_.assign(n_keys, -1);
  s->prefetch_share_ = options.prefetch_share;
  s->min_slots_ = std::max<uint32_t>(options.min_slots, 1);
  for (const std::string& path : layout.files()) {
    int f = MT_TRY(s->io_->AddFile(path, options.direct));
    s->files_.push_back(f);
    if (!s->io_->is_direct(f)) s->direct_ = false;
  }
  if (!s->direct_) {
    Log(LogLevel::kWarn,
        "O_DIRECT is not supported for {}; expert reads go through the page "
        "cache",
        layout.files().front());
  } else if (TransparentHugePageMode() == "never") {
    // The slot pool asks for huge pages (MADV_HUGEPAGE); "never" refuses even that.
    Log(LogLevel::kWarn,
        "transparent huge pages are off (/sys/kernel/mm/transparent_hugepage/"
        "enabled: never), so the expert cache lies on 4 KiB pages, into which O_DIRECT reads "
        "ran at a third of the rate on a test VM (docs/journal/tiering.md); 'madvise' there lets "
        "moetier use them");
  }
  s->watch_ = MT_TRY(FileWatch::Open(layout.files()));
  s->stats_.tier = "stream";
  s->stats_.layers.resize(layout.n_layer());
  s->stats_.cache_slots = n_slots;
  return s;
}

bool StreamStore::Residency(std::vector<uint8_t>* out) const {
  out->assign(size_t{layout_.n_layer()} * layout_.n_expert(), 0);
  for (const Slot& slot : slots_) {
    if (slot.state == SlotState::kReady && slot.layer >= 0) {
      (*out)[size_t(slot.layer) * layout_.n_expert() + size_t(slot.expert)] = 1;
    }
  }
  return true;
}

void StreamStore::ResetStats() {
  TierStats fresh;
  fresh.tier = "stream";
  fresh.layers.resize(layout_.n_layer());
  fresh.cache_slots = n_slots();
  stats_ = std::move(fresh);
  if (idle_layer_ >= 0) idle_since_ns_ = NowNs();  // count the open gap from here
}

void StreamStore::DiskBusy() {
  busy_.Start();
  if (idle_layer_ < 0) return;
  const uint64_t gap = NowNs() - idle_since_ns_;
  stats_.total.disk_idle_ns += gap;
  stats_.layers[idle_layer_].disk_idle_ns += gap;
  idle_layer_ = -1;
}

void StreamStore::DiskIdle() {
  if (!busy_.running()) return;  // idle already (Reap runs with nothing in flight too)
  busy_.Stop(&stats_.read_busy_ns);
  idle_layer_ = static_cast<int32_t>(layer_);
  idle_since_ns_ = NowNs();
}

void StreamStore::Pin(int32_t s) {
  if (slots_[s].pins++ == 0 && slots_[s].state == SlotState::kReady) Unevictable(s);
}

void StreamStore::Release(int32_t s) {
  Slot& slot = slots_[s];
  --slot.pins;
  if (slot.corrupt) {
    // Failed Verify: its bytes go, whatever pinned them, and the next demand reads again.
    if (slot.placed) {
      slot.placed = false;
      --ClassOfSlot(s).placed_slots;
      --slot.pins;
    }
    if (slot.pins > 0) return;
    ++stats_.total.read_errors;
    ++stats_.layers[slot.layer].read_errors;
    DropSlot(s);
    return;
  }
  if (slot.pins == 0 && slot.state == SlotState::kReady) Evictable(s);
}

void StreamStore::Retire(int32_t s) {
  Slot& slot = slots_[s];
  if (slot.prefetched_unused && slot.layer >= 0) {
    const uint64_t bytes = layout_.spec(slot.layer).bytes();
    stats_.total.prefetch_wasted_bytes += bytes;
    stats_.layers[slot.layer].prefetch_wasted_bytes += bytes;
  }
}

void StreamStore::DropSlot(int32_t s) {
  Slot& slot = slots_[s];
  Retire(s);
  Unevictable(s);
  if (slot.layer >= 0) SlotOf(slot.layer, slot.expert) = -1;
  slot = Slot{};
  ClassOfSlot(s).free.push_back(s);
}

int32_t StreamStore::TakeSlot(uint32_t layer, bool for_prefetch) {
  SlotClass& c = classes_[layer_class_[layer]];
  // A prefetch holds at most its share of the class, and leaves one layer's top-k to demand
  // besides the placed slots (a landed prefetch cannot be evicted until its layer runs).
  if (for_prefetch &&
      (c.prefetch_slots + 1 > prefetch_share_ * static_cast<double>(c.n_slots) ||
       c.n_slots - c.placed_slots - (c.prefetch_slots + 1) < static_cast<int32_t>(min_slots_))) {
    return -1;
  }
  if (!c.free.empty()) {
    const int32_t s = c.free.back();
    c.free.pop_back();
    return s;
  }
  const int32_t local = c.policy->Victim();
  if (local < 0) return -1;
  const int32_t v = c.first_slot + local;
  Slot& slot = slots_[v];
  ++stats_.total.evictions;
  ++stats_.layers[slot.layer].evictions;
  Retire(v);
  c.policy->Remove(local);
  SlotOf(slot.layer, slot.expert) = -1;
  slot = Slot{};
  return v;
}

void StreamStore::StartLoad(int32_t s, uint32_t layer, uint32_t expert) {
  Slot& slot = slots_[s];
  slot.state = SlotState::kLoading;
  slot.layer = static_cast<int32_t>(layer);
  slot.expert = static_cast<int32_t>(expert);
  slot.error = Status::Ok();
  slot.uses = 0;
  slot.repacked = false;
  slot.unchecked = false;
  slot.corrupt = false;
  SlotOf(layer, expert) = s;
  SlotClass& c = ClassOfSlot(s);
  c.policy->Assign(s - c.first_slot, layer * layout_.n_expert() + expert);
  // The slot's first read also faults its pages in (the pool is touched lazily), which a
  // kernel worker had better do than this thread (qwen3-30b-a3b pack, 25 % limit, `run -n
  // 16`: generation 4.50/4.50/4.15 -> 3.69/3.89/3.77 s); later reads go faster inline.
  const bool untouched = !filled_[s];
  filled_[s] = 1;
  if (layout_.has_records()) {
    // One read of the whole record (parts and the padding between them); Reap checks it.
    const ByteExtent rec = layout_.record_extent(layer, expert);
    MT_CHECK(rec.offset % kAlign == 0);
    slot.parts_pending = 1;
    slot.payload_at = layout_.record_shape(layer).part_offset;
    queued_.push_back(ReadOp{files_[rec.file], rec.offset, RoundUp(rec.length, kAlign), SlotData(s),
                             uint64_t(s) * 4 + kRecordTag, untouched});
    ++stats_.total.reads;
    ++stats_.layers[layer].reads;
    return;
  }
  slot.parts_pending = kNumExpertParts;
  const std::array<uint64_t, 3> staged = StagedOffsets(layout_.spec(layer));
  for (int p = 0; p < kNumExpertParts; ++p) {
    const ByteExtent ext = layout_.extent(layer, expert, static_cast<ExpertPart>(p));
    const uint64_t start = ext.offset / kAlign * kAlign;
    const uint64_t head = ext.offset - start;
    slot.payload_at[p] = staged[p] + head;
    queued_.push_back(ReadOp{files_[ext.file], start, RoundUp(head + ext.length, kAlign),
                             SlotData(s) + staged[p], uint64_t(s) * 4 + p, untouched});
  }
  stats_.total.reads += kNumExpertParts;
  stats_.layers[layer].reads += kNumExpertParts;
}

void StreamStore::SubmitQueued() {
  if (queued_.empty()) return;
  if (in_flight_ == 0) DiskBusy();
  Status st = io_->Submit(queued_);
  if (st.ok()) {
    in_flight_ += queued_.size();
  } else {
    // The engine refused the batch: fail every slot in it as if its reads had failed.
    for (const ReadOp& op : queued_) {
      const auto s = static_cast<int32_t>(op.tag / 4);
      Slot& slot = slots_[s];
      if (slot.error.ok()) {
        const ByteExtent ext = ExtentOf(s, op.tag % 4);
        slot.error = IoError("{}: layer {} expert {} ({}): the read at offset {} was refused: {}",
                             layout_.files()[ext.file], slot.layer, slot.expert, kWhat[op.tag % 4],
                             ext.offset, st.message());
      }
      if (--slot.parts_pending == 0) FailLoad(s);
    }
    if (in_flight_ == 0) DiskIdle();
  }
  queued_.clear();
}

ByteExtent StreamStore::ExtentOf(int32_t s, uint64_t what) const {
  const Slot& slot = slots_[s];
  if (what == kRecordTag) return layout_.record_extent(slot.layer, slot.expert);
  return layout_.extent(slot.layer, slot.expert, static_cast<ExpertPart>(what));
}

Status StreamStore::ReadError(int32_t s, uint64_t what, int64_t result, uint64_t wanted) const {
  const Slot& slot = slots_[s];
  const ByteExtent ext = ExtentOf(s, what);
  const std::string& file = layout_.files()[ext.file];
  if (result < 0) {
    return IoError("{}: layer {} expert {} ({}): read at offset {} failed: {}", file, slot.layer,
                   slot.expert, kWhat[what], ext.offset, std::strerror(static_cast<int>(-result)));
  }
  return IoError("{}: layer {} expert {} ({}): short read at offset {}: {} of {} bytes", file,
                 slot.layer, slot.expert, kWhat[what], ext.offset, result, wanted);
}

Status StreamStore::CheckRecord(int32_t s) {
  const Slot& slot = slots_[s];
  const uint64_t sum = RecordChecksum(SlotData(s), layout_.record_shape(slot.layer).length);
  return layout_.CheckRecordSum(slot.layer, slot.expert, sum);
}

void StreamStore::Reap(bool block) {
  ReadCompletion done[32];
  const size_t n = io_->Wait(done, block ? 1 : 0, -1);
  for (size_t i = 0; i < n; ++i) {
    const int32_t s = static_cast<int32_t>(done[i].tag / 4);
    const uint64_t what = done[i].tag % 4;
    Slot& slot = slots_[s];
    --in_flight_;
    const ByteExtent ext = ExtentOf(s, what);
    const uint64_t wanted = ext.offset % kAlign + ext.length;  // through the payload's end
    TierCounters& layer = stats_.layers[slot.layer];
    if (done[i].result < 0 || static_cast<uint64_t>(done[i].result) < wanted) {
      if (slot.error.ok()) slot.error = ReadError(s, what, done[i].result, wanted);
    } else {
      // A record's payload is its parts; the padding between them counts as physical only.
      const uint64_t payload = what == kRecordTag ? layout_.spec(slot.layer).bytes() : ext.length;
      stats_.total.bytes_physical += done[i].result;
      layer.bytes_physical += done[i].result;
      stats_.total.bytes_payload += payload;
      layer.bytes_payload += payload;
      // Its checksum is checked at its first hand-out (NextReady), not here.
      if (what == kRecordTag) slot.unchecked = true;
    }
    if (--slot.parts_pending > 0) continue;
    EndPlacing(s);
    if (!slot.error.ok()) {
      FailLoad(s);
      continue;
    }
    slot.state = SlotState::kReady;
    if (slot.prefetch && !slot.demanded && slot.pins == 0) {
      // Held, not evictable, until its layer has run: the demand of the layers before it
      // would otherwise evict it first (it is the newest load, and often the least used).
      held_.push_back(s);
      continue;
    }
    EndPrefetch(s);  // a finished prefetch is an ordinary cached expert now
    if (slot.demanded) {
      waiting_.erase(std::find(waiting_.begin(), waiting_.end(), s));
      ready_.push_back(s);
    } else if (slot.pins == 0) {
      Evictable(s);
    }
  }
  if (in_flight_ == 0) DiskIdle();
  if (!to_place_.empty()) {
    StartPlacements();
    SubmitQueued();
  }
}

void StreamStore::BeginLayer(uint32_t layer, std::span<const int32_t> experts) {
  // Whatever the previous layer did not take is unpinned (it stays cached).
  for (int32_t s : ready_) {
    slots_[s].demanded = false;
    Release(s);
  }
  for (int32_t s : waiting_) {
    slots_[s].demanded = false;
    --slots_[s].pins;  // still loading: becomes evictable when it lands
  }
  for (int32_t s : failed_) {
    --slots_[s].pins;
    DropSlot(s);
  }
  ready_.clear();
  waiting_.clear();
  failed_.clear();
  backlog_.clear();
  if (layer <= layer_) {
    for (SlotClass& c : classes_) c.policy->StartPass();
  }
  layer_ = layer;
  Reap(false);  // pick up finished prefetches first, so they count as hits

  TierCounters& lc = stats_.layers[layer];
  for (int32_t e : experts) {
    ++lc.requests;
    ++stats_.total.requests;
    classes_[layer_class_[layer]].policy->Access(layer * layout_.n_expert() +
                                                 static_cast<uint32_t>(e));
    int32_t s = SlotOf(layer, static_cast<uint32_t>(e));
    if (s >= 0 && slots_[s].prefetched_unused) {
      slots_[s].prefetched_unused = false;
      const bool ready = slots_[s].state == SlotState::kReady;
      ++(ready ? lc.prefetch_hits : lc.prefetch_joined);
      ++(ready ? stats_.total.prefetch_hits : stats_.total.prefetch_joined);
    }
    if (s >= 0 && slots_[s].state == SlotState::kReady) {
      ++lc.hits;
      ++stats_.total.hits;
      Pin(s);
      slots_[s].demanded = true;
      ready_.push_back(s);
      continue;
    }
    ++lc.misses;
    ++stats_.total.misses;
    if (s >= 0) {  // a read in flight (a prefetch, or left by an earlier step): take it over
      EndPrefetch(s);
      Pin(s);
      slots_[s].demanded = true;
      waiting_.push_back(s);
      continue;
    }
    s = TakeSlot(layer, false);
    if (s < 0) {
      backlog_.push_back({static_cast<int32_t>(layer), e});
      continue;
    }
    StartLoad(s, layer, static_cast<uint32_t>(e));
    Pin(s);
    slots_[s].demanded = true;
    waiting_.push_back(s);
  }
  // Prefetches held for this layer (or an earlier one) that it did not take are ordinary
  // cached experts now.
  std::erase_if(held_, [&](int32_t h) {
    if (slots_[h].layer > static_cast<int32_t>(layer)) return false;
    EndPrefetch(h);
    if (slots_[h].pins == 0) Evictable(h);
    return true;
  });
  SubmitQueued();
}

Status StreamStore::Verify(const ReadyExpert& r) {
  if (!r.unchecked) return Status::Ok();
  const int32_t s = LeaseSlot(r.lease);
  Slot& slot = slots_[s];
  Status status = CheckRecord(s);
  // Only this slot's flags: other threads verify other slots meanwhile.
  if (status.ok()) {
    slot.unchecked = false;
  } else {
    slot.corrupt = true;
  }
  return status;
}

Result<std::optional<ReadyExpert>> StreamStore::NextReady(bool wait, bool defer_checks) {
  for (bool reaped = false;; reaped = true) {
    if (!failed_.empty()) {
      const int32_t s = failed_.front();
      failed_.erase(failed_.begin());
      Status error = slots_[s].error;
      --slots_[s].pins;
      DropSlot(s);
      return error;
    }
    if (!ready_.empty()) {
      const int32_t s = ready_.front();
      ready_.pop_front();
      Slot& slot = slots_[s];
      // An expert that keeps being used is rewritten into the layout the kernels read
      // fastest (no lease is out: one per layer step). Repacking costs about as much as
      // ten uses save, so experts used once or twice before eviction stay as read. A
      // pack's panels are ready at once where the kernels read panels (nothing to rewrite),
      // and must become rows at once where they do not.
      const bool panels_file = layout_.weight_layout() == WeightLayout::kPanels;
      const bool repack = !slot.repacked && (panels_file || ++slot.uses >= repack_after_uses_);
      const bool rewrite = repack && !in_kernel_layout_[slot.layer];
      // Fail closed: a record whose bytes do not match its checksum is never computed with.
      // It is checked at its first use rather than as it lands: the hash pulls the record
      // into the cache just before the kernels read it, and a prefetch never used is never
      // hashed (olmoe pack, 25 % limit: 7.8-8.5 -> 8.6-10.0 tok/s, like not checking at
      // all). A deferred check runs on the thread that computes with the expert (Verify),
      // in parallel with the others'; bytes about to be rewritten are checked here first.
      if (slot.unchecked && (!defer_checks || rewrite)) {
        slot.unchecked = false;
        if (Status bad = CheckRecord(s); !bad.ok()) {
          ++stats_.total.read_errors;
          ++stats_.layers[slot.layer].read_errors;
          --slot.pins;
          DropSlot(s);
          return bad;
        }
      }
      slot.demanded = false;  // handed out: the lease holds the pin now
      uint8_t* const gate = SlotData(s) + slot.payload_at[kGate];
      uint8_t* const up = SlotData(s) + slot.payload_at[kUp];
      uint8_t* const down = SlotData(s) + slot.payload_at[kDown];
      if (rewrite) RepackExpert(layout_, slot.layer, gate, up, down);
      slot.repacked = slot.repacked || repack;
      ExpertMatrices m = slot.repacked ? RepackedMatrices(layout_, slot.layer, gate, up, down)
                                       : layout_.Matrices(slot.layer, gate, up, down);
      return std::optional<ReadyExpert>(
          ReadyExpert{slot.expert, ExpertLease(this, s, m), slot.unchecked});
    }
    if (waiting_.empty() && backlog_.empty()) return std::optional<ReadyExpert>();
    // Experts that found no slot at BeginLayer get one as leases come back.
    while (!backlog_.empty()) {
      auto [layer, e] = backlog_.front();
      const int32_t s = TakeSlot(static_cast<uint32_t>(layer), false);
      if (s < 0) break;
      backlog_.pop_front();
      StartLoad(s, static_cast<uint32_t>(layer), static_cast<uint32_t>(e));
      Pin(s);
      slots_[s].demanded = true;
      waiting_.push_back(s);
    }
    SubmitQueued();
    if (!wait) {
      // Collect what has landed without blocking, once; then report "nothing ready now".
      if (reaped) return std::optional<ReadyExpert>();
      Reap(false);
      continue;
    }
    if (in_flight_ == 0) {
      return Status(StatusCode::kResourceExhausted,
                    fmt::format("the expert cache is too small: all {} slots for layer {}'s "
                                "experts are held by experts in use; raise --expert-cache",
                                n_slots_of_layer(layer_), layer_));
    }
    const uint64_t t0 = NowNs();
    Reap(true);
    const uint64_t stall = NowNs() - t0;
    stats_.total.demand_stall_ns += stall;
    stats_.layers[layer_].demand_stall_ns += stall;
  }
}

void StreamStore::Hint(uint32_t layer, std::span<const int32_t> experts) {
  for (int32_t e : experts) {
    if (SlotOf(layer, static_cast<uint32_t>(e)) >= 0) continue;
    const int32_t s = TakeSlot(layer, true);
    if (s < 0) break;
    StartLoad(s, layer, static_cast<uint32_t>(e));
    slots_[s].prefetch = true;
    slots_[s].prefetched_unused = true;
    ++ClassOfSlot(s).prefetch_slots;
    const uint64_t bytes = layout_.spec(layer).bytes();
    ++stats_.total.prefetch_reads;
    ++stats_.layers[layer].prefetch_reads;
    stats_.total.prefetch_bytes += bytes;
    stats_.layers[layer].prefetch_bytes += bytes;
  }
  SubmitQueued();
}

uint32_t StreamStore::Place(std::span<const std::pair<uint32_t, uint32_t>> experts,
                            uint32_t max_slots) {
  // Each class places at most its part of max_slots (the caller's share, --placement-share)
  // and keeps one layer's top-k unplaced for demand, whatever the caller asks.
  std::vector<uint32_t> room(classes_.size());  // (n_class)
  for (size_t c = 0; c < classes_.size(); ++c) {
    const uint32_t in_class = static_cast<uint32_t>(classes_[c].n_slots);
    room[c] = std::min<uint32_t>(static_cast<uint32_t>(uint64_t{max_slots} * in_class / n_slots()),
                                 in_class - std::min(in_class, min_slots_));
  }
  uint32_t n = 0;
  for (auto [layer, expert] : experts) {
    if (!layout_.has_experts(layer)) continue;  // a profile of another model's layers
    uint32_t& left = room[layer_class_[layer]];
    if (left == 0) continue;
    --left;
    to_place_.push_back({layer, expert});
    ++n;
  }
  StartPlacements();
  SubmitQueued();
  return n;
}

void StreamStore::StartPlacements() {
  constexpr int32_t kMaxPlacingReads = 2;  // experts; demand reads go ahead of the rest
  while (!to_place_.empty() && placing_ < kMaxPlacingReads) {
    auto [layer, expert] = to_place_.front();
    to_place_.pop_front();
    int32_t s = SlotOf(layer, expert);
    if (s < 0) {
      s = TakeSlot(layer, false);
      if (s < 0) {
        to_place_.clear();  // everything else is pinned: placement stops here
        return;
      }
      StartLoad(s, layer, expert);
      slots_[s].placing = true;
      ++placing_;
    } else if (slots_[s].state == SlotState::kReady && slots_[s].pins == 0) {
      Unevictable(s);  // already cached: just pin it
    }
    Slot& slot = slots_[s];
    if (!slot.placed) {
      slot.placed = true;
      ++ClassOfSlot(s).placed_slots;
      ++slot.pins;  // never released: a placed expert is never evicted
      ++stats_.total.placed;
      ++stats_.layers[layer].placed;
    }
  }
}

void StreamStore::EndPlacing(int32_t s) {
  if (slots_[s].placing) {
    slots_[s].placing = false;
    --placing_;
  }
}

void StreamStore::FailLoad(int32_t s) {
  Slot& slot = slots_[s];
  ++stats_.total.read_errors;
  ++stats_.layers[slot.layer].read_errors;
  // Each of these would otherwise hold its count for good: placement would stop at
  // kMaxPlacingReads, the placed slots would stay pinned, prefetch would stay shut off.
  EndPlacing(s);
  if (slot.placed) {
    slot.placed = false;
    --ClassOfSlot(s).placed_slots;
    --slot.pins;
  }
  EndPrefetch(s);
  if (slot.demanded) {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), s));
    failed_.push_back(s);
  } else {
    DropSlot(s);
  }
}

void StreamStore::EndPrefetch(int32_t s) {
  if (slots_[s].prefetch) {
    slots_[s].prefetch = false;
    --ClassOfSlot(s).prefetch_slots;
  }
}

}  // namespace mt
