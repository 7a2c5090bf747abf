// The tiers give bit-identical logits, and the stream tier fails closed: a failed, short or
// corrupt read is an error naming the file, layer, expert and offset, never a wrong number,
// and the same context evaluates correctly afterwards.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "base/units.h"
#include "engine/context.h"
#include "engine/model.h"
#include "experts/stream_store.h"
#include "io/fault_injecting_engine.h"
#include "io/io_test_util.h"
#include "synth/synth_test_util.h"

namespace mt {
namespace {

using testing_synth::SynthModels;

namespace fs = std::filesystem;

class StorageTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    models_ = std::make_unique<SynthModels>("storage-test", 11);
    model_path_ = models_->Get("olmoe-tiny", "q4_k_m");
  }
  static void TearDownTestSuite() { models_.reset(); }

  static std::unique_ptr<Model> Load(const std::string& path = model_path_) {
    auto m = Model::Load(path, LoadOptions{});
    EXPECT_TRUE(m.ok()) << m.status().message();
    return std::move(m.value());
  }

  static std::vector<float> Logits(const Model& m, StorageOptions s, int threads = 2,
                                   Status* status = nullptr) {
    ContextOptions o = Options(std::move(s));
    o.n_threads = threads;
    auto ctx = Context::Create(m, o);
    EXPECT_TRUE(ctx.ok()) << ctx.status().message();
    std::vector<float> logits;
    Status st = (*ctx)->Eval(kTokens, LogitsFor::kAll, &logits);
    if (status)
      *status = st;
    else
      EXPECT_TRUE(st.ok()) << st.message();
    return logits;
  }

  // The context options of these tests: 64 positions, experts as `storage` says.
  static ContextOptions Options(StorageOptions storage) {
    ContextOptions o;
    o.n_ctx = 64;
    o.storage = std::move(storage);
    return o;
  }

  static StorageOptions Stream(const std::string& cache, IoBackend io = IoBackend::kAuto) {
    StorageOptions s;
    s.mode = MoeStorage::kStream;
    s.io = io;
    EXPECT_TRUE(ParseExpertCache(cache, &s).ok());
    return s;
  }

  static inline const std::vector<int32_t> kTokens = {5,  1000, 77, 4242, 9, 31000, 12, 640,
                                                      33, 1,    2,  3,    4, 5,     6};
  static inline std::unique_ptr<SynthModels> models_;
  static inline std::string model_path_;
};

TEST_F(StorageTest, EveryTierGivesTheSameBits) {
  auto m = Load();
  StorageOptions resident;
  resident.mode = MoeStorage::kResident;
  StorageOptions mmap;
  mmap.mode = MoeStorage::kMmap;
  const std::vector<float> want = Logits(*m, resident);
  EXPECT_TRUE(Logits(*m, mmap) == want);
  EXPECT_TRUE(Logits(*m, mmap, 1) == want);
  // An 8 % cache holds just top-k = 4 experts: eviction on every token.
  for (const char* cache : {"100%", "30%", "8%"}) {
    for (IoBackend io : {IoBackend::kUring, IoBackend::kPread}) {
      for (int threads : {1, 2}) {
        EXPECT_TRUE(Logits(*m, Stream(cache, io), threads) == want)
            << cache << " io " << int(io) << " threads " << threads;
      }
    }
  }
}

// What the host copies it holds once: the pages of the file the dense copies, vectors and
// resident experts were read from leave the process (GgufModel::ReleasePages), and stay out
// while it computes. The mapped experts of mmap mode stay mapped: they are what it reads.
TEST_F(StorageTest, TheCopiesSourcePagesLeaveTheProcess) {
  std::unique_ptr<Model> m = Load();
  // Pages of the file mapped in now: the dense matrices' and the experts'.
  auto present = [&](bool experts) {
    uint64_t pages = 0;
    for (const GgufTensor& t : m->gguf().tensors()) {
      if (t.shape.size() < 2) continue;  // vectors: copied into std::vector at load
      if ((t.name.find("_exps") != std::string::npos) != experts) continue;
      pages += io_test::PresentPages(t.data, t.n_bytes);
    }
    return pages;
  };
  EXPECT_EQ(present(false), 0u);  // released once copied, at load
  StorageOptions resident, mmap;
  resident.mode = MoeStorage::kResident;
  mmap.mode = MoeStorage::kMmap;
  const std::vector<float> want = Logits(*m, resident);
  EXPECT_EQ(present(false), 0u);
  EXPECT_EQ(present(true), 0u);
  EXPECT_TRUE(Logits(*m, mmap) == want);  // the released pages read back as they were
  EXPECT_GT(present(true), 0u);           // mmap mode reads its experts there
}

