#include "experts/stream_store.h"

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

uint64_t StreamStore::SlotBytes(const ExpertLayout& layout) {
  uint64_t bytes = 0;
  for (uint32_t il = 0; il < layout.n_layer(); ++il) {
    const ExpertSpec& spec = layout.spec(il);
    // A pack's record starts aligned: it is read whole, rounded up to the alignment.
    const uint64_t need =
        layout.has_records()
            ? RoundUp(layout.record_shape(il).length, kAlign)
            : StagedBytes(spec.gate_bytes()) + StagedBytes(spec.up_bytes()) +
                  StagedBytes(spec.down_bytes());
    bytes = std::max(bytes, need);
  }
  return bytes;
}

uint64_t StreamStore::SlotsForFraction(const ExpertLayout& layout, double fraction) {
  const uint64_t all = uint64_t{layout.n_layer()} * layout.n_expert();
  return std::min<uint64_t>(all, static_cast<uint64_t>(std::ceil(fraction * all)));
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
  s->slot_bytes_ = SlotBytes(layout);
  const uint64_t all = uint64_t{layout.n_layer()} * layout.n_expert();
  const uint64_t n_slots =
      options.cache_fraction
          ? SlotsForFraction(layout, *options.cache_fraction)
          : (s->slot_bytes_ ? std::min(all, options.cache_bytes / s->slot_bytes_) : 0);
  if (n_slots < std::max<uint32_t>(options.min_slots, 1)) {
    return InvalidArgument(
        "the expert cache holds {} experts of {} bytes, but one layer needs {}: raise "
        "--expert-cache to at least {} bytes ({:.1f}%)",
        n_slots, s->slot_bytes_, options.min_slots, uint64_t{options.min_slots} * s->slot_bytes_,
        100.0 * options.min_slots / all);
  }
  Result<AlignedBuffer> pool = AlignedBuffer::Allocate(n_slots * s->slot_bytes_);
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
  s->slots_.resize(n_slots);
  s->filled_.assign(n_slots, 0);
  if (n_slots == all) s->repack_after_uses_ = 1;
  for (uint32_t il = 0; il < layout.n_layer(); ++il) {
    s->in_kernel_layout_.push_back(InKernelLayout(layout, il));
  }
  for (int64_t i = static_cast<int64_t>(n_slots) - 1; i >= 0; --i) {
    s->free_.push_back(static_cast<int32_t>(i));
  }
  s->slot_of_.assign(uint64_t{layout.n_layer()} * layout.n_expert(), -1);
  s->policy_ = MakeEvictionPolicy(options.policy, static_cast<int32_t>(n_slots),
                                  layout.n_layer() * layout.n_expert(), options.score);
  if (s->policy_ == nullptr) {
    return InvalidArgument("unknown eviction policy '{}' (lru, lfu, placement)", options.policy);
  }
  s->prefetch_share_ = options.prefetch_share;
  s->min_slots_ = std::max<uint32_t>(options.min_slots, 1);
  for (const std::string& path : layout.files()) {
    Result<int> f = s->io_->AddFile(path, options.direct);
    if (!f.ok()) return f.status();
    s->files_.push_back(f.value());
    if (!s->io_->is_direct(f.value())) s->direct_ = false;
  }
  if (!s->direct_) {
    Log(LogLevel::kWarn, "O_DIRECT is not supported for {}; expert reads go through the page "
        "cache", layout.files().front());
  } else if (TransparentHugePageMode() == "never") {
    // The slot pool asks for huge pages (MADV_HUGEPAGE); "never" refuses even that.
    Log(LogLevel::kWarn, "transparent huge pages are off (/sys/kernel/mm/transparent_hugepage/"
        "enabled: never), so the expert cache lies on 4 KiB pages, into which O_DIRECT reads "
        "ran at a third of the rate on a test VM (docs/tiering.md); 'madvise' there lets "
        "moetier use them");
  }
  Result<FileWatch> watch = FileWatch::Open(layout.files());
  if (!watch.ok()) return watch.status();
  s->watch_ = std::move(watch.value());
  s->stats_.tier = "stream";
  s->stats_.layers.resize(layout.n_layer());
  return s;
}

void StreamStore::ResetStats() {
  TierStats fresh;
  fresh.tier = "stream";
  fresh.layers.resize(layout_.n_layer());
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
  if (slots_[s].pins++ == 0 && slots_[s].state == SlotState::kReady) policy_->Remove(s);
}

void StreamStore::Release(int32_t s) {
  Slot& slot = slots_[s];
  --slot.pins;
  if (slot.corrupt) {
    // Failed Verify: its bytes go, whatever pinned them, and the next demand reads again.
    if (slot.placed) {
      slot.placed = false;
      --slot.pins;
    }
    if (slot.pins > 0) return;
    ++stats_.total.read_errors;
    ++stats_.layers[slot.layer].read_errors;
    DropSlot(s);
    return;
  }
  if (slot.pins == 0 && slot.state == SlotState::kReady) policy_->Insert(s);
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
  policy_->Remove(s);
  if (slot.layer >= 0) SlotOf(slot.layer, slot.expert) = -1;
  slot = Slot{};
  free_.push_back(s);
}

