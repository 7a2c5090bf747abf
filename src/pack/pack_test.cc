// Packs of synthetic models: the file is a valid GGUF whose dense tensors and expert slices
// are the original bytes, each expert one 4 KiB-aligned contiguous record with its xxh3
// checksum; the engine computes bit-identical logits from a pack in every storage mode;
// verify finds a flipped bit by layer and expert; malformed packs give one-line errors.
#include "pack/pack.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <xxhash.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>

#include "engine/context.h"
#include "engine/model.h"
#include "experts/record_checksum.h"
#include "experts/stream_store.h"
#include "gguf/gguf.h"
#include "io/fault_injecting_engine.h"
#include "kernels/matmul.h"
#include "kernels/panel_layout.h"
#include "model/expert_layout_gguf.h"
#include "model/hparams.h"
#include "model/memory_plan.h"
#include "model/tensor_names.h"
#include "synth/synth_test_util.h"

namespace mt {
namespace {

using testing_synth::SynthModels;

namespace fs = std::filesystem;

constexpr TensorRole kStacked[3] = {TensorRole::kFfnGateExps, TensorRole::kFfnUpExps,
                                    TensorRole::kFfnDownExps};

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

void FlipBit(const std::string& path, uint64_t offset, int bit) {
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  f.seekg(static_cast<std::streamoff>(offset));
  char c;
  f.read(&c, 1);
  c = static_cast<char>(c ^ (1 << bit));
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

uint64_t RoundUp4K(uint64_t x) { return (x + 4095) / 4096 * 4096; }

class PackTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { models_ = std::make_unique<SynthModels>("pack-test", 5); }
  static void TearDownTestSuite() { models_.reset(); }

  static std::string Synth(const std::string& preset, const std::string& type) {
    return models_->Get(preset, type);
  }

  static std::string Pack(const std::string& in, const std::string& name,
                          uint64_t split_max_bytes = 0,
                          WeightLayout weights = WeightLayout::kPanels) {
    const std::string out = (models_->dir() / name).string();
    PackOptions o;
    o.split_max_bytes = split_max_bytes;
    o.weights = weights;
    Result<PackResult> r = PackModel(in, out, o);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? r->paths.front() : out;
  }

  static std::vector<float> Logits(const std::string& path, MoeStorage mode, int threads = 2) {
    auto m = Model::Load(path, LoadOptions{});
    EXPECT_TRUE(m.ok()) << m.status().message();
    if (!m.ok()) return {};
    ContextOptions o;
    o.n_ctx = 64;
    o.n_threads = threads;
    o.storage.mode = mode;
    if (mode == MoeStorage::kStream) EXPECT_TRUE(ParseExpertCache("30%", &o.storage).ok());
    auto ctx = Context::Create(*m.value(), o);
    EXPECT_TRUE(ctx.ok()) << ctx.status().message();
    if (!ctx.ok()) return {};
    std::vector<float> logits;
    Status s = (*ctx)->Eval(kTokens, LogitsFor::kAll, &logits);
    EXPECT_TRUE(s.ok()) << s.message();
    return logits;
  }

  // A panels pack in mmap mode: the same logits where this CPU's kernels read the panels of
  // every K-quant in place (AVX-512); elsewhere (AVX2 keeps Q6_K in rows) the mode is refused
  // with a one-line error that says what to do instead.
  static void ExpectMmapOfPanels(const std::string& pack, const std::vector<float>& want) {
    const bool in_place = PanelsPreferred(GgmlType::kQ4_K, 16) &&
                          PanelsPreferred(GgmlType::kQ5_K, 16) &&
                          PanelsPreferred(GgmlType::kQ6_K, 16);
    if (in_place) {
      EXPECT_TRUE(Logits(pack, MoeStorage::kMmap) == want);
      EXPECT_TRUE(Logits(pack, MoeStorage::kMmap, 1) == want);
      return;
    }
    auto m = Model::Load(pack, LoadOptions{});
    ASSERT_TRUE(m.ok()) << m.status().message();
    ContextOptions o;
    o.n_ctx = 64;
    o.storage.mode = MoeStorage::kMmap;
    auto ctx = Context::Create(*m.value(), o);
    ASSERT_FALSE(ctx.ok());
    EXPECT_NE(ctx.status().message().find("cannot read in place: use --moe-storage resident or "
                                          "stream, or pack with --rows"),
              std::string::npos)
        << ctx.status().message();
  }

  // Copies the GGUF at `src` to `dst`, letting `edit` change the metadata, leaving out the
  // tensor `drop`, aligning the data to `alignment`.
  static void Rewrite(const std::string& src, const std::string& dst,
                      const std::function<void(GgufMetadata&)>& edit, const std::string& drop = "",
                      uint32_t alignment = kPackAlignment) {
    Result<GgufModel> in = GgufModel::Open(src);
    ASSERT_TRUE(in.ok()) << in.status().message();
    GgufWriterOptions o;
    o.alignment = alignment;
    GgufWriter w(dst, o);
    for (const GgufMetadata::Entry& e : in->metadata().entries()) {
      if (e.key != "general.alignment") w.metadata().AppendNew(e.key, e.value);
    }
    edit(w.metadata());
    for (const GgufTensor& t : in->tensors()) {
      if (t.name != drop) ASSERT_TRUE(w.AddTensor(t.name, t.type, t.shape).ok());
    }
    ASSERT_TRUE(w.Begin().ok());
    for (const GgufTensor& t : in->tensors()) {
      if (t.name != drop) ASSERT_TRUE(w.Write({t.data, t.n_bytes}).ok());
    }
    ASSERT_TRUE(w.Finish().ok());
  }

  // A stream context on `path` with `cache`, prefetch on or off, and optionally reads
  // through a fault-injecting engine.
  static Result<std::unique_ptr<Context>> StreamContext(const Model& m, const std::string& cache,
                                                        bool prefetch,
                                                        const FaultPlan* faults = nullptr) {
    ContextOptions o;
    o.n_ctx = 64;
    o.storage.mode = MoeStorage::kStream;
    o.storage.prefetch = prefetch;
    EXPECT_TRUE(ParseExpertCache(cache, &o.storage).ok());
    if (faults != nullptr) {
      auto plan = std::make_shared<FaultPlan>(*faults);
      o.storage.make_io = [plan]() -> Result<std::unique_ptr<IoEngine>> {
        std::unique_ptr<IoEngine> inner = MT_TRY(CreatePreadEngine(2));
        return std::unique_ptr<IoEngine>(
            std::make_unique<FaultInjectingEngine>(std::move(inner), *plan));
      };
    }
    return Context::Create(m, o);
  }

  static inline const std::vector<int32_t> kTokens = {5,  1000, 77, 4242, 9, 31000, 12, 640,
                                                      33, 1,    2,  3,    4, 5,     6};
  static inline std::unique_ptr<SynthModels> models_;
};

TEST(RecordShapeTest, PartsStartAtThe4KiBBoundaryAfterThePartBefore) {
  // Q6_K rows of 256: 210 bytes; 256 rows: 53760 bytes = 13 x 4096 + 512.
  ExpertSpec s;
  s.n_embd = 256;
  s.n_ff = 256;
  s.gate_type = s.up_type = s.down_type = GgmlType::kQ6_K;
  const RecordShape shape = PackRecordShape(s);
  EXPECT_EQ(shape.part_offset[0], 0u);
  EXPECT_EQ(shape.part_offset[1], 14u * 4096);
  EXPECT_EQ(shape.part_offset[2], 28u * 4096);
  EXPECT_EQ(shape.length, 28u * 4096 + 53760);
}

// Checks the pack at `pack_path` against the tensor-major original tensor by tensor, from
// the file's bytes and an independent xxh3 call.
// The bytes of part `w` as GGUF rows, whichever form it has.
std::vector<uint8_t> AsRows(const WeightMatrix& w) {
  std::vector<uint8_t> rows(w.data, w.data + w.row_bytes * w.rows);
  if (w.layout == WeightLayout::kPanels) {
    PanelsToRows(w.type, w.rows, w.cols, rows.data(), rows.data());
  }
  return rows;
}

void ExpectPackOf(const std::string& original_path, const std::string& pack_path,
                  WeightLayout weights = WeightLayout::kPanels) {
  Result<GgufModel> orig = GgufModel::Open(original_path);
  Result<GgufModel> pack = GgufModel::Open(pack_path);
  ASSERT_TRUE(orig.ok() && pack.ok());
  Result<HParams> hp = ReadHParams(orig->metadata());
  ASSERT_TRUE(hp.ok());
  const uint32_t L = hp->n_layer, E = hp->n_expert;

  // Metadata: the original's keys and values, the alignment, the layout and L*E checksums.
  const GgufMetadata& pm = pack->metadata();
  for (const GgufMetadata::Entry& e : orig->metadata().entries()) {
    if (e.key == "general.alignment") continue;
    const GgufValue* v = pm.Find(e.key);
    ASSERT_NE(v, nullptr) << e.key;
    EXPECT_EQ(v->ToShortString(), e.value.ToShortString()) << e.key;
    if (const GgufArray* a = e.value.AsArray()) {
      EXPECT_EQ(v->AsArray()->items.size(), a->items.size()) << e.key;
    }
  }
  EXPECT_EQ(pm.FindUint("general.alignment"), 4096u);
  ASSERT_NE(pm.FindString("moetier.expert_layout"), nullptr);
  EXPECT_EQ(*pm.FindString("moetier.expert_layout"), "expert-major");
  const GgufArray* sums = pm.FindArray("moetier.expert_checksums");
  ASSERT_NE(sums, nullptr);
  ASSERT_EQ(sums->element_type, GgufType::kUint64);
  ASSERT_EQ(sums->items.size(), uint64_t{L} * E);
  ASSERT_NE(pm.FindString("moetier.expert_weights"), nullptr);
  EXPECT_EQ(*pm.FindString("moetier.expert_weights"),
            weights == WeightLayout::kPanels ? "panels16" : "rows");

  // The dense tensors first, unchanged and in order.
  std::vector<const GgufTensor*> dense;
  for (const GgufTensor& t : orig->tensors()) {
    if (t.name.find("_exps.") == std::string::npos) dense.push_back(&t);
  }
  ASSERT_EQ(pack->tensors().size(), dense.size() + uint64_t{L} * E * 3);
  for (size_t i = 0; i < dense.size(); ++i) {
    const GgufTensor& p = pack->tensors()[i];
    ASSERT_EQ(p.name, dense[i]->name);
    EXPECT_EQ(p.type, dense[i]->type);
    EXPECT_EQ(p.shape, dense[i]->shape);
    ASSERT_EQ(p.n_bytes, dense[i]->n_bytes);
    EXPECT_EQ(std::memcmp(p.data, dense[i]->data, p.n_bytes), 0) << p.name;
  }

  // Then (layer, expert, gate|up|down): slices of the stacked tensors, one record each; with
  // panels, the slices that have a panel form hold it.
  int converted = 0;
  std::vector<std::vector<uint8_t>> files;
  for (const GgufShard& s : pack->shards()) files.push_back(ReadAll(s.path));
  size_t i = dense.size();
  uint64_t previous_end = 0;
  uint32_t previous_shard = 0;
  for (uint32_t l = 0; l < L; ++l) {
    for (uint32_t e = 0; e < E; ++e) {
      SCOPED_TRACE(fmt::format("layer {} expert {}", l, e));
      const GgufTensor* part[3];
      for (int p = 0; p < 3; ++p) {
        const GgufTensor& stacked = *orig->FindTensor(TensorName(kStacked[p], int(l)));
        part[p] = &pack->tensors()[i++];
        static constexpr const char* kBase[3] = {"ffn_gate", "ffn_up", "ffn_down"};
        ASSERT_EQ(part[p]->name, fmt::format("blk.{}.{}.{}.weight", l, kBase[p], e));
        EXPECT_EQ(part[p]->type, stacked.type);
        EXPECT_EQ(part[p]->shape, (std::vector<uint64_t>{stacked.shape[0], stacked.shape[1]}));
        const uint64_t slice = stacked.n_bytes / E;
        ASSERT_EQ(part[p]->n_bytes, slice);
        std::vector<uint8_t> want(stacked.data + e * slice, stacked.data + (e + 1) * slice);
        const int64_t rows = static_cast<int64_t>(stacked.shape[1]);
        if (weights == WeightLayout::kPanels && HasPanelForm(stacked.type, rows)) {
          RowsToPanels(stacked.type, rows, static_cast<int64_t>(stacked.shape[0]), want.data(),
                       want.data());
          ++converted;
        }
        EXPECT_EQ(std::memcmp(part[p]->data, want.data(), slice), 0);
      }
      // One shard; gate 4 KiB-aligned; up and down at the next 4 KiB boundary; zeros between.
      const uint64_t at = part[0]->file_offset;
      EXPECT_EQ(part[1]->shard, part[0]->shard);
      EXPECT_EQ(part[2]->shard, part[0]->shard);
      EXPECT_EQ(at % 4096, 0u);
      EXPECT_EQ(part[1]->file_offset, at + RoundUp4K(part[0]->n_bytes));
      EXPECT_EQ(part[2]->file_offset, part[1]->file_offset + RoundUp4K(part[1]->n_bytes));
      // Records follow each other with nothing but padding in between.
      if (part[0]->shard == previous_shard && previous_end != 0) {
        EXPECT_EQ(at, RoundUp4K(previous_end));
      }
      const uint64_t end = part[2]->file_offset + part[2]->n_bytes;
      const std::vector<uint8_t>& file = files[part[0]->shard];
      for (int p = 0; p < 2; ++p) {
        for (uint64_t b = part[p]->file_offset + part[p]->n_bytes; b < part[p + 1]->file_offset;
             ++b) {
          ASSERT_EQ(file[b], 0) << "padding byte " << b;
        }
      }
      EXPECT_EQ(*sums->items[uint64_t{l} * E + e].AsUint(),
                XXH3_64bits(file.data() + at, end - at));
      previous_end = end;
      previous_shard = part[0]->shard;
    }
  }
  // Both presets' experts are K-quants with rows a multiple of 16: all of them convert.
  EXPECT_EQ(converted, weights == WeightLayout::kPanels ? int(L * E * 3) : 0);
}

TEST_F(PackTest, PackHoldsTheOriginalBytesAsAlignedChecksummedRecords) {
  // q6_k: parts of 53760 bytes, so records have padding between their parts.
  for (const char* type : {"q6_k", "q4_k_m"}) {
    for (WeightLayout weights : {WeightLayout::kPanels, WeightLayout::kRows}) {
      SCOPED_TRACE(
          fmt::format("{} {}", type, weights == WeightLayout::kPanels ? "panels" : "rows"));
      const std::string orig = Synth("olmoe-tiny", type);
      const std::string name = fmt::format("olmoe-{}-{}.pack.gguf", type, int(weights));
      ExpectPackOf(orig, Pack(orig, name, 0, weights), weights);
    }
  }
}

TEST_F(PackTest, LayoutOfAPackDescribesTheSameExpertBytes) {
  const std::string orig = Synth("olmoe-tiny", "q6_k");
  const std::string pack = Pack(orig, "layout.pack.gguf");
  auto a = Model::Load(orig, LoadOptions{});
  auto b = Model::Load(pack, LoadOptions{});
  ASSERT_TRUE(a.ok() && b.ok()) << b.status().message();
  const ExpertLayout& la = a.value()->expert_layout();
  const ExpertLayout& lb = b.value()->expert_layout();
  EXPECT_FALSE(la.has_records());
  ASSERT_TRUE(lb.has_records());
  ASSERT_EQ(la.n_layer(), lb.n_layer());
  ASSERT_EQ(la.n_expert(), lb.n_expert());
  EXPECT_EQ(la.total_bytes(), lb.total_bytes());
  EXPECT_EQ(lb.max_record_bytes(), 28u * 4096 + 53760);
  for (uint32_t l = 0; l < la.n_layer(); ++l) {
    for (uint32_t e = 0; e < la.n_expert(); ++e) {
      const ByteExtent rec = lb.record_extent(l, e);
      EXPECT_EQ(rec.offset % 4096, 0u);
      EXPECT_EQ(rec.length, lb.record_shape(l).length);
      EXPECT_EQ(RecordChecksum(lb.record(l, e).mapped, rec.length), lb.record(l, e).checksum);
      for (int p = 0; p < 3; ++p) {
        const ExpertPart part = static_cast<ExpertPart>(p);
        const ByteExtent x = la.extent(l, e, part), y = lb.extent(l, e, part);
        ASSERT_EQ(x.length, y.length);
        EXPECT_EQ(y.offset, rec.offset + lb.record_shape(l).part_offset[p]);
        EXPECT_LE(y.offset + y.length, rec.offset + rec.length);
        const ExpertMatrices ma =
            la.Matrices(l, la.mapped(l, e, kGate), la.mapped(l, e, kUp), la.mapped(l, e, kDown));
        const ExpertMatrices mb =
            lb.Matrices(l, lb.mapped(l, e, kGate), lb.mapped(l, e, kUp), lb.mapped(l, e, kDown));
        const WeightMatrix* wa[3] = {&ma.gate, &ma.up, &ma.down};
        const WeightMatrix* wb[3] = {&mb.gate, &mb.up, &mb.down};
        EXPECT_EQ(wa[p]->layout, WeightLayout::kRows);
        EXPECT_EQ(wb[p]->layout, WeightLayout::kPanels);  // q6_k, rows a multiple of 16
        EXPECT_TRUE(AsRows(*wa[p]) == AsRows(*wb[p]));
      }
    }
  }
}

TEST_F(PackTest, APackGivesBitIdenticalLogitsInEveryStorageMode) {
  for (const char* preset : {"olmoe-tiny", "qwen2moe-tiny", "mixtral-tiny"}) {
    SCOPED_TRACE(preset);
    const std::string orig = Synth(preset, "q4_k_m");
    const std::string pack = Pack(orig, std::string(preset) + ".pack.gguf");
    const std::vector<float> want = Logits(orig, MoeStorage::kResident);
    ASSERT_FALSE(want.empty());
    EXPECT_TRUE(Logits(pack, MoeStorage::kResident) == want);
    ExpectMmapOfPanels(pack, want);
    EXPECT_TRUE(Logits(pack, MoeStorage::kStream) == want);
  }
}

// DeepSeek's leading dense layers have no records: zeros in the checksum array, no tensors,
// and the pack computes the same bits as the original in every mode.
TEST_F(PackTest, LayersWithoutExpertsHaveNoRecords) {
  for (const char* preset : {"deepseek2-tiny", "deepseek3-tiny"}) {
    SCOPED_TRACE(preset);
    const std::string orig = Synth(preset, "q4_k_m");
    const std::string pack = Pack(orig, std::string(preset) + ".pack.gguf");
    auto p = GgufModel::Open(pack);
    ASSERT_TRUE(p.ok());
    Result<HParams> hp = ReadHParams(p->metadata());
    ASSERT_TRUE(hp.ok());
    const uint32_t L = hp->n_layer, E = hp->n_expert, dense = hp->n_layer_dense_lead;
    ASSERT_GT(dense, 0u);
    const GgufArray* sums = p->metadata().FindArray("moetier.expert_checksums");
    ASSERT_NE(sums, nullptr);
    ASSERT_EQ(sums->items.size(), uint64_t{L} * E);
    for (uint32_t l = 0; l < L; ++l) {
      for (uint32_t e = 0; e < E; ++e) {
        EXPECT_EQ(*sums->items[uint64_t{l} * E + e].AsUint() == 0, l < dense) << l << " " << e;
        EXPECT_EQ(p->FindTensor(PerExpertTensorName(TensorRole::kFfnGateExps, l, e)) == nullptr,
                  l < dense);
      }
    }
    Result<VerifyResult> v = VerifyPack(pack, false);
    ASSERT_TRUE(v.ok()) << v.status().message();
    EXPECT_EQ(v->records.size(), uint64_t{L - dense} * E);
    EXPECT_TRUE(v->Mismatches().empty());
    const std::vector<float> want = Logits(orig, MoeStorage::kResident);
    ASSERT_FALSE(want.empty());
    EXPECT_TRUE(Logits(pack, MoeStorage::kResident) == want);
    ExpectMmapOfPanels(pack, want);
    EXPECT_TRUE(Logits(pack, MoeStorage::kStream) == want);
  }
}

TEST_F(PackTest, PrefetchLooksTwoLayersAheadOnAPackByDefault) {
  const std::string orig = Synth("olmoe-tiny", "q4_k_m");
  const std::string pack = Pack(orig, "depth.pack.gguf");
  for (auto [path, depth] : {std::pair{orig, 1}, {pack, 2}}) {
    auto m = Model::Load(path, LoadOptions{});
    ASSERT_TRUE(m.ok()) << m.status().message();
    for (bool prefetch : {true, false}) {
      auto ctx = StreamContext(*m.value(), "50%", prefetch);
      ASSERT_TRUE(ctx.ok()) << ctx.status().message();
      EXPECT_EQ((*ctx)->prefetch_depth(), prefetch ? depth : 0) << path;
    }
  }
}

TEST_F(PackTest, ARowsPackGivesBitIdenticalLogitsInEveryStorageMode) {
  const std::string orig = Synth("olmoe-tiny", "q4_k_m");
  const std::string pack = Pack(orig, "rows.pack.gguf", 0, WeightLayout::kRows);
  auto m = Model::Load(pack, LoadOptions{});
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m.value()->expert_layout().weight_layout(), WeightLayout::kRows);
  const std::vector<float> want = Logits(orig, MoeStorage::kResident);
  ASSERT_FALSE(want.empty());
  EXPECT_TRUE(Logits(pack, MoeStorage::kResident) == want);
  EXPECT_TRUE(Logits(pack, MoeStorage::kMmap) == want);
  EXPECT_TRUE(Logits(pack, MoeStorage::kStream) == want);
}

TEST_F(PackTest, SplitPackKeepsEveryRecordWhole) {
  const std::string orig = Synth("olmoe-tiny", "q6_k");
  // About 2.5 records per shard: byte limits fall inside records, yet none is cut.
  const std::string first = Pack(orig, "split.pack.gguf", 2 * (28 * 4096 + 57344) + 60000);
  Result<GgufModel> m = GgufModel::Open(first);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_GT(m->shards().size(), 10u);
  EXPECT_FALSE(fs::exists(models_->dir() / "split.pack.gguf"));
  ExpectPackOf(orig, first);
  const std::vector<float> want = Logits(orig, MoeStorage::kResident);
  ASSERT_FALSE(want.empty());
  EXPECT_TRUE(Logits(first, MoeStorage::kResident) == want);
  ExpectMmapOfPanels(first, want);
  EXPECT_TRUE(Logits(first, MoeStorage::kStream) == want);
  Result<VerifyResult> v = VerifyPack(first);
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(v->records.size(), 4u * 16);
  EXPECT_TRUE(v->Mismatches().empty());
  EXPECT_GT(v->files.size(), 10u);
}

TEST_F(PackTest, StreamReadsOneRecordPerExpert) {
  const std::string orig = Synth("olmoe-tiny", "q6_k");  // padded records
  const std::string pack = Pack(orig, "reads.pack.gguf");
  const std::vector<float> want = Logits(orig, MoeStorage::kResident);
  auto m = Model::Load(pack, LoadOptions{});
  ASSERT_TRUE(m.ok()) << m.status().message();
  const ExpertLayout& layout = m.value()->expert_layout();
  for (const char* cache : {"100%", "30%", "8%"}) {
    for (bool prefetch : {false, true}) {
      SCOPED_TRACE(fmt::format("{} prefetch {}", cache, prefetch));
      auto ctx = StreamContext(*m.value(), cache, prefetch);
      ASSERT_TRUE(ctx.ok()) << ctx.status().message();
      std::vector<float> logits;
      ASSERT_TRUE((*ctx)->Eval(kTokens, LogitsFor::kAll, &logits).ok());
      EXPECT_TRUE(logits == want);
      const TierStats& s = (*ctx)->expert_store().stats();
      EXPECT_GT(s.total.misses, 0u);
      if (!prefetch) EXPECT_EQ(s.total.prefetch_reads, 0u);
      // Every expert read (a demand miss that joined no prefetch, or a prefetch) is one
      // request for the whole record: 4096-aligned, 28 x 4096 + 53760 bytes rounded up.
      const uint64_t experts_read =
          s.total.misses - s.total.prefetch_joined + s.total.prefetch_reads;
      EXPECT_EQ(s.total.reads, experts_read);
      EXPECT_EQ(s.total.bytes_payload, experts_read * layout.spec(0).bytes());
      EXPECT_EQ(s.total.bytes_physical, experts_read * (28 * 4096 + RoundUp4K(53760)));
      EXPECT_EQ(s.total.read_errors, 0u);
    }
  }
}

TEST_F(PackTest, EvictionPoliciesAndPlacementWorkOnAPack) {
  const std::string orig = Synth("olmoe-tiny", "q4_k_m");
  const std::string pack = Pack(orig, "policies.pack.gguf");
  const std::vector<float> want = Logits(orig, MoeStorage::kResident);
  auto m = Model::Load(pack, LoadOptions{});
  ASSERT_TRUE(m.ok()) << m.status().message();
  const std::string profile = (models_->dir() / "pack-profile.json").string();
  {
    ContextOptions o;
    o.n_ctx = 64;
    auto ctx = Context::Create(*m.value(), o);
    ASSERT_TRUE(ctx.ok());
    std::vector<float> logits;
    ASSERT_TRUE((*ctx)->Eval(kTokens, LogitsFor::kLast, &logits).ok());
    ASSERT_TRUE((*ctx)->routing_stats().Save(profile).ok());
  }
  for (const char* policy : {"lru", "lfu", "placement"}) {
    SCOPED_TRACE(policy);
    ContextOptions o;
    o.n_ctx = 64;
    o.n_threads = 2;
    o.storage.mode = MoeStorage::kStream;
    ASSERT_TRUE(ParseExpertCache("30%", &o.storage).ok());
    o.storage.eviction = policy;
    o.storage.placement_file = profile;
    auto ctx = Context::Create(*m.value(), o);
    ASSERT_TRUE(ctx.ok()) << ctx.status().message();
    std::vector<float> logits;
    ASSERT_TRUE((*ctx)->Eval(kTokens, LogitsFor::kAll, &logits).ok());
    EXPECT_TRUE(logits == want);
    const TierStats& s = (*ctx)->expert_store().stats();
    EXPECT_GT(s.total.placed, 0u);
    EXPECT_EQ(s.total.read_errors, 0u);
  }
}

// Flips one bit in the gate part of every expert of `layer`; returns the records' offsets.
std::vector<uint64_t> CorruptLayer(const std::string& pack, uint32_t layer, uint32_t n_expert) {
  Result<GgufModel> m = GgufModel::Open(pack);
  EXPECT_TRUE(m.ok());
  std::vector<uint64_t> offsets;
  for (uint32_t e = 0; e < n_expert; ++e) {
    const GgufTensor* gate =
        m->FindTensor(PerExpertTensorName(TensorRole::kFfnGateExps, int(layer), int(e)));
    EXPECT_NE(gate, nullptr);
    offsets.push_back(gate->file_offset);
  }
  for (uint32_t e = 0; e < n_expert; ++e) FlipBit(pack, offsets[e] + 100 + e, e % 8);
  return offsets;
}

// Checks `msg` is the one-line checksum error of some expert of `layer` in `pack`, at the
// right offset; returns the expert.
int ExpectChecksumError(const std::string& msg, const std::string& pack, uint32_t layer,
                        const std::vector<uint64_t>& offsets) {
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  const std::regex re(
      fmt::format("{}: layer {} expert ([0-9]+): the record at offset ([0-9]+) "
                  "\\([0-9]+ bytes\\) fails its checksum.*",
                  pack, layer));
  std::smatch match;
  if (!std::regex_search(msg, match, re)) {
    ADD_FAILURE() << "not a checksum error naming layer " << layer << ": " << msg;
    return -1;
  }
  const int e = std::stoi(match[1]);
  EXPECT_LT(e, static_cast<int>(offsets.size()));
  if (e < static_cast<int>(offsets.size())) EXPECT_EQ(std::stoull(match[2]), offsets[e]) << msg;
  return e;
}

TEST_F(PackTest, ACorruptRecordIsNeverComputedWith) {
  const std::string orig = Synth("olmoe-tiny", "q4_k_m");
  const std::string pack = Pack(orig, "corrupt.pack.gguf");
  const std::vector<float> want = Logits(orig, MoeStorage::kResident);
  const std::vector<uint64_t> offsets = CorruptLayer(pack, 1, 16);

  // pack --verify names all 16.
  Result<VerifyResult> v = VerifyPack(pack);
  ASSERT_TRUE(v.ok()) << v.status().message();
  const std::vector<RecordCheck> bad = v->Mismatches();
  ASSERT_EQ(bad.size(), 16u);
  for (uint32_t e = 0; e < 16; ++e) {
    EXPECT_EQ(bad[e].layer, 1u);
    EXPECT_EQ(bad[e].expert, e);
    EXPECT_EQ(bad[e].offset, offsets[e]);
  }

  auto m = Model::Load(pack, LoadOptions{});  // the tensor table is fine: it loads
  ASSERT_TRUE(m.ok()) << m.status().message();

  // Stream: the first layer-1 expert read fails the step, with no logits; every later
  // try reads the record again and fails again, whatever the cache holds.
  for (bool prefetch : {false, true}) {
    SCOPED_TRACE(prefetch);
    auto ctx = StreamContext(*m.value(), "100%", prefetch);
    ASSERT_TRUE(ctx.ok()) << ctx.status().message();
    for (int attempt = 0; attempt < 2; ++attempt) {
      std::vector<float> logits;
      Status s = (*ctx)->Eval(kTokens, LogitsFor::kAll, &logits);
      ASSERT_FALSE(s.ok());
      EXPECT_EQ(s.code(), StatusCode::kCorrupt);
      ExpectChecksumError(s.message(), pack, 1, offsets);
      EXPECT_EQ((*ctx)->n_past(), 0u);
    }
    EXPECT_GT((*ctx)->expert_store().stats().total.read_errors, 0u);
  }

  // Resident: every record is checked as it is copied; expert 0 of layer 1 is the first bad.
  ContextOptions o;
  o.n_ctx = 64;
  o.storage.mode = MoeStorage::kResident;
  auto resident = Context::Create(*m.value(), o);
  ASSERT_FALSE(resident.ok());
  EXPECT_EQ(ExpectChecksumError(resident.status().message(), pack, 1, offsets), 0);
}

// The stream tier's checks, driven as MoeStep drives them: a deferred check (Verify, on a
// compute thread) that fails drops the record when its lease returns, and the next demand
// reads it again; a record handed out deferred but never verified is checked at its next
// hand-out; without defer_checks NextReady checks it itself.
TEST_F(PackTest, DeferredChecksFailClosedAndAnUnverifiedRecordIsCheckedLater) {
  const std::string orig = Synth("olmoe-tiny", "q4_k_m");
  const std::string pack = Pack(orig, "deferred.pack.gguf");
  const std::vector<uint64_t> offsets = CorruptLayer(pack, 1, 16);
  auto m = Model::Load(pack, LoadOptions{});
  ASSERT_TRUE(m.ok()) << m.status().message();
  StreamOptions o;
  o.cache_fraction = 1.0;
  auto made = StreamStore::Create(m.value()->expert_layout(), CreatePreadEngine(2).value(), o);
  ASSERT_TRUE(made.ok()) << made.status().message();
  StreamStore& store = *made.value();
  auto next = [&](bool defer) {
    Result<std::optional<ReadyExpert>> r = store.NextReady(/*wait=*/true, defer);
    EXPECT_TRUE(r.ok()) << r.status().message();
    EXPECT_TRUE(r.ok() && r->has_value());
    return r.ok() && r->has_value() ? std::move(**r) : ReadyExpert{};
  };
  const int32_t three[1] = {3};

  // A corrupt record: handed out unchecked, fails Verify, and is read again next time.
  store.BeginLayer(1, three);
  {
    ReadyExpert r = next(/*defer=*/true);
    EXPECT_EQ(r.expert, 3);
    EXPECT_TRUE(r.unchecked);
    Status bad = store.Verify(r);
    EXPECT_EQ(bad.code(), StatusCode::kCorrupt);
    EXPECT_EQ(ExpectChecksumError(bad.message(), pack, 1, offsets), 3);
    EXPECT_EQ(store.stats().total.read_errors, 0u);  // counted as the lease returns
  }
  EXPECT_EQ(store.stats().total.read_errors, 1u);
  store.BeginLayer(1, three);
  EXPECT_EQ(store.stats().total.misses, 2u);  // dropped: read again, not a hit
  {
    Result<std::optional<ReadyExpert>> r = store.NextReady(/*wait=*/true, /*defer=*/false);
    ASSERT_FALSE(r.ok());  // checked in NextReady: no lease at all
    EXPECT_EQ(ExpectChecksumError(r.status().message(), pack, 1, offsets), 3);
  }
  EXPECT_EQ(store.stats().total.read_errors, 2u);

  // A good record handed out deferred and never verified stays unchecked: its next
  // hand-out checks it (here, in NextReady), and after that it is never checked again.
  store.BeginLayer(2, three);
  EXPECT_TRUE(next(/*defer=*/true).unchecked);
  store.BeginLayer(2, three);
  EXPECT_EQ(store.stats().total.hits, 1u);
  EXPECT_FALSE(next(/*defer=*/false).unchecked);
  store.BeginLayer(2, three);
  {
    ReadyExpert r = next(/*defer=*/true);
    EXPECT_FALSE(r.unchecked);
    EXPECT_TRUE(store.Verify(r).ok());
  }
  // Verified on a compute thread, it is good for every later hand-out.
  store.BeginLayer(3, three);
  {
    ReadyExpert r = next(/*defer=*/true);
    EXPECT_TRUE(r.unchecked);
    EXPECT_TRUE(store.Verify(r).ok());
  }
  store.BeginLayer(3, three);
  EXPECT_FALSE(next(/*defer=*/true).unchecked);
  EXPECT_EQ(store.stats().total.read_errors, 2u);
}

TEST_F(PackTest, BitsFlippedAfterTheReadAreCaughtAndTheContextRecovers) {
  const std::string orig = Synth("olmoe-tiny", "q4_k_m");
  const std::string pack = Pack(orig, "flip.pack.gguf");
  const std::vector<float> want = Logits(orig, MoeStorage::kResident);
  auto m = Model::Load(pack, LoadOptions{});
  ASSERT_TRUE(m.ok()) << m.status().message();
  FaultPlan plan;
  FaultRule rule;
  rule.kind = FaultKind::kCorrupt;
  rule.every_nth = 5;
  rule.max_faults = 1;
  // 16 bits in the read (the record plus < 4 KiB of zero padding after it): at least one in
  // the record, as the plan is seeded.
  rule.flip_bits = 16;
  plan.rules.push_back(rule);
  auto ctx = StreamContext(*m.value(), "8%", /*prefetch=*/false, &plan);
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();
  std::vector<float> logits;
  Status s = (*ctx)->Eval(kTokens, LogitsFor::kAll, &logits);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kCorrupt) << s.message();
  EXPECT_NE(s.message().find(pack + ": layer "), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("fails its checksum"), std::string::npos) << s.message();
  EXPECT_EQ((*ctx)->n_past(), 0u);
  // The file is fine: the same context reads the expert again and gets the right numbers.
  (*ctx)->ClearKv();
  ASSERT_TRUE((*ctx)->Eval(kTokens, LogitsFor::kAll, &logits).ok());
  EXPECT_TRUE(logits == want);
}