TEST_F(StorageTest, DecodingTokenByTokenGivesTheSameBits) {
  // One token per step hands a cached expert out again and again: after a few uses the
  // stream tier rewrites it into the kernels' layout in its slot (StreamStore::NextReady),
  // which must not change a bit either.
  auto m = Load();
  auto decode = [&](StorageOptions s) {
    ContextOptions o = Options(std::move(s));
    o.n_threads = 2;
    auto ctx = Context::Create(*m, o);
    EXPECT_TRUE(ctx.ok()) << ctx.status().message();
    std::vector<float> all, logits;
    for (int32_t t : kTokens) {
      EXPECT_TRUE((*ctx)->Eval(std::vector<int32_t>{t}, LogitsFor::kLast, &logits).ok());
      all.insert(all.end(), logits.begin(), logits.end());
    }
    return all;
  };
  StorageOptions resident;
  resident.mode = MoeStorage::kResident;
  const std::vector<float> want = decode(resident);
  EXPECT_TRUE(decode(Stream("100%")) == want);
  EXPECT_TRUE(decode(Stream("30%")) == want);
}

TEST_F(StorageTest, TooSmallACacheIsRefused) {
  auto m = Load();
  ContextOptions o;
  o.n_ctx = 64;
  o.storage = Stream("3%");  // under 4 experts
  auto ctx = Context::Create(*m, o);
  ASSERT_FALSE(ctx.ok());
  EXPECT_NE(ctx.status().message().find("but one layer needs 4"), std::string::npos)
      << ctx.status().message();
}

// --expert-cache N% is N% of the experts in slots staged for O_DIRECT: the memory plan counts
// the pool the stream tier really allocates.
TEST_F(StorageTest, APercentCacheIsPlannedAtItsPoolSize) {
  auto m = Load();
  for (const char* cache : {"30%", "100%"}) {
    SCOPED_TRACE(cache);
    auto ctx = Context::Create(*m, Options(Stream(cache)));
    ASSERT_TRUE(ctx.ok()) << ctx.status().message();
    auto* stream = dynamic_cast<StreamStore*>(&(*ctx)->expert_store());
    ASSERT_NE(stream, nullptr);
    EXPECT_EQ((*ctx)->storage_plan().expert_cache, stream->pool_bytes());
    EXPECT_EQ((*ctx)->storage_plan().expert_cache_slots, stream->n_slots());
    EXPECT_GE((*ctx)->storage_plan().expert_cache,
              (*ctx)->storage_plan().experts_total * (cache[0] == '3' ? 30 : 100) / 100);
  }
}