int32_t StreamStore::TakeSlot(bool for_prefetch) {
  if (for_prefetch && prefetch_slots_ >= prefetch_share_ * static_cast<double>(slots_.size())) {
    return -1;
  }
  if (!free_.empty()) {
    const int32_t s = free_.back();
    free_.pop_back();
    return s;
  }
  const int32_t v = policy_->Victim();
  if (v < 0) return -1;
  Slot& slot = slots_[v];
  ++stats_.total.evictions;
  ++stats_.layers[slot.layer].evictions;
  Retire(v);
  policy_->Remove(v);
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
  policy_->Assign(s, layer * layout_.n_expert() + expert);
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
    queued_.push_back(ReadOp{files_[rec.file], rec.offset, RoundUp(rec.length, kAlign),
                             SlotData(s), uint64_t(s) * 4 + kRecordTag, untouched});
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
      Slot& slot = slots_[op.tag / 4];
      if (slot.error.ok()) slot.error = st;
      if (--slot.parts_pending == 0) {
        auto it = std::find(waiting_.begin(), waiting_.end(), static_cast<int32_t>(op.tag / 4));
        if (it != waiting_.end()) {
          waiting_.erase(it);
          failed_.push_back(static_cast<int32_t>(op.tag / 4));
        } else {
          DropSlot(static_cast<int32_t>(op.tag / 4));
        }
      }
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
      const uint64_t payload =
          what == kRecordTag ? layout_.spec(slot.layer).bytes() : ext.length;
      stats_.total.bytes_physical += done[i].result;
      layer.bytes_physical += done[i].result;
      stats_.total.bytes_payload += payload;
      layer.bytes_payload += payload;
      // Its checksum is checked at its first hand-out (NextReady), not here.
      if (what == kRecordTag) slot.unchecked = true;
    }
    if (--slot.parts_pending > 0) continue;
    if (slot.placing) {
      slot.placing = false;
      --placing_;
    }
    if (!slot.error.ok()) {
      if (slot.placed) {
        slot.placed = false;
        --slot.pins;
      }
      ++stats_.total.read_errors;
      ++layer.read_errors;
      EndPrefetch(s);
      if (slot.demanded) {
        waiting_.erase(std::find(waiting_.begin(), waiting_.end(), s));
        failed_.push_back(s);
      } else {
        DropSlot(s);
      }
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
      policy_->Insert(s);
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
  if (layer <= layer_) policy_->StartPass();
  layer_ = layer;
  Reap(false);  // pick up finished prefetches first, so they count as hits

  TierCounters& lc = stats_.layers[layer];
  for (int32_t e : experts) {
    ++lc.requests;
    ++stats_.total.requests;
    policy_->Access(layer * layout_.n_expert() + static_cast<uint32_t>(e));
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
    s = TakeSlot(false);
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
    if (slots_[h].pins == 0) policy_->Insert(h);
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
      const int32_t s = TakeSlot(false);
      if (s < 0) break;
      auto [layer, e] = backlog_.front();
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
                    fmt::format("the expert cache is too small: all {} slots are held by experts "
                                "in use; raise --expert-cache",
                                slots_.size()));
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
    const int32_t s = TakeSlot(true);
    if (s < 0) break;
    StartLoad(s, layer, static_cast<uint32_t>(e));
    slots_[s].prefetch = true;
    slots_[s].prefetched_unused = true;
    ++prefetch_slots_;
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
  // Keep room for demand: one layer's top-k stays unplaced whatever the caller asks (the
  // caller's share, --placement-share, is the usual limit).
  const uint32_t cap = std::min<uint32_t>(max_slots, n_slots() - std::min(n_slots(), min_slots_));
  uint32_t n = 0;
  for (auto [layer, expert] : experts) {
    if (n >= cap) break;
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
      s = TakeSlot(false);
      if (s < 0) {
        to_place_.clear();  // everything else is pinned: placement stops here
        return;
      }
      StartLoad(s, layer, expert);
      slots_[s].placing = true;
      ++placing_;
    } else if (slots_[s].state == SlotState::kReady && slots_[s].pins == 0) {
      policy_->Remove(s);  // already cached: just pin it
    }
    Slot& slot = slots_[s];
    if (!slot.placed) {
      slot.placed = true;
      ++slot.pins;  // never released: a placed expert is never evicted
      ++stats_.total.placed;
      ++stats_.layers[layer].placed;
    }
  }
}

void StreamStore::EndPrefetch(int32_t s) {
  if (slots_[s].prefetch) {
    slots_[s].prefetch = false;
    --prefetch_slots_;
  }
}

}  // namespace mt