TEST_F(PackTest, PackingIsDeterministicAndAPackRepacksToItself) {
  const std::string orig = Synth("olmoe-tiny", "q4_k_m");
  const std::string a = Pack(orig, "det-a.pack.gguf");
  const std::string b = Pack(orig, "det-b.pack.gguf");
  const std::string c = Pack(a, "det-c.pack.gguf");
  const std::vector<uint8_t> bytes = ReadAll(a);
  EXPECT_TRUE(ReadAll(b) == bytes);
  EXPECT_TRUE(ReadAll(c) == bytes);
  // Between the two weight forms, either way: a panels pack packed with rows is the rows
  // pack of the original, and back.
  const std::string rows = Pack(orig, "det-rows.pack.gguf", 0, WeightLayout::kRows);
  const std::string d = Pack(a, "det-d.pack.gguf", 0, WeightLayout::kRows);
  const std::string e = Pack(rows, "det-e.pack.gguf");
  EXPECT_TRUE(ReadAll(d) == ReadAll(rows));
  EXPECT_TRUE(ReadAll(e) == bytes);
  EXPECT_FALSE(ReadAll(rows) == bytes);
}

TEST_F(PackTest, MemoryPlanOfAPackEqualsTheOriginals) {
  const std::string orig = Synth("qwen2moe-tiny", "q4_k_m");
  const std::string pack = Pack(orig, "plan.pack.gguf");
  Result<GgufModel> a = GgufModel::Open(orig), b = GgufModel::Open(pack);
  ASSERT_TRUE(a.ok() && b.ok());
  Result<MemoryPlan> pa = ComputeMemoryPlan(a.value()), pb = ComputeMemoryPlan(b.value());
  ASSERT_TRUE(pa.ok() && pb.ok()) << pb.status().message();
  EXPECT_EQ(pb->total_bytes, pa->total_bytes);
  EXPECT_EQ(pb->dense_bytes, pa->dense_bytes);
  EXPECT_EQ(pb->expert_bytes, pa->expert_bytes);
  EXPECT_EQ(pb->bytes_per_token(), pa->bytes_per_token());
  ASSERT_EQ(pb->layers.size(), pa->layers.size());
  for (size_t l = 0; l < pa->layers.size(); ++l) {
    EXPECT_EQ(pb->layers[l].n_expert, pa->layers[l].n_expert);
    EXPECT_EQ(pb->layers[l].bytes_per_expert, pa->layers[l].bytes_per_expert);
    EXPECT_EQ(pb->layers[l].expert_bytes, pa->layers[l].expert_bytes);
  }
}