// q4_k_m gives some layers a Q6_K `down` and the rest Q4_K: each layer's experts take slots
// of their own size, so a budget holds more experts than in slots sized for the largest.
TEST_F(StorageTest, SlotsComeInOneSizePerLayerClass) {
  auto m = Load();
  const ExpertLayout& layout = m->expert_layout();
  const uint32_t K = m->hparams().n_expert_used, E = m->hparams().n_expert;
  StreamOptions o;
  o.min_slots = K;
  o.cache_fraction = 1.0;
  Result<SlotPlan> whole = StreamStore::PlanSlots(layout, o);
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  ASSERT_EQ(whole->slot_bytes.size(), 2u);  // the test model mixes the two `down` types
  std::vector<uint32_t> layers_in(2, 0);
  for (uint32_t il = 0; il < layout.n_layer(); ++il) {
    const uint32_t c = whole->layer_class[il];
    ++layers_in[c];
    // A slot holds the layer's three parts, each staged for O_DIRECT, and not a page more.
    const ExpertSpec& spec = layout.spec(il);
    EXPECT_GE(whole->slot_bytes[c], spec.bytes());
    EXPECT_LE(whole->slot_bytes[c], spec.bytes() + 6 * kDirectIoAlignment);
  }
  EXPECT_EQ(whole->n_slots[0], layers_in[0] * E);
  EXPECT_EQ(whole->n_slots[1], layers_in[1] * E);

  // The budget of 20 slots of the largest size holds more than 20 experts, the same share
  // of each class, and at least a layer's top-k of each.
  o.cache_fraction.reset();
  o.cache_bytes = 20 * whole->slot_bytes[1];
  Result<SlotPlan> budget = StreamStore::PlanSlots(layout, o);
  ASSERT_TRUE(budget.ok()) << budget.status().message();
  EXPECT_LE(budget->bytes(), o.cache_bytes);
  EXPECT_GT(budget->total_slots(), 20u);
  EXPECT_GT(budget->bytes() + whole->slot_bytes[0], o.cache_bytes);  // nothing left unused
  const double share0 = double(budget->n_slots[0]) / whole->n_slots[0];
  const double share1 = double(budget->n_slots[1]) / whole->n_slots[1];
  EXPECT_NEAR(share0, share1, 1.0 / (layers_in[0] * E) + 1.0 / (layers_in[1] * E));
  o.cache_bytes = K * whole->slot_bytes[0] + K * whole->slot_bytes[1];
  budget = StreamStore::PlanSlots(layout, o);
  ASSERT_TRUE(budget.ok()) << budget.status().message();
  EXPECT_EQ(budget->n_slots, (std::vector<uint32_t>{K, K}));
  --o.cache_bytes;
  budget = StreamStore::PlanSlots(layout, o);
  ASSERT_FALSE(budget.ok());
  EXPECT_NE(budget.status().message().find("one layer needs (" + std::to_string(K) + ")"),
            std::string::npos)
      << budget.status().message();

  // The stream tier lays the classes out as planned (the tests above compute with them).
  o.cache_bytes = 20 * whole->slot_bytes[1];
  auto store = StreamStore::Create(layout, CreatePreadEngine(2).value(), o);
  ASSERT_TRUE(store.ok()) << store.status().message();
  EXPECT_EQ((*store)->pool_bytes(), StreamStore::PlanSlots(layout, o)->bytes());
  for (uint32_t il = 0; il < layout.n_layer(); ++il) {
    const uint32_t c = whole->layer_class[il];
    EXPECT_EQ((*store)->slot_bytes_of_layer(il), whole->slot_bytes[c]) << il;
    EXPECT_EQ((*store)->n_slots_of_layer(il), StreamStore::PlanSlots(layout, o)->n_slots[c]);
  }
}

// Without --expert-cache, a budget that has room for every expert gets a cache that holds
// every expert: the pool of slots (each part rounded up to 4 KiB), not the experts' bytes.
TEST_F(StorageTest, TheDefaultCacheHoldsEveryExpertWhenTheyFit) {
  auto m = Load();
  StorageOptions s;
  s.mode = MoeStorage::kStream;
  auto ctx = Context::Create(*m, Options(s));
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();
  auto* stream = dynamic_cast<StreamStore*>(&(*ctx)->expert_store());
  ASSERT_NE(stream, nullptr);
  const uint32_t all = m->hparams().n_layer * m->hparams().n_expert;
  EXPECT_EQ(stream->n_slots(), all);
  EXPECT_EQ((*ctx)->storage_plan().expert_cache, stream->pool_bytes());
  EXPECT_EQ((*ctx)->storage_plan().expert_cache_slots, all);
  EXPECT_NE((*ctx)->storage_plan().ToString().find(
                fmt::format("(cache {}, {} experts)", HumanBytes(stream->pool_bytes()), all)),
            std::string::npos)
      << (*ctx)->storage_plan().ToString();
  EXPECT_EQ(stream->stats().cache_slots, all);
  stream->ResetStats();
  EXPECT_EQ(stream->stats().cache_slots, all);
}

