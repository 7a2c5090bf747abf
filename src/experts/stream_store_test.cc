// StreamStore driven directly (no engine::Context): a hand-built tensor-major layout over a
// temp file of known bytes, read through the fault-injecting engine. Every handed-out expert's
// bytes are compared with the file's.
#include "experts/stream_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "io/fault_injecting_engine.h"
#include "io/io_test_util.h"
#include "io/mapped_file.h"

namespace mt {
namespace {

// f32 experts: gate and up (n_ff rows of n_embd), down (n_embd rows of n_ff), 4 KiB each.
constexpr uint32_t kEmbd = 64, kFf = 16, kLayers = 3, kExperts = 8;
constexpr uint64_t kPartBytes = uint64_t{kFf} * kEmbd * sizeof(float);  // 4096
// The part tensors start off the 4 KiB grid (as in a GGUF), so every read has a head, and
// each expert's part starts in a 4 KiB block of its own (faults can pick one by offset).
constexpr uint64_t kBase = 96;
constexpr uint64_t kFileBytes = kBase + uint64_t{kLayers} * kNumExpertParts * kExperts * kPartBytes;

uint64_t PartOffset(uint32_t layer, int part, uint32_t expert) {
  return kBase + ((uint64_t{layer} * kNumExpertParts + part) * kExperts + expert) * kPartBytes;
}

// Where the store's read of (layer, expert, part) starts: the payload rounded down to 4 KiB.
uint64_t ReadStart(uint32_t layer, uint32_t expert, ExpertPart part) {
  return PartOffset(layer, part, expert) / kDirectIoAlignment * kDirectIoAlignment;
}

std::vector<int32_t> Range(int32_t first, int32_t n) {
  std::vector<int32_t> v(n);
  for (int32_t i = 0; i < n; ++i) v[i] = first + i;
  return v;
}

class StreamStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = io_test::DirectDir().value_or(std::filesystem::temp_directory_path().string());
    content_ = io_test::RandomBytes(kFileBytes, 40);
    file_ = std::make_unique<io_test::TempFile>(dir_, content_);
    Result<MappedFile> map = MappedFile::Open(file_->path());
    ASSERT_TRUE(map.ok()) << map.status().message();
    map_ = std::move(map.value());
    layout_ = std::make_unique<ExpertLayout>(std::vector<std::string>{file_->path()}, kExperts,
                                             ExpertLayout::Kind::kTensorMajor);
    ExpertSpec spec;
    spec.n_embd = kEmbd;
    spec.n_ff = kFf;
    ASSERT_EQ(spec.gate_bytes(), kPartBytes);
    ASSERT_EQ(spec.down_bytes(), kPartBytes);
    for (uint32_t il = 0; il < kLayers; ++il) {
      std::array<ExpertPartTensor, 3> parts;
      for (int p = 0; p < kNumExpertParts; ++p) {
        const uint64_t at = PartOffset(il, p, 0);
        parts[p] = {0, at, kPartBytes, map_.data() + at};
      }
      layout_->AddLayer(spec, parts);
    }
    slot_bytes_ = StreamStore::PlanSlots(*layout_, Whole()).value().slot_bytes.at(0);
  }

  static StreamOptions Whole() {
    StreamOptions o;
    o.cache_fraction = 1.0;
    return o;
  }
  // A cache of `slots` slots (all layers share one slot size).
  StreamOptions Slots(uint32_t slots, uint32_t min_slots, double prefetch_share) const {
    StreamOptions o;
    o.cache_bytes = slots * slot_bytes_;
    o.min_slots = min_slots;
    o.prefetch_share = prefetch_share;
    return o;
  }

  std::unique_ptr<StreamStore> MakeStore(const StreamOptions& o, FaultPlan plan = {}) {
    auto io = std::make_unique<FaultInjectingEngine>(CreatePreadEngine(2).value(), plan);
    faults_ = io.get();
    Result<std::unique_ptr<StreamStore>> s = StreamStore::Create(*layout_, std::move(io), o);
    EXPECT_TRUE(s.ok()) << s.status().message();
    return s.ok() ? std::move(s.value()) : nullptr;
  }

  // A rule that hits only the read of (layer, expert, part).
  static FaultRule RuleFor(FaultKind kind, uint32_t layer, uint32_t expert, ExpertPart part) {
    FaultRule r;
    r.kind = kind;
    const uint64_t start = ReadStart(layer, expert, part);
    r.match = [start](const ReadOp& op) { return op.offset == start; };
    return r;
  }