TEST_F(PackTest, VerifyNamesTheLayerAndExpertOfAFlippedBit) {
  const std::string orig = Synth("olmoe-tiny", "q6_k");
  const std::string pack = Pack(orig, "verify.pack.gguf");
  Result<VerifyResult> ok = VerifyPack(pack);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->n_layer, 4u);
  EXPECT_EQ(ok->n_expert, 16u);
  EXPECT_EQ(ok->records.size(), 64u);
  EXPECT_TRUE(ok->Mismatches().empty());
  EXPECT_EQ(ok->bytes, 64u * (28 * 4096 + 53760));

  Result<GgufModel> m = GgufModel::Open(pack);
  ASSERT_TRUE(m.ok());
  const GgufTensor* up = m->FindTensor("blk.2.ffn_up.5.weight");
  const GgufTensor* gate = m->FindTensor("blk.3.ffn_gate.11.weight");
  ASSERT_TRUE(up != nullptr && gate != nullptr);
  FlipBit(pack, up->file_offset + 1000, 3);
  // A padding byte between two parts is part of the record too.
  FlipBit(pack, gate->file_offset + gate->n_bytes + 7, 0);
  Result<VerifyResult> bad = VerifyPack(pack);
  ASSERT_TRUE(bad.ok()) << bad.status().message();
  const std::vector<RecordCheck> mism = bad->Mismatches();
  ASSERT_EQ(mism.size(), 2u);
  EXPECT_EQ(mism[0].layer, 2u);
  EXPECT_EQ(mism[0].expert, 5u);
  EXPECT_EQ(mism[0].file, pack);
  EXPECT_EQ(mism[0].offset, m->FindTensor("blk.2.ffn_gate.5.weight")->file_offset);
  EXPECT_EQ(mism[1].layer, 3u);
  EXPECT_EQ(mism[1].expert, 11u);
  EXPECT_NE(mism[0].actual, mism[0].expected);
}