TEST_F(StorageTest, StreamCountsHitsMissesAndBytes) {
  auto m = Load();
  ContextOptions o = Options(Stream("100%"));
  o.storage.prefetch = false;  // every read is a demand miss (prefetch: the next test)
  auto ctx = Context::Create(*m, o);
  ASSERT_TRUE(ctx.ok());
  std::vector<float> logits;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE((*ctx)->Eval(kTokens, LogitsFor::kLast, &logits).ok());
  const uint64_t eval_ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
          .count());
  const TierStats& s = (*ctx)->expert_store().stats();
  // Without prefetch the disk idles from one layer's last read to the next layer's first:
  // every gap counts against the layer it began in, and busy plus idle fit in the run.
  uint64_t idle = 0;
  for (const TierCounters& c : s.layers) idle += c.disk_idle_ns;
  EXPECT_EQ(idle, s.total.disk_idle_ns);
  EXPECT_GT(s.layers[0].disk_idle_ns, 0u);
  EXPECT_EQ(s.layers.back().disk_idle_ns, 0u);  // nothing is read after the last layer
  EXPECT_LE(s.read_busy_ns + s.total.disk_idle_ns, eval_ns);
  EXPECT_EQ(s.total.prefetch_reads, 0u);
  EXPECT_EQ(s.total.requests, s.total.hits + s.total.misses);
  EXPECT_GT(s.total.misses, 0u);
  EXPECT_EQ(s.total.evictions, 0u);  // everything fits
  // Every miss read the three parts of one expert (q4_k_m sizes experts per layer).
  uint64_t payload = 0;
  for (size_t il = 0; il < s.layers.size(); ++il) {
    payload += s.layers[il].misses * m->expert_layout().spec(il).bytes();
  }
  EXPECT_EQ(s.total.bytes_payload, payload);
  EXPECT_GE(s.total.bytes_physical, s.total.bytes_payload);
  EXPECT_EQ(s.total.reads, 3 * s.total.misses);
  // A second pass over the same tokens hits the cache only.
  (*ctx)->ClearKv();
  const uint64_t misses = s.total.misses;
  ASSERT_TRUE((*ctx)->Eval(kTokens, LogitsFor::kLast, &logits).ok());
  EXPECT_EQ(s.total.misses, misses);
}

TEST_F(StorageTest, PrefetchIsAdvisoryAndAccounted) {
  auto m = Load();
  StorageOptions resident;
  resident.mode = MoeStorage::kResident;
  const std::vector<float> want = Logits(*m, resident);
  const uint32_t K = m->hparams().n_expert_used, n_layer = m->hparams().n_layer;
  for (uint32_t depth : {1u, 2u})
    for (const char* cache : {"100%", "30%", "8%"}) {
      SCOPED_TRACE(testing::Message() << "depth " << depth);
      ContextOptions o = Options(Stream(cache));
      ASSERT_TRUE(o.storage.prefetch);  // the default in stream mode
      o.storage.prefetch_depth = depth;
      auto ctx = Context::Create(*m, o);
      ASSERT_TRUE(ctx.ok()) << ctx.status().message();
      std::vector<float> logits;
      ASSERT_TRUE((*ctx)->Eval(kTokens, LogitsFor::kAll, &logits).ok());
      EXPECT_TRUE(logits == want) << cache;  // advisory: never changes a bit
      const TierStats& s = (*ctx)->expert_store().stats();
      // Every expert read is either a demand miss that found no read in flight, or a
      // prefetch; each reads three parts.
      uint64_t payload = 0;
      for (size_t il = 0; il < s.layers.size(); ++il) {
        const TierCounters& c = s.layers[il];
        payload +=
            (c.misses - c.prefetch_joined + c.prefetch_reads) * m->expert_layout().spec(il).bytes();
        EXPECT_LE(c.prefetch_hits + c.prefetch_joined, c.prefetch_reads)
            << cache << " layer " << il;
      }
      EXPECT_EQ(s.total.bytes_payload, payload) << cache;
      EXPECT_EQ(s.total.reads,
                3 * (s.total.misses - s.total.prefetch_joined + s.total.prefetch_reads));
      // At 8 % every slot is a layer's demand: prefetch never takes those.
      if (std::string(cache) != "8%") EXPECT_GT(s.total.prefetch_reads, 0u) << cache;
      // Recall: the first layer is never predicted; every later one is, for every token.
      const auto& pc = (*ctx)->prefetch_counters();
      ASSERT_EQ(pc.size(), n_layer);
      EXPECT_EQ(pc[0].actual, 0u);
      uint64_t correct = 0;
      for (uint32_t il = 1; il < n_layer; ++il) {
        EXPECT_EQ(pc[il].actual, kTokens.size() * K) << il;
        EXPECT_EQ(pc[il].predicted, kTokens.size() * K) << il;
        EXPECT_LE(pc[il].correct, pc[il].actual) << il;
        correct += pc[il].correct;
      }
      EXPECT_GT(correct, 0u) << cache;
    }
  // Token by token at 100 % (nothing is evicted), depth 2 reads ahead every expert that
  // depth 1 does, and those that only the prediction from two layers back names.
  uint64_t prefetches[3] = {};
  for (uint32_t depth : {1u, 2u}) {
    ContextOptions o = Options(Stream("100%"));
    o.n_batch = 1;
    o.storage.prefetch_depth = depth;
    auto ctx = Context::Create(*m, o);
    ASSERT_TRUE(ctx.ok()) << ctx.status().message();
    std::vector<float> logits;
    ASSERT_TRUE((*ctx)->Eval(kTokens, LogitsFor::kAll, &logits).ok());
    EXPECT_TRUE(logits == want) << "depth " << depth;
    prefetches[depth] = (*ctx)->expert_store().stats().total.prefetch_reads;
  }
  EXPECT_GT(prefetches[2], prefetches[1]);
}