  // The expert's three matrices are f32 rows of the right shape holding the file's bytes.
  ::testing::AssertionResult HasFileBytes(const ReadyExpert& r, uint32_t layer) const {
    const ExpertMatrices& m = r.lease.matrices();
    const WeightMatrix* w[3] = {&m.gate, &m.up, &m.down};
    const int64_t rows[3] = {kFf, kFf, kEmbd};
    for (int p = 0; p < kNumExpertParts; ++p) {
      if (w[p]->type != GgmlType::kF32 || w[p]->layout != WeightLayout::kRows ||
          w[p]->rows != rows[p] || w[p]->data == nullptr) {
        return ::testing::AssertionFailure() << "part " << p << " has the wrong shape";
      }
      const uint8_t* want = content_.data() + PartOffset(layer, p, r.expert);
      if (std::memcmp(w[p]->data, want, kPartBytes) != 0) {
        return ::testing::AssertionFailure() << "layer " << layer << " expert " << r.expert
                                             << " part " << p << ": bytes differ from the file's";
      }
      if (std::memcmp(w[p]->data, layout_->mapped(layer, r.expert, ExpertPart(p)), kPartBytes)) {
        return ::testing::AssertionFailure() << "differs from the mapping";
      }
    }
    return ::testing::AssertionSuccess();
  }

  // Takes every expert of the current layer (holding their leases in `out`); errors go to
  // `errors`.
  static void Drain(StreamStore& st, std::vector<ReadyExpert>* out,
                    std::vector<Status>* errors = nullptr) {
    for (int guard = 0; guard < 100; ++guard) {
      Result<std::optional<ReadyExpert>> r = st.NextReady(true);
      if (!r.ok()) {
        if (errors == nullptr) {
          ADD_FAILURE() << r.status().message();
          return;
        }
        errors->push_back(r.status());
        continue;
      }
      if (!r.value()) return;
      out->push_back(std::move(*r.value()));
    }
    ADD_FAILURE() << "NextReady never ran dry";
  }

  // BeginLayer + Drain, checking that exactly `experts` come out, each once, with the file's
  // bytes. The leases are dropped on return.
  void RunLayer(StreamStore& st, uint32_t layer, const std::vector<int32_t>& experts) {
    SCOPED_TRACE(::testing::Message() << "layer " << layer);
    st.BeginLayer(layer, experts);
    std::vector<ReadyExpert> got;
    Drain(st, &got);
    std::multiset<int32_t> ids;
    for (const ReadyExpert& r : got) {
      ids.insert(r.expert);
      EXPECT_FALSE(r.unchecked);
      EXPECT_TRUE(HasFileBytes(r, layer));
    }
    EXPECT_EQ(ids, std::multiset<int32_t>(experts.begin(), experts.end()));
  }

  std::string dir_;
  std::vector<uint8_t> content_;  // (kFileBytes) the file's bytes
  std::unique_ptr<io_test::TempFile> file_;
  MappedFile map_;
  std::unique_ptr<ExpertLayout> layout_;
  uint64_t slot_bytes_ = 0;
  FaultInjectingEngine* faults_ = nullptr;  // owned by the store
};

TEST_F(StreamStoreTest, ColdReadsThenHits) {
  auto st = MakeStore(Whole());
  ASSERT_NE(st, nullptr);
  ASSERT_EQ(st->n_slots(), kLayers * kExperts);
  // Every expert of every layer, the file's last (its read runs past the end) included.
  for (uint32_t il = 0; il < kLayers; ++il) RunLayer(*st, il, Range(0, kExperts));
  const TierStats& s = st->stats();
  for (uint32_t il = 0; il < kLayers; ++il) {
    EXPECT_EQ(s.layers[il].requests, kExperts);
    EXPECT_EQ(s.layers[il].misses, kExperts);
    EXPECT_EQ(s.layers[il].hits, 0u);
    EXPECT_EQ(s.layers[il].reads, 3u * kExperts);
    EXPECT_EQ(s.layers[il].bytes_payload, 3 * kPartBytes * kExperts);
  }
  EXPECT_EQ(s.total.read_errors, 0u);
  EXPECT_EQ(faults_->counters().reads, 3u * kExperts * kLayers);
  // The same experts again come from the cache: no read, every request a hit.
  for (uint32_t il = 0; il < kLayers; ++il) RunLayer(*st, il, {6, 1, 3});
  for (uint32_t il = 0; il < kLayers; ++il) {
    EXPECT_EQ(s.layers[il].hits, 3u);
    EXPECT_EQ(s.layers[il].misses, kExperts);
  }
  EXPECT_EQ(s.total.reads, 3u * kExperts * kLayers);
  EXPECT_EQ(faults_->counters().reads, 3u * kExperts * kLayers);
  EXPECT_EQ(s.total.evictions, 0u);
  std::vector<uint8_t> resident;
  ASSERT_TRUE(st->Residency(&resident));
  EXPECT_EQ(resident, std::vector<uint8_t>(kLayers * kExperts, 1));
}