TEST_F(PackTest, VerifyRefusesAFileThatIsNotAPack) {
  Result<VerifyResult> r = VerifyPack(Synth("olmoe-tiny", "q4_k_m"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not an expert-major pack"), std::string::npos);
}

TEST_F(PackTest, ATruncatedPackIsAnErrorNamingTheFile) {
  const std::string pack = Pack(Synth("olmoe-tiny", "q4_k_m"), "trunc.pack.gguf");
  fs::resize_file(pack, fs::file_size(pack) - 3 * 4096);
  auto m = Model::Load(pack, LoadOptions{});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find(pack), std::string::npos) << m.status().message();
  Result<VerifyResult> v = VerifyPack(pack);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find(pack), std::string::npos) << v.status().message();
}

TEST_F(PackTest, MalformedPacksAreOneLineErrorsNamingWhatIsWrong) {
  const std::string pack = Pack(Synth("olmoe-tiny", "q6_k"), "good.pack.gguf");
  struct Case {
    const char* name;
    std::function<void(GgufMetadata&)> edit;
    std::string drop;
    uint32_t alignment;
    const char* want;  // in the error message
  };
  const std::vector<Case> cases = {
      {"unknown layout",
       [](GgufMetadata& md) { md.Set("moetier.expert_layout", GgufValue::String("row-major")); },
       "", 4096, "moetier.expert_layout"},
      {"checksums missing", [](GgufMetadata& md) { md.Erase("moetier.expert_checksums"); }, "",
       4096, "moetier.expert_checksums"},
      {"checksums of the wrong type",
       [](GgufMetadata& md) {
         md.Set("moetier.expert_checksums", GgufValue::Int32Array(std::vector<int32_t>(64, 1)));
       },
       "", 4096, "moetier.expert_checksums"},
      {"checksums of the wrong length",
       [](GgufMetadata& md) {
         md.Set(
             "moetier.expert_checksums",
             GgufValue::Array(GgufType::kUint64, std::vector<GgufValue>(63, GgufValue::Uint64(1))));
       },
       "", 4096, "63 checksums"},
      {"missing expert tensor", [](GgufMetadata&) {}, "blk.1.ffn_up.3.weight", 4096,
       "missing tensor blk.1.ffn_up.3.weight"},
      {"misaligned records", [](GgufMetadata&) {}, "", 32, "not 4096-aligned"},
      // 32 checksums for 4 layers: 8 experts per layer, the hyperparameters say 16.
      {"fewer experts than the model has",
       [](GgufMetadata& md) {
         md.Set(
             "moetier.expert_checksums",
             GgufValue::Array(GgufType::kUint64, std::vector<GgufValue>(32, GgufValue::Uint64(1))));
       },
       "", 4096, "8 experts"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string bad = (models_->dir() / "bad.gguf").string();
    Rewrite(pack, bad, c.edit, c.drop, c.alignment);
    auto m = Model::Load(bad, LoadOptions{});
    ASSERT_FALSE(m.ok());
    const std::string msg = m.status().message();
    EXPECT_NE(msg.find(c.want), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    fs::remove(bad);
  }
}

TEST_F(PackTest, AFailedPackLeavesNoFile) {
  const std::string orig = Synth("olmoe-tiny", "q4_k_m");
  PackOptions o;
  Result<PackResult> r = PackModel(orig, (models_->dir() / "missing-dir" / "x.gguf").string(), o);
  ASSERT_FALSE(r.ok());
  EXPECT_FALSE(fs::exists(models_->dir() / "missing-dir"));
  Result<PackResult> bad_input =
      PackModel((models_->dir() / "nope.gguf").string(), (models_->dir() / "y.gguf").string(), o);
  ASSERT_FALSE(bad_input.ok());
  EXPECT_FALSE(fs::exists(models_->dir() / "y.gguf"));
  EXPECT_FALSE(fs::exists(models_->dir() / "y.gguf.tmp"));
}

}  // namespace
}  // namespace mt