// A prefetch that has landed waits for its layer: the demand of the layers before it does
// not evict it, although it is the newest and least used expert in the cache.
TEST_F(StorageTest, ALandedPrefetchIsKeptUntilItsLayerRuns) {
  auto m = Load();
  const ExpertLayout& layout = m->expert_layout();
  const uint32_t K = m->hparams().n_expert_used;
  ASSERT_GE(m->hparams().n_expert, 2 * K);
  StreamOptions whole;
  whole.cache_fraction = 1.0;
  Result<SlotPlan> shape = StreamStore::PlanSlots(layout, whole);
  ASSERT_TRUE(shape.ok()) << shape.status().message();
  const uint32_t cls = shape->layer_class[0];
  ASSERT_EQ(shape->layer_class[1], cls);
  // Every read but the prefetch's (layer 1, expert 0) lands 100 ms late, so the prefetch
  // has landed before the demand of layer 0 is served.
  std::vector<uint64_t> prefetch_offsets;
  for (int p = 0; p < kNumExpertParts; ++p) {
    const ByteExtent e = layout.extent(1, 0, static_cast<ExpertPart>(p));
    prefetch_offsets.push_back(e.offset / kDirectIoAlignment * kDirectIoAlignment);
  }
  FaultPlan plan;
  FaultRule late;
  late.kind = FaultKind::kDelay;
  late.delay_ms = 100;
  late.match = [prefetch_offsets](const ReadOp& op) {
    return std::find(prefetch_offsets.begin(), prefetch_offsets.end(), op.offset) ==
           prefetch_offsets.end();
  };
  plan.rules.push_back(late);
  // One layer's experts and the prefetch in the slots of layers 0 and 1, one layer's in
  // those of any other size.
  StreamOptions o;
  for (size_t c = 0; c < shape->slot_bytes.size(); ++c) {
    o.cache_bytes += (c == cls ? K + 1 : K) * shape->slot_bytes[c];
  }
  o.min_slots = K;
  auto io = std::make_unique<FaultInjectingEngine>(CreatePreadEngine(2).value(), plan);
  auto store = StreamStore::Create(layout, std::move(io), o);
  ASSERT_TRUE(store.ok()) << store.status().message();
  StreamStore& st = **store;
  ASSERT_EQ(st.n_slots_of_layer(0), K + 1);
  auto run_layer = [&](uint32_t layer, int32_t first) {
    std::vector<int32_t> experts(K);
    std::iota(experts.begin(), experts.end(), first);
    st.BeginLayer(layer, experts);
    if (layer == 0 && first == 0) st.Hint(1, std::vector<int32_t>{0});
    for (;;) {
      Result<std::optional<ReadyExpert>> r = st.NextReady(true);
      ASSERT_TRUE(r.ok()) << r.status().message();
      if (!r.value()) break;
    }
  };
  run_layer(0, 0);
  run_layer(0, static_cast<int32_t>(K));         // needs every slot but the prefetch's
  EXPECT_EQ(st.stats().layers[0].evictions, K);  // the first K made room, not the prefetch
  EXPECT_EQ(st.stats().layers[1].evictions, 0u);
  const std::vector<int32_t> prefetched = {0};
  st.BeginLayer(1, prefetched);
  EXPECT_EQ(st.stats().layers[1].hits, 1u);
  EXPECT_EQ(st.stats().layers[1].prefetch_hits, 1u);
}