TEST_F(StreamStoreTest, AFailedReadNamesTheExpertAndIsReadAgain) {
  FaultPlan plan;
  FaultRule eio = RuleFor(FaultKind::kError, 1, 3, kUp);
  eio.max_faults = 1;
  plan.rules.push_back(eio);
  auto st = MakeStore(Whole(), plan);
  ASSERT_NE(st, nullptr);
  st->BeginLayer(1, std::vector<int32_t>{2, 3, 4});
  std::vector<ReadyExpert> got;
  std::vector<Status> errors;
  Drain(*st, &got, &errors);
  EXPECT_EQ(faults_->counters().errors, 1u);
  ASSERT_EQ(errors.size(), 1u);
  const Status& e = errors[0];
  EXPECT_EQ(e.code(), StatusCode::kIoError);
  const std::string want = file_->path() + ": layer 1 expert 3 (up): read at offset " +
                           std::to_string(PartOffset(1, kUp, 3)) + " failed";
  EXPECT_NE(e.message().find(want), std::string::npos) << e.message();
  EXPECT_EQ(e.message().find('\n'), std::string::npos) << e.message();
  // The failed expert is never handed out; the others are, intact.
  ASSERT_EQ(got.size(), 2u);
  for (const ReadyExpert& r : got) {
    EXPECT_NE(r.expert, 3);
    EXPECT_TRUE(HasFileBytes(r, 1));
  }
  got.clear();
  EXPECT_EQ(st->stats().total.read_errors, 1u);
  std::vector<uint8_t> resident;
  ASSERT_TRUE(st->Residency(&resident));
  EXPECT_EQ(resident[1 * kExperts + 3], 0);  // dropped, not cached
  // The store stays usable: the same expert is read again (3 more reads) and comes out right.
  const uint64_t reads = st->stats().total.reads;
  RunLayer(*st, 1, {3, 2});
  EXPECT_EQ(st->stats().total.reads, reads + 3);
  EXPECT_EQ(st->stats().layers[1].hits, 1u);  // expert 2
}

TEST_F(StreamStoreTest, AnErrorThenAnImmediateNextLayerRecovers) {
  // The caller stops at the first error (as the engine does) and starts over at once, with
  // reads of the abandoned layer still in flight.
  FaultPlan plan;
  FaultRule eio = RuleFor(FaultKind::kError, 0, 0, kGate);
  eio.max_faults = 1;
  plan.rules.push_back(eio);
  FaultRule slow;  // the other experts' reads land well after the error
  slow.kind = FaultKind::kDelay;
  slow.delay_ms = 300;
  slow.match = [](const ReadOp& op) {
    for (ExpertPart p : {kGate, kUp, kDown}) {
      if (op.offset == ReadStart(0, 0, p)) return false;
    }
    return true;
  };
  plan.rules.push_back(slow);
  auto st = MakeStore(Whole(), plan);
  ASSERT_NE(st, nullptr);
  st->BeginLayer(0, Range(0, 4));
  Result<std::optional<ReadyExpert>> r = st->NextReady(true);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("layer 0 expert 0 (gate)"), std::string::npos)
      << r.status().message();
  RunLayer(*st, 0, Range(0, 4));
  EXPECT_EQ(st->stats().total.reads, 3u * 5);  // expert 0 twice; 1-3 joined their reads
  EXPECT_EQ(st->stats().layers[0].misses, 8u);
}

