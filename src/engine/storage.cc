#include "engine/storage.h"

#include <algorithm>
#include <cmath>

#include "base/memory_info.h"
#include "base/units.h"
#include "engine/model.h"
#include "engine/routing_stats.h"
#include "experts/simple_stores.h"
#include "experts/stream_store.h"

namespace mt {

const char* MoeStorageName(MoeStorage m) {
  switch (m) {
    case MoeStorage::kAuto:
      return "auto";
    case MoeStorage::kResident:
      return "resident";
    case MoeStorage::kMmap:
      return "mmap";
    case MoeStorage::kStream:
      return "stream";
  }
  return "?";
}

Result<MoeStorage> ParseMoeStorage(const std::string& s) {
  for (MoeStorage m :
       {MoeStorage::kAuto, MoeStorage::kResident, MoeStorage::kMmap, MoeStorage::kStream}) {
    if (s == MoeStorageName(m)) return m;
  }
  return InvalidArgument("--moe-storage: '{}' is not one of auto, resident, mmap, stream", s);
}

Result<IoBackend> ParseIoBackend(const std::string& s) {
  if (s == "auto") return IoBackend::kAuto;
  if (s == "uring") return IoBackend::kUring;
  if (s == "pread") return IoBackend::kPread;
  return InvalidArgument("--io: '{}' is not one of auto, uring, pread", s);
}

Result<DirectMode> ParseDirectMode(const std::string& s) {
  if (s == "auto") return DirectMode::kAuto;
  if (s == "on") return DirectMode::kOn;
  if (s == "off") return DirectMode::kOff;
  return InvalidArgument("--direct: '{}' is not one of auto, on, off", s);
}

Result<BytesOrPercent> ParseBytesOrPercent(std::string_view flag, const std::string& s) {
  BytesOrPercent out;
  if (!s.empty() && s.back() == '%') {
    try {
      size_t used = 0;
      out.percent = std::stod(s.substr(0, s.size() - 1), &used);
      if (used != s.size() - 1) throw std::invalid_argument(s);
    } catch (const std::exception&) {
      return InvalidArgument("{}: '{}' is not a percentage", flag, s);
    }
    if (!(*out.percent > 0 && *out.percent <= 100)) {
      return InvalidArgument("{}: {} is not in (0, 100]", flag, s);
    }
    return out;
  }
  Result<uint64_t> bytes = ParseBytes(s);
  if (!bytes.ok()) return bytes.status().WithContext(flag);
  out.bytes = bytes.value();
  return out;
}

Status ParseExpertCache(const std::string& s, StorageOptions* options) {
  const BytesOrPercent size = MT_TRY(ParseBytesOrPercent("--expert-cache", s));
  options->expert_cache = size.bytes;
  options->expert_cache_pct = size.percent;
  return Status::Ok();
}

std::string StoragePlan::ToString() const {
  return fmt::format(
             "memory plan: budget {} ({}), reserve {}, dense weights {}{}, KV cache {}{}, scratch "
             "{}, "
             "experts {} in {} mode{}",
             HumanBytes(budget), budget_source, HumanBytes(reserve), HumanBytes(dense),
             dense_on_device == 0
                 ? std::string()
                 : fmt::format(" (and {} on the device only)", HumanBytes(dense_on_device)),
             HumanBytes(kv_cache), kv_layout.empty() ? "" : " (" + kv_layout + ")",
             HumanBytes(scratch), HumanBytes(experts_total), MoeStorageName(mode),
             mode == MoeStorage::kStream ? fmt::format(" (cache {}, {} experts)",
                                                       HumanBytes(expert_cache), expert_cache_slots)
             : mode == MoeStorage::kResident
                 ? (experts_on_device > 0 ? fmt::format(" ({} in RAM, the rest on the device)",
                                                        HumanBytes(expert_cache))
                                          : std::string(" (all in RAM)"))
                 : std::string(" (page cache)")) +
         (gpu.empty() ? std::string() : "; " + gpu);
}

namespace {

// --expert-cache N% as a fraction of the experts, if given so.
std::optional<double> CacheFraction(const StorageOptions& o) {
  if (!o.expert_cache_pct) return std::nullopt;
  return *o.expert_cache_pct / 100;
}

// The stream tier's cache: `fraction` of the experts if set, else `bytes`.
StreamOptions CacheShape(const Model& model, std::optional<double> fraction, uint64_t bytes) {
  StreamOptions so;
  so.cache_fraction = fraction;
  so.cache_bytes = bytes;
  so.min_slots = model.hparams().n_expert_used;
  return so;
}

}  // namespace

Result<StoragePlan> PlanStorage(const Model& model, uint64_t kv_bytes, uint64_t scratch_bytes,
                                const StorageOptions& o) {
  StoragePlan p;
  if (o.mem_budget) {
    p.budget = *o.mem_budget;
    p.budget_source = "--mem-budget";
  } else {
    MemoryInfo mi = MT_TRY(ReadMemoryInfo());
    p.budget = mi.available();
    p.budget_source = mi.cgroup_limit && *mi.cgroup_limit < mi.mem_available
                          ? fmt::format("cgroup limit in {}", mi.cgroup_limit_file)
                          : std::string("MemAvailable");
    // Leave room for the allocator, thread stacks, libraries and the page cache's needs.
    p.reserve = std::max<uint64_t>(uint64_t{256} << 20, p.budget / 20);
  }
  p.dense = model.dense_bytes();
  p.dense_on_device = model.left_to_device_bytes();
  p.kv_cache = kv_bytes;
  p.scratch = scratch_bytes;
  p.experts_total = model.expert_layout().total_bytes();
  p.experts_on_device = o.on_device_bytes;
  const uint64_t in_ram = p.experts_total - p.experts_on_device;  // resident
  p.device_in_ram = o.device_in_ram;
  const uint64_t fixed = p.dense + p.kv_cache + p.scratch + p.reserve + p.device_in_ram;
  if (fixed > p.budget) {
    return Status(
        StatusCode::kResourceExhausted,
        fmt::format("dense weights {} + KV cache {} + scratch {} + reserve {}{} = {} exceed "
                    "the memory budget of {} ({}): lower -c{}, or raise --mem-budget",
                    HumanBytes(p.dense), HumanBytes(p.kv_cache), HumanBytes(p.scratch),
                    HumanBytes(p.reserve),
                    p.device_in_ram ? " + the device's memory in RAM " + HumanBytes(p.device_in_ram)
                                    : std::string(),
                    HumanBytes(fixed), HumanBytes(p.budget), p.budget_source,
                    p.device_in_ram ? " or --gpu-expert-cache" : ""));
  }
  const uint64_t room = p.budget - fixed;
  p.mode = o.mode;
  if (p.mode == MoeStorage::kAuto) {
    p.mode = in_ram <= room ? MoeStorage::kResident : MoeStorage::kStream;
  }
  switch (p.mode) {
    case MoeStorage::kResident:
      if (in_ram > room) {
        return Status(StatusCode::kResourceExhausted,
                      fmt::format("--moe-storage resident needs {} for the experts but the budget "
                                  "leaves {}: use --moe-storage stream or mmap",
                                  HumanBytes(in_ram), HumanBytes(room)));
      }
      p.expert_cache = in_ram;
      break;
    case MoeStorage::kMmap:
      p.expert_cache = 0;
      break;
    case MoeStorage::kStream:
      if (o.expert_cache) {
        p.expert_cache = *o.expert_cache;
      } else {
        // N% of the experts (by default all of them, as far as the budget goes) in slots as
        // the stream tier sizes them: the plan counts the pool it will really allocate (slots
        // are staged for O_DIRECT, and hold a layer's top-k).
        SlotPlan pool = MT_TRY(StreamStore::PlanSlots(
            model.expert_layout(), CacheShape(model, CacheFraction(o).value_or(1.0), 0)));
        p.expert_cache = o.expert_cache_pct ? pool.bytes() : std::min(room, pool.bytes());
        if (o.expert_cache_pct) p.expert_cache_slots = pool.total_slots();
      }
      if (p.expert_cache > room && !o.mem_budget) {
        return Status(StatusCode::kResourceExhausted,
                      fmt::format("--expert-cache {} is more than the {} the budget leaves",
                                  HumanBytes(p.expert_cache), HumanBytes(room)));
      }
      // A byte budget's slots; one too small is refused by the stream tier, with the sizes
      // it needs.
      if (!o.expert_cache_pct) {
        Result<SlotPlan> slots = StreamStore::PlanSlots(
            model.expert_layout(), CacheShape(model, std::nullopt, p.expert_cache));
        if (slots.ok()) p.expert_cache_slots = slots->total_slots();
      }
      break;
    case MoeStorage::kAuto:
      break;
  }
  return p;
}

std::vector<uint64_t> ExpertBytesPerLayer(const Model& model) {
  std::vector<uint64_t> bytes;
  for (uint32_t l = 0; l < model.expert_layout().n_layer(); ++l) {
    bytes.push_back(model.expert_layout().spec(l).bytes());
  }
  return bytes;
}

Result<std::unique_ptr<ExpertStore>> CreateExpertStore(const Model& model, const StoragePlan& plan,
                                                       const StorageOptions& o,
                                                       const RoutingStats* profile,
                                                       ThreadPool* pool) {
  const ExpertLayout& layout = model.expert_layout();
  switch (plan.mode) {
    case MoeStorage::kResident: {
      std::unique_ptr<ResidentStore> s = MT_TRY(ResidentStore::Create(
          layout, pool, o.on_device,
          [file = &model.gguf()](const uint8_t* m, uint64_t n) { file->ReleasePages(m, n); }));
      return std::unique_ptr<ExpertStore>(std::move(s));
    }
    case MoeStorage::kMmap: {
      std::unique_ptr<MmapStore> s = MT_TRY(MmapStore::Create(layout, o.warm));
      return std::unique_ptr<ExpertStore>(std::move(s));
    }
    case MoeStorage::kStream:
    case MoeStorage::kAuto: {
      std::unique_ptr<IoEngine> io =
          MT_TRY(o.make_io ? o.make_io() : CreateIoEngine(o.io, o.io_queue_depth));
      StreamOptions so = CacheShape(model, CacheFraction(o), plan.expert_cache);
      so.direct = o.direct;
      so.policy = o.eviction;
      if (o.eviction == "placement") {
        if (profile == nullptr) {
          return InvalidArgument("--eviction placement needs routing statistics: --placement FILE");
        }
        so.score = profile->Scores(ExpertBytesPerLayer(model));
      }
      std::unique_ptr<StreamStore> s = MT_TRY(StreamStore::Create(layout, std::move(io), so));
      return std::unique_ptr<ExpertStore>(std::move(s));
    }
  }
  return InvalidArgument("unknown storage mode");
}

}  // namespace mt