TEST_F(StorageTest, EvictionPoliciesAndPlacementGiveTheSameBits) {
  auto m = Load();
  StorageOptions resident;
  resident.mode = MoeStorage::kResident;
  const std::vector<float> want = Logits(*m, resident);
  // A profile of the same tokens, saved as moetier profile / --routing-stats would.
  const std::string profile = (models_->dir() / "profile.json").string();
  {
    ContextOptions o;
    o.n_ctx = 64;
    auto ctx = Context::Create(*m, o);
    ASSERT_TRUE(ctx.ok());
    std::vector<float> logits;
    ASSERT_TRUE((*ctx)->Eval(kTokens, LogitsFor::kLast, &logits).ok());
    EXPECT_EQ((*ctx)->routing_stats().tokens(), kTokens.size());
    ASSERT_TRUE((*ctx)->routing_stats().Save(profile).ok());
  }
  for (const char* cache : {"30%", "8%"}) {
    for (const char* policy : {"lru", "lfu", "placement"}) {
      for (bool place : {false, true}) {
        StorageOptions s = Stream(cache);
        s.eviction = policy;
        if (place || std::string(policy) == "placement") s.placement_file = profile;
        EXPECT_TRUE(Logits(*m, s) == want) << cache << " " << policy << " place " << place;
      }
    }
  }
  // Placement pins experts (in the background) and never evicts them; at 8 % it leaves
  // room for a layer's demand.
  ContextOptions o = Options(Stream("30%"));
  o.storage.placement_file = profile;
  auto ctx = Context::Create(*m, o);
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();
  std::vector<float> logits;
  ASSERT_TRUE((*ctx)->Eval(kTokens, LogitsFor::kLast, &logits).ok());
  ASSERT_TRUE((*ctx)->Eval(kTokens, LogitsFor::kLast, &logits).ok());
  auto* stream = dynamic_cast<StreamStore*>(&(*ctx)->expert_store());
  ASSERT_NE(stream, nullptr);
  const uint64_t placed = stream->stats().total.placed;
  EXPECT_GT(placed, 0u);
  EXPECT_LE(placed, static_cast<uint64_t>(0.25 * stream->n_slots()));
  // A profile of another shape, or a placement policy without a profile, is refused.
  StorageOptions wrong = Stream("30%");
  wrong.eviction = "placement";
  o.storage = wrong;
  auto refused = Context::Create(*m, o);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--placement FILE"), std::string::npos);
  wrong.eviction = "mru";
  o.storage = wrong;
  refused = Context::Create(*m, o);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("mru"), std::string::npos)
      << refused.status().message();
}

TEST_F(StorageTest, RoutingStatsFileMakesARestartWarm) {
  auto m = Load();
  const std::string path = (models_->dir() / "live-stats.json").string();
  fs::remove(path);
  ContextOptions o;
  o.n_ctx = 64;
  o.routing_stats_file = path;
  o.storage = Stream("30%");
  {
    auto ctx = Context::Create(*m, o);  // no file yet: starts cold
    ASSERT_TRUE(ctx.ok()) << ctx.status().message();
    std::vector<float> logits;
    ASSERT_TRUE((*ctx)->Eval(kTokens, LogitsFor::kLast, &logits).ok());
    ASSERT_TRUE((*ctx)->routing_stats().Save(path).ok());
  }
  auto ctx = Context::Create(*m, o);
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();
  EXPECT_EQ((*ctx)->routing_stats().tokens(), kTokens.size());  // loaded
  std::vector<float> logits;
  ASSERT_TRUE((*ctx)->Eval(kTokens, LogitsFor::kLast, &logits).ok());
  EXPECT_EQ((*ctx)->routing_stats().tokens(), 2 * kTokens.size());  // and counting on
  EXPECT_GT((*ctx)->expert_store().stats().total.placed, 0u);       // placed from what it saw
  // A file that exists but is broken is an error, not a silent cold start.
  { std::ofstream(path) << "{not json"; }
  auto broken = Context::Create(*m, o);
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find(path), std::string::npos);
}