TEST_F(StreamStoreTest, AShortReadInThePayloadFailsClosed) {
  FaultPlan plan;
  FaultRule shorty = RuleFor(FaultKind::kShortRead, 2, 5, kDown);
  shorty.short_bytes = 1000;  // the payload runs to byte 96 + 4096 of the read
  shorty.max_faults = 1;
  plan.rules.push_back(shorty);
  auto st = MakeStore(Whole(), plan);
  ASSERT_NE(st, nullptr);
  st->BeginLayer(2, std::vector<int32_t>{5, 6});
  std::vector<ReadyExpert> got;
  std::vector<Status> errors;
  Drain(*st, &got, &errors);
  EXPECT_EQ(faults_->counters().short_reads, 1u);
  ASSERT_EQ(errors.size(), 1u);
  const std::string want =
      file_->path() + ": layer 2 expert 5 (down): short read at offset " +
      std::to_string(PartOffset(2, kDown, 5)) + ": 1000 of " +
      std::to_string(PartOffset(2, kDown, 5) % kDirectIoAlignment + kPartBytes) + " bytes";
  EXPECT_NE(errors[0].message().find(want), std::string::npos) << errors[0].message();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].expert, 6);
  EXPECT_TRUE(HasFileBytes(got[0], 2));
  got.clear();
  RunLayer(*st, 2, {5});  // read again, whole this time
  EXPECT_EQ(st->stats().layers[2].misses, 3u);
}

TEST_F(StreamStoreTest, AShortReadPastThePayloadIsHarmless) {
  // Only alignment padding is lost (garbage lands there): the expert is complete.
  FaultPlan plan;
  FaultRule shorty = RuleFor(FaultKind::kShortRead, 0, 2, kGate);
  shorty.short_bytes = PartOffset(0, kGate, 2) % kDirectIoAlignment + kPartBytes;
  plan.rules.push_back(shorty);
  auto st = MakeStore(Whole(), plan);
  ASSERT_NE(st, nullptr);
  RunLayer(*st, 0, {2});
  EXPECT_EQ(faults_->counters().short_reads, 1u);
  EXPECT_EQ(st->stats().total.read_errors, 0u);
}

TEST_F(StreamStoreTest, SlowReadsArePendingThenArrive) {
  FaultPlan plan;
  FaultRule slow;
  slow.kind = FaultKind::kDelay;
  slow.delay_ms = 200;
  plan.rules.push_back(slow);
  auto st = MakeStore(Whole(), plan);
  ASSERT_NE(st, nullptr);
  st->BeginLayer(0, std::vector<int32_t>{2, 5});
  Result<std::optional<ReadyExpert>> r = st->NextReady(/*wait=*/false);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(r.value().has_value());
  EXPECT_TRUE(st->Pending());
  std::vector<ReadyExpert> got;
  Drain(*st, &got);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_NE(got[0].expert, got[1].expert);
  for (const ReadyExpert& e : got) EXPECT_TRUE(HasFileBytes(e, 0));
  EXPECT_FALSE(st->Pending());
  EXPECT_EQ(faults_->counters().delays, 6u);
  got.clear();
  // Hits are ready at once, without waiting.
  st->BeginLayer(0, std::vector<int32_t>{5});
  r = st->NextReady(/*wait=*/false);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r.value().has_value());
  EXPECT_TRUE(HasFileBytes(*r.value(), 0));
}

TEST_F(StreamStoreTest, DemandEvictsAroundAPrefetchInFlightAndJoinsIt) {
  // Layer 1's reads are slow: its prefetch is still in flight while layer 0 runs.
  FaultPlan plan;
  FaultRule slow;
  slow.kind = FaultKind::kDelay;
  slow.delay_ms = 200;
  slow.match = [](const ReadOp& op) {
    return op.offset >= ReadStart(1, 0, kGate) && op.offset < ReadStart(2, 0, kGate);
  };
  plan.rules.push_back(slow);
  auto st = MakeStore(Slots(4, 2, 0.5), plan);
  ASSERT_NE(st, nullptr);
  ASSERT_EQ(st->n_slots(), 4u);
  RunLayer(*st, 0, {0, 1});  // two cached, two free
  st->Hint(1, std::vector<int32_t>{0, 1, 2});
  EXPECT_EQ(st->stats().total.prefetch_reads, 2u);  // half the slots at most
  // Layer 0's demand needs two slots: it evicts the cached experts, not the prefetches.
  RunLayer(*st, 0, {2, 3});
  EXPECT_EQ(st->stats().layers[0].evictions, 2u);
  EXPECT_EQ(st->stats().layers[1].evictions, 0u);
  EXPECT_GT(st->io().in_flight(), 0u);  // demand went ahead of the slow prefetch
  // Layer 1 demands the prefetches still in flight: each joins its read and comes out once.
  RunLayer(*st, 1, {1, 0});
  const TierStats& s = st->stats();
  EXPECT_EQ(s.layers[1].prefetch_joined, 2u);
  EXPECT_EQ(s.layers[1].misses, 2u);
  EXPECT_EQ(s.total.reads, 3u * 6);  // 4 demanded + 2 prefetched experts, each read once
  EXPECT_EQ(faults_->counters().delays, 6u);
}