// Builds a stream context whose reads go through a fault-injecting engine.
std::unique_ptr<Context> FaultyContext(const Model& m, FaultPlan plan) {
  ContextOptions o;
  o.n_ctx = 64;
  o.storage.mode = MoeStorage::kStream;
  EXPECT_TRUE(ParseExpertCache("8%", &o.storage).ok());
  auto shared_plan = std::make_shared<FaultPlan>(std::move(plan));
  o.storage.make_io = [shared_plan]() -> Result<std::unique_ptr<IoEngine>> {
    std::unique_ptr<IoEngine> inner = MT_TRY(CreatePreadEngine(2));
    auto f = std::make_unique<FaultInjectingEngine>(std::move(inner), *shared_plan);
    return std::unique_ptr<IoEngine>(std::move(f));
  };
  auto ctx = Context::Create(m, o);
  EXPECT_TRUE(ctx.ok()) << ctx.status().message();
  return std::move(ctx.value());
}

// Passes reads to a pread engine and counts them, and those marked untouched_dst.
class CountingEngine final : public IoEngine {
 public:
  CountingEngine(std::unique_ptr<IoEngine> inner, uint64_t* reads, uint64_t* untouched)
      : inner_(std::move(inner)), reads_(reads), untouched_(untouched) {}
  Result<int> AddFile(const std::string& path, DirectMode direct) override {
    return inner_->AddFile(path, direct);
  }
  bool is_direct(int file) const override { return inner_->is_direct(file); }
  Status Submit(std::span<const ReadOp> ops) override {
    for (const ReadOp& op : ops) {
      ++*reads_;
      *untouched_ += op.untouched_dst;
    }
    return inner_->Submit(ops);
  }
  size_t Wait(std::span<ReadCompletion> out, size_t min, int timeout_ms) override {
    return inner_->Wait(out, min, timeout_ms);
  }
  size_t in_flight() const override { return inner_->in_flight(); }
  std::string name() const override { return "counting"; }

 private:
  std::unique_ptr<IoEngine> inner_;
  uint64_t* reads_;
  uint64_t* untouched_;
};

TEST_F(StorageTest, OnlyASlotsFirstReadsAreMarkedUntouched) {
  auto m = Load();
  ContextOptions o = Options(Stream("10%"));
  uint64_t reads = 0, untouched = 0;
  o.storage.make_io = [&]() -> Result<std::unique_ptr<IoEngine>> {
    std::unique_ptr<IoEngine> inner = MT_TRY(CreatePreadEngine(2));
    return std::unique_ptr<IoEngine>(
        std::make_unique<CountingEngine>(std::move(inner), &reads, &untouched));
  };
  auto ctx = Context::Create(*m, o);
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();
  std::vector<float> logits;
  ASSERT_TRUE((*ctx)->Eval(kTokens, LogitsFor::kLast, &logits).ok());
  const auto* stream = dynamic_cast<const StreamStore*>(&(*ctx)->expert_store());
  ASSERT_NE(stream, nullptr);
  // The cache is small enough to be reused: every slot was filled once (its three reads
  // marked), and the reads into reused slots were not.
  EXPECT_GT(stream->stats().total.evictions, 0u);
  EXPECT_EQ(untouched, 3u * stream->n_slots());
  EXPECT_GT(reads, untouched);
}

TEST_F(StorageTest, FailedReadsFailClosedAndTheContextRecovers) {
  auto m = Load();
  StorageOptions resident;
  resident.mode = MoeStorage::kResident;
  const std::vector<float> want = Logits(*m, resident);
  for (FaultKind kind : {FaultKind::kError, FaultKind::kShortRead}) {
    FaultPlan plan;
    FaultRule rule;
    rule.kind = kind;
    rule.every_nth = 7;
    rule.max_faults = 1;
    rule.short_bytes = 1000;  // well inside the payload (a short read past it is harmless)
    plan.rules.push_back(rule);
    auto ctx = FaultyContext(*m, plan);
    std::vector<float> logits;
    Status s = ctx->Eval(kTokens, LogitsFor::kAll, &logits);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), StatusCode::kIoError);
    // file, layer, expert and offset are named
    EXPECT_NE(s.message().find("olmoe-tiny-q4_k_m.gguf: layer "), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(" expert "), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("offset "), std::string::npos) << s.message();
    EXPECT_EQ(ctx->n_past(), 0u);
    // The next prompt runs on the same context and gives exactly the right numbers.
    ASSERT_TRUE(ctx->Eval(kTokens, LogitsFor::kAll, &logits).ok());
    EXPECT_TRUE(logits == want);
  }
}

TEST_F(StorageTest, CorruptBytesAfterThePayloadAreNeverUsed) {
  // A read that comes back short, but past the payload's end, loses only alignment padding:
  // the expert is complete and the numbers are right.
  auto m = Load();
  StorageOptions resident;
  resident.mode = MoeStorage::kResident;
  const std::vector<float> want = Logits(*m, resident);
  FaultPlan plan;
  FaultRule rule;
  rule.kind = FaultKind::kShortRead;
  rule.probability = 0.5;
  rule.match = [](const ReadOp& op) { return op.length > 8192; };
  rule.short_bytes = -1;  // seeded; the store must judge each against the payload
  plan.rules.push_back(rule);
  auto ctx = FaultyContext(*m, plan);
  std::vector<float> logits;
  for (int attempt = 0; attempt < 20; ++attempt) {
    ctx->ClearKv();
    Status s = ctx->Eval(kTokens, LogitsFor::kAll, &logits);
    if (s.ok()) {
      EXPECT_TRUE(logits == want);
    } else {
      EXPECT_NE(s.message().find("short read"), std::string::npos) << s.message();
    }
  }
}

TEST_F(StorageTest, SlowReadsOnlyCostTime) {
  auto m = Load();
  StorageOptions resident;
  resident.mode = MoeStorage::kResident;
  const std::vector<float> want = Logits(*m, resident);
  FaultPlan plan;
  FaultRule rule;
  rule.kind = FaultKind::kDelay;
  rule.every_nth = 3;
  rule.delay_ms = 2;
  plan.rules.push_back(rule);
  auto ctx = FaultyContext(*m, plan);
  std::vector<float> logits;
  ASSERT_TRUE(ctx->Eval(kTokens, LogitsFor::kAll, &logits).ok());
  EXPECT_TRUE(logits == want);
}

TEST_F(StorageTest, AFileTruncatedOrReplacedUnderARunningProcessIsDetected) {
  const std::string copy = (models_->dir() / "victim.gguf").string();
  for (MoeStorage mode : {MoeStorage::kMmap, MoeStorage::kStream}) {
    for (bool replace : {false, true}) {
      fs::copy_file(model_path_, copy, fs::copy_options::overwrite_existing);
      auto m = Load(copy);
      ContextOptions o;
      o.n_ctx = 64;
      o.storage.mode = mode;
      auto ctx = Context::Create(*m, o);
      ASSERT_TRUE(ctx.ok());
      std::vector<float> logits;
      ASSERT_TRUE((*ctx)->Eval(std::span(kTokens).first(3), LogitsFor::kLast, &logits).ok());
      if (replace) {
        fs::copy_file(model_path_, copy + ".new");
        fs::rename(copy + ".new", copy);
      } else {
        fs::resize_file(copy, fs::file_size(copy) / 2);
      }
      Status s = (*ctx)->Eval(std::span(kTokens).subspan(3, 3), LogitsFor::kLast, &logits);
      ASSERT_FALSE(s.ok()) << MoeStorageName(mode);
      EXPECT_NE(s.message().find("victim.gguf: the model file"), std::string::npos) << s.message();
    }
  }
}

}  // namespace
}  // namespace mt