TEST_F(StreamStoreTest, ALeasedExpertIsNeverEvicted) {
  auto st = MakeStore(Slots(3, 2, 0.0));
  ASSERT_NE(st, nullptr);
  st->BeginLayer(0, std::vector<int32_t>{0});
  Result<std::optional<ReadyExpert>> r = st->NextReady(true);
  ASSERT_TRUE(r.ok() && r.value().has_value());
  ReadyExpert held = std::move(*r.value());
  ASSERT_TRUE(HasFileBytes(held, 0));
  // Every other expert through the two other slots, two at a time.
  for (uint32_t il = 0; il < kLayers; ++il) {
    for (int32_t e = 0; e < int32_t{kExperts}; e += 2) {
      std::vector<int32_t> two = {e, e + 1};
      if (il == 0 && e == 0) two = {1};
      RunLayer(*st, il, two);
    }
  }
  EXPECT_EQ(st->stats().total.evictions, kLayers * kExperts - 1 - 2);
  EXPECT_TRUE(HasFileBytes(held, 0));  // its slot was never refilled
  const uint64_t reads = st->stats().total.reads;
  EXPECT_EQ(reads, 3u * kLayers * kExperts);
  RunLayer(*st, 0, {0});  // still cached: a hit, no read
  EXPECT_EQ(st->stats().layers[0].hits, 1u);
  EXPECT_EQ(st->stats().total.reads, reads);
}

// A cache of exactly min_slots (top-k) slots: a prefetch, even within its share, may not take
// one of them, or it would land while the demand waits and be held until its layer runs, and a
// demand holding all its leases (a caller may gather every ready expert, expert_store.h) would
// find 3 slots for 4 experts ("the expert cache is too small ...").
TEST_F(StreamStoreTest, APrefetchLeavesOneLayersSlotsToDemand) {
  FaultPlan plan;
  FaultRule slow;  // the prefetch lands while the demand waits
  slow.kind = FaultKind::kDelay;
  slow.delay_ms = 50;
  slow.match = [](const ReadOp& op) { return op.offset == ReadStart(1, 0, kGate); };
  plan.rules.push_back(slow);
  auto st = MakeStore(Slots(4, 4, 0.25), plan);
  ASSERT_NE(st, nullptr);
  st->Hint(1, std::vector<int32_t>{0});
  st->BeginLayer(0, Range(0, 4));
  std::vector<ReadyExpert> got;
  Drain(*st, &got);  // holds every lease
  ASSERT_EQ(got.size(), 4u);
  for (const ReadyExpert& e : got) EXPECT_TRUE(HasFileBytes(e, 0));
}

// Prefetch holds at most `prefetch_share` of the slots, rounded down (it used to round up:
// with 2 slots and share 0.25 a prefetch took 1 slot, 50 %; with 5 slots, 2, 40 %).
TEST_F(StreamStoreTest, PrefetchHoldsAtMostItsShare) {
  auto st = MakeStore(Slots(2, 1, 0.25));
  ASSERT_NE(st, nullptr);
  st->Hint(1, std::vector<int32_t>{0, 1});
  EXPECT_EQ(st->stats().total.prefetch_reads, 0u);  // floor(0.25 * 2) = 0
  auto five = MakeStore(Slots(5, 1, 0.25));
  ASSERT_NE(five, nullptr);
  five->Hint(1, std::vector<int32_t>{0, 1, 2});
  EXPECT_EQ(five->stats().total.prefetch_reads, 1u);  // floor(0.25 * 5) = 1
}

// An engine that refuses whole batches (IoEngine::Submit fails) while `refuse` is set.
class RefusingEngine final : public IoEngine {
 public:
  explicit RefusingEngine(std::unique_ptr<IoEngine> inner) : inner_(std::move(inner)) {}
  Result<int> AddFile(const std::string& path, DirectMode direct) override {
    return inner_->AddFile(path, direct);
  }
  bool is_direct(int file) const override { return inner_->is_direct(file); }
  Status Submit(std::span<const ReadOp> ops) override {
    if (refuse) return IoError("queue refused {} reads", ops.size());
    return inner_->Submit(ops);
  }
  size_t Wait(std::span<ReadCompletion> out, size_t min_completions, int timeout_ms) override {
    return inner_->Wait(out, min_completions, timeout_ms);
  }
  size_t in_flight() const override { return inner_->in_flight(); }
  std::string name() const override { return "refusing"; }

  bool refuse = false;

 private:
  std::unique_ptr<IoEngine> inner_;
};

// A store over a RefusingEngine, which *engine points to (the store owns it).
std::unique_ptr<StreamStore> MakeRefusingStore(const ExpertLayout& layout, const StreamOptions& o,
                                               RefusingEngine** engine) {
  auto io = std::make_unique<RefusingEngine>(CreatePreadEngine(2).value());
  *engine = io.get();
  Result<std::unique_ptr<StreamStore>> st = StreamStore::Create(layout, std::move(io), o);
  EXPECT_TRUE(st.ok()) << st.status().message();
  return st.ok() ? std::move(st.value()) : nullptr;
}

TEST_F(StreamStoreTest, ARefusedBatchFailsTheDemandAndTheStoreRecovers) {
  RefusingEngine* engine = nullptr;
  auto st = MakeRefusingStore(*layout_, Slots(4, 2, 0.5), &engine);
  ASSERT_NE(st, nullptr);
  engine->refuse = true;
  st->BeginLayer(0, std::vector<int32_t>{1, 2});
  std::vector<ReadyExpert> got;
  std::vector<Status> errors;
  Drain(*st, &got, &errors);
  EXPECT_TRUE(got.empty());
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_NE(errors[0].message().find("queue refused"), std::string::npos) << errors[0].message();
  engine->refuse = false;
  RunLayer(*st, 0, {1, 2});
}

// When the engine refuses a batch, the refused prefetches give their share back (they used to
// keep it for good, and prefetch stayed shut off afterwards).
TEST_F(StreamStoreTest, ARefusedPrefetchDoesNotUseUpTheShare) {
  RefusingEngine* engine = nullptr;
  auto st = MakeRefusingStore(*layout_, Slots(4, 2, 0.5), &engine);
  ASSERT_NE(st, nullptr);
  engine->refuse = true;
  st->Hint(1, std::vector<int32_t>{0, 1});
  EXPECT_EQ(st->stats().total.prefetch_reads, 2u);
  engine->refuse = false;
  st->Hint(1, std::vector<int32_t>{2, 3});
  EXPECT_EQ(st->stats().total.prefetch_reads, 4u);  // the share is free again
}

// A refused placement load gives back its place among the placement reads in flight (it used
// to keep it, and placement stopped for good after kMaxPlacingReads refusals).
TEST_F(StreamStoreTest, ARefusedPlacementDoesNotStopPlacement) {
  RefusingEngine* engine = nullptr;
  auto st = MakeRefusingStore(*layout_, Slots(8, 2, 0.0), &engine);
  ASSERT_NE(st, nullptr);
  engine->refuse = true;
  const std::vector<std::pair<uint32_t, uint32_t>> hot = {{0, 0}, {0, 1}, {0, 2}, {0, 3}};
  ASSERT_EQ(st->Place(hot, 6), 4u);
  EXPECT_EQ(st->stats().total.placed, 2u);  // two reads at a time, both refused
  EXPECT_EQ(st->stats().total.read_errors, 2u);
  engine->refuse = false;
  RunLayer(*st, 1, {4, 5});  // its reads' completions start the rest of the placement
  EXPECT_EQ(st->stats().total.placed, 4u);
  RunLayer(*st, 0, {2, 3});
}

TEST_F(StreamStoreTest, AChangedFileIsReportedInOneLine) {
  auto st = MakeStore(Whole());
  ASSERT_NE(st, nullptr);
  RunLayer(*st, 0, {0});
  EXPECT_TRUE(st->CheckFiles().ok());
  std::filesystem::resize_file(file_->path(), kFileBytes / 2);
  Status s = st->CheckFiles();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(file_->path()), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
}

}  // namespace
}  // namespace mt
