// Split sets: written by the writer (by bytes and by tensor count) and reopened from the first
// shard; hand-built sets with a missing, extra or mismatched shard.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "gguf/gguf.h"
#include "gguf/gguf_test_util.h"

namespace mt {
namespace {

using testing_gguf::Bytes;
using testing_gguf::Exists;
using testing_gguf::ExpectFormatError;
using testing_gguf::TempDir;
using testing_gguf::WriteFile;

TEST(GgufSplitTest, SplitPathMatchesGgufSplit) {
  EXPECT_EQ(SplitPath("/m/x", 1, 3), "/m/x-00001-of-00003.gguf");
  EXPECT_EQ(SplitPath("x", 12, 65535), "x-00012-of-65535.gguf");
}

// f32 tensors of 8, 24, 4, 40 and 8 elements: 32, 96, 16, 160 and 32 bytes.
const std::vector<uint64_t> kElements = {8, 24, 4, 40, 8};

std::vector<uint8_t> TensorBytes(size_t i) {
  std::vector<uint8_t> out(kElements[i] * 4);
  for (size_t k = 0; k < out.size(); ++k) out[k] = static_cast<uint8_t>(17 * i + k);
  return out;
}

// Writes the five tensors with `options` into dir/m.gguf; returns the output paths.
// Tensor i is declared keep_with_previous when keep[i].
std::vector<std::string> WriteSet(const TempDir& dir, GgufWriterOptions options,
                                  std::vector<bool> keep = {}) {
  keep.resize(kElements.size(), false);
  GgufWriter w(dir.File("m.gguf"), options);
  w.metadata().Set("general.architecture", GgufValue::String("test"));
  w.metadata().Set("test.value", GgufValue::Uint32(7));
  for (size_t i = 0; i < kElements.size(); ++i) {
    EXPECT_TRUE(w.AddTensor("t" + std::to_string(i), GgmlType::kF32, {kElements[i]}, keep[i]).ok());
  }
  EXPECT_TRUE(w.Begin().ok());
  for (size_t i = 0; i < kElements.size(); ++i) EXPECT_TRUE(w.Write(TensorBytes(i)).ok());
  Status s = w.Finish();
  EXPECT_TRUE(s.ok()) << s.message();
  return w.output_paths();
}

// Opens dir/m-00001-of-0000N.gguf and checks shard assignment `shard_of`, split keys and data.
void ExpectSet(const TempDir& dir, const std::vector<std::string>& paths,
               const std::vector<uint32_t>& shard_of, uint32_t alignment) {
  const uint32_t n = static_cast<uint32_t>(paths.size());
  for (uint32_t k = 0; k < n; ++k) EXPECT_EQ(paths[k], SplitPath(dir.File("m"), k + 1, n));
  Result<GgufModel> m = GgufModel::Open(paths[0]);
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->shards().size(), n);
  EXPECT_EQ(*m->metadata().FindString("general.architecture"), "test");
  EXPECT_EQ(m->metadata().FindUint("test.value"), 7u);
  uint64_t total = 0;
  for (uint32_t k = 0; k < n; ++k) {
    const GgufShard& s = m->shards()[k];
    SCOPED_TRACE(s.path);
    EXPECT_EQ(s.path, paths[k]);
    EXPECT_EQ(s.alignment, alignment);
    total += s.file_size;
    // gguf-split's key types: u16, u16, i32.
    EXPECT_EQ(s.metadata.Find("split.no")->type(), GgufType::kUint16);
    EXPECT_EQ(s.metadata.Find("split.count")->type(), GgufType::kUint16);
    EXPECT_EQ(s.metadata.Find("split.tensors.count")->type(), GgufType::kInt32);
    EXPECT_EQ(s.metadata.FindUint("split.no"), k);
    EXPECT_EQ(s.metadata.FindUint("split.count"), n);
    EXPECT_EQ(s.metadata.FindUint("split.tensors.count"), kElements.size());
    // Only the first shard carries the model's metadata.
    EXPECT_EQ(s.metadata.Contains("general.architecture"), k == 0);
    const size_t alignment_keys = alignment == 32 ? 0 : 1;
    if (k > 0) EXPECT_EQ(s.metadata.entries().size(), 3u + alignment_keys);
  }
  EXPECT_EQ(m->total_file_bytes(), total);
  ASSERT_EQ(m->tensors().size(), kElements.size());
  for (size_t i = 0; i < kElements.size(); ++i) {
    const GgufTensor& t = m->tensors()[i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.name, "t" + std::to_string(i));
    EXPECT_EQ(t.shard, shard_of[i]);
    EXPECT_EQ(t.file_offset % alignment, 0u);
    EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.n_bytes), TensorBytes(i));
    EXPECT_EQ(m->FindTensor(t.name), &t);
  }
}

TEST(GgufSplitTest, SplitByTensorCount) {
  TempDir dir;
  GgufWriterOptions o;
  o.split_max_tensors = 2;
  const std::vector<std::string> paths = WriteSet(dir, o);
  ASSERT_EQ(paths.size(), 3u);
  ExpectSet(dir, paths, {0, 0, 1, 1, 2}, 32);
}

TEST(GgufSplitTest, SplitByBytes) {
  // Padded sizes 32, 96, 32, 160, 32 with at most 128 per shard: {t0, t1} = 128, {t2},
  // {t3} alone (larger than the limit), {t4}.
  TempDir dir;
  GgufWriterOptions o;
  o.split_max_bytes = 128;
  const std::vector<std::string> paths = WriteSet(dir, o);
  ASSERT_EQ(paths.size(), 4u);
  ExpectSet(dir, paths, {0, 0, 1, 2, 3}, 32);
}

TEST(GgufSplitTest, SplitWithAlignment) {
  // Padded to 64: 64, 128, 64, 192, 64; at most 200 bytes: {t0, t1}, {t2}, {t3}, {t4}.
  TempDir dir;
  GgufWriterOptions o;
  o.alignment = 64;
  o.split_max_bytes = 200;
  const std::vector<std::string> paths = WriteSet(dir, o);
  ASSERT_EQ(paths.size(), 4u);
  ExpectSet(dir, paths, {0, 0, 1, 2, 3}, 64);
}

TEST(GgufSplitTest, TensorsKeptWithThePreviousOneShareItsShard) {
  // Padded sizes 32, 96, 32, 160, 32, at most 128 bytes per shard.
  {
    // {t0, t1, t2} is one group of 160 bytes: over the limit, so a shard of its own.
    TempDir dir;
    GgufWriterOptions o;
    o.split_max_bytes = 128;
    const std::vector<std::string> paths = WriteSet(dir, o, {false, true, true});
    ASSERT_EQ(paths.size(), 3u);
    ExpectSet(dir, paths, {0, 0, 0, 1, 2}, 32);
  }
  {
    // {t3, t4} (192 bytes) does not fit after t2, starts a shard, and t4 stays with t3.
    TempDir dir;
    GgufWriterOptions o;
    o.split_max_bytes = 128;
    const std::vector<std::string> paths = WriteSet(dir, o, {false, false, false, false, true});
    ASSERT_EQ(paths.size(), 3u);
    ExpectSet(dir, paths, {0, 0, 1, 2, 2}, 32);
  }
  {
    // By count, at most 2: t0; {t1, t2} does not fit beside t0; {t3, t4}.
    TempDir dir;
    GgufWriterOptions o;
    o.split_max_tensors = 2;
    const std::vector<std::string> paths = WriteSet(dir, o, {false, false, true});
    ASSERT_EQ(paths.size(), 3u);
    ExpectSet(dir, paths, {0, 1, 1, 2, 2}, 32);
  }
}

TEST(GgufSplitTest, OneShardSetOpensAsASingleFile) {
  TempDir dir;
  GgufWriterOptions o;
  o.split_max_tensors = 100;
  const std::vector<std::string> paths = WriteSet(dir, o);
  ASSERT_EQ(paths, std::vector<std::string>{dir.File("m-00001-of-00001.gguf")});
  Result<GgufModel> m = GgufModel::Open(paths[0]);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->tensors().size(), 5u);
  EXPECT_EQ(m->metadata().FindUint("split.count"), 1u);
}

// A hand-built shard of a set: f32 [4] tensors named `tensors`, each 16 bytes of its index
// k * 16 + i, at 32-byte steps. Offsets of the split values are recorded for the tests.
struct ShardSpec {
  int no = 0;
  int count = 3;
  int total = 4;
  std::vector<std::string> tensors;
  bool has_count = true;
  bool count_as_string = false;
};

struct BuiltShard {
  std::vector<uint8_t> bytes;
  std::map<std::string, uint64_t> value_offset;  // key -> offset of its value
  std::vector<uint64_t> info_offset;             // tensor info offsets
};

BuiltShard BuildShard(const ShardSpec& s) {
  BuiltShard out;
  Bytes b;
  const uint64_t n_kv = (s.no == 0 ? 1 : 0) + (s.has_count ? 3 : 2);
  b.Header(s.tensors.size(), n_kv);
  if (s.no == 0) b.Key("general.architecture", GgufType::kString).Str("test");
  b.Key("split.no", GgufType::kUint16);
  out.value_offset["split.no"] = b.size();
  b.Put<uint16_t>(static_cast<uint16_t>(s.no));
  if (s.has_count) {
    if (s.count_as_string) {
      b.Key("split.count", GgufType::kString);
      out.value_offset["split.count"] = b.size();
      b.Str("3");
    } else {
      b.Key("split.count", GgufType::kUint16);
      out.value_offset["split.count"] = b.size();
      b.Put<uint16_t>(static_cast<uint16_t>(s.count));
    }
  }
  b.Key("split.tensors.count", GgufType::kInt32);
  out.value_offset["split.tensors.count"] = b.size();
  b.Put<int32_t>(s.total);
  for (size_t i = 0; i < s.tensors.size(); ++i) {
    out.info_offset.push_back(b.size());
    b.TensorInfo(s.tensors[i], {4}, GgmlType::kF32, 32 * i);
  }
  b.PadTo(32);
  for (size_t i = 0; i < s.tensors.size(); ++i) {
    b.Fill(16, static_cast<uint8_t>(s.no * 16 + i)).Fill(16, 0);
  }
  out.bytes = std::move(b.data);
  return out;
}

// The good set: m-0000K-of-00003.gguf holding {a}, {b, c}, {d}.
std::vector<ShardSpec> GoodSpecs() {
  std::vector<ShardSpec> s(3);
  s[0].tensors = {"a"};
  s[1].no = 1, s[1].tensors = {"b", "c"};
  s[2].no = 2, s[2].tensors = {"d"};
  return s;
}

std::vector<BuiltShard> WriteSpecs(const TempDir& dir, const std::vector<ShardSpec>& specs,
                                   int count = 3) {
  std::vector<BuiltShard> out;
  for (size_t k = 0; k < specs.size(); ++k) {
    out.push_back(BuildShard(specs[k]));
    WriteFile(SplitPath(dir.File("m"), static_cast<uint32_t>(k + 1), count), out.back().bytes);
  }
  return out;
}

std::string Shard(const TempDir& dir, uint32_t k) { return SplitPath(dir.File("m"), k, 3); }

TEST(GgufSplitTest, HandBuiltSetOpens) {
  TempDir dir;
  WriteSpecs(dir, GoodSpecs());
  Result<GgufModel> m = GgufModel::Open(Shard(dir, 1));
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->shards().size(), 3u);
  ASSERT_EQ(m->tensors().size(), 4u);
  const std::vector<std::string> names = {"a", "b", "c", "d"};
  const std::vector<uint32_t> shard = {0, 1, 1, 2};
  const std::vector<uint8_t> fill = {0, 16, 17, 32};
  for (size_t i = 0; i < 4; ++i) {
    const GgufTensor& t = m->tensors()[i];
    EXPECT_EQ(t.name, names[i]);
    EXPECT_EQ(t.shard, shard[i]);
    EXPECT_EQ(t.data[0], fill[i]);
    EXPECT_EQ(t.data[15], fill[i]);
    EXPECT_EQ(t.file_offset, m->shards()[t.shard].data_offset + (i == 2 ? 32 : 0));
  }
}

TEST(GgufSplitTest, FirstShardWithoutTensors) {
  // gguf-split --no-tensor-first-split puts only metadata in the first shard.
  TempDir dir;
  std::vector<ShardSpec> specs = GoodSpecs();
  specs[0].tensors = {};
  specs[0].total = 3;
  specs[1].total = specs[2].total = 3;
  WriteSpecs(dir, specs);
  Result<GgufModel> m = GgufModel::Open(Shard(dir, 1));
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->tensors().size(), 3u);
  EXPECT_EQ(m->tensors()[0].shard, 1u);
}

TEST(GgufSplitTest, MissingShard) {
  TempDir dir;
  WriteSpecs(dir, GoodSpecs());
  std::filesystem::remove(Shard(dir, 2));
  Result<GgufModel> m = GgufModel::Open(Shard(dir, 1));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(m.status().message(),
            Shard(dir, 2) + ": missing shard 2 of 3 of the split set opened from " + Shard(dir, 1));
}

TEST(GgufSplitTest, ShardWithAnotherCount) {
  TempDir dir;
  std::vector<ShardSpec> specs = GoodSpecs();
  specs[1].count = 2;
  auto built = WriteSpecs(dir, specs);
  ExpectFormatError(GgufModel::Open(Shard(dir, 1)).status(), StatusCode::kCorrupt, Shard(dir, 2),
                    built[1].value_offset["split.count"], "split.count is 2 but the first shard");
}

TEST(GgufSplitTest, ShardWithWrongNumber) {
  TempDir dir;
  std::vector<ShardSpec> specs = GoodSpecs();
  specs[2].no = 1;  // two shards claim to be number 1 (from 0)
  auto built = WriteSpecs(dir, specs);
  ExpectFormatError(GgufModel::Open(Shard(dir, 1)).status(), StatusCode::kCorrupt, Shard(dir, 3),
                    built[2].value_offset["split.no"], "split.no is 1, expected 2");
}

TEST(GgufSplitTest, TotalTensorCountDisagrees) {
  TempDir dir;
  std::vector<ShardSpec> specs = GoodSpecs();
  for (ShardSpec& s : specs) s.total = 5;
  auto built = WriteSpecs(dir, specs);
  ExpectFormatError(GgufModel::Open(Shard(dir, 1)).status(), StatusCode::kCorrupt, Shard(dir, 1),
                    built[0].value_offset["split.tensors.count"],
                    "split.tensors.count is 5 but the 3 shards hold 4 tensors");
  specs = GoodSpecs();
  specs[2].total = 7;
  built = WriteSpecs(dir, specs);
  ExpectFormatError(GgufModel::Open(Shard(dir, 1)).status(), StatusCode::kCorrupt, Shard(dir, 3),
                    built[2].value_offset["split.tensors.count"],
                    "split.tensors.count is 7 but the first shard");
}

TEST(GgufSplitTest, OpeningALaterShardNamesTheFirst) {
  TempDir dir;
  WriteSpecs(dir, GoodSpecs());
  Result<GgufModel> m = GgufModel::Open(Shard(dir, 2));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m.status().message(),
            Shard(dir, 2) + ": shard 2 of a 3-shard split set; open " + Shard(dir, 1) + " instead");
}

TEST(GgufSplitTest, ExtraShard) {
  TempDir dir;
  WriteSpecs(dir, GoodSpecs());
  const std::string extra = SplitPath(dir.File("m"), 4, 3);
  WriteFile(extra, BuildShard(GoodSpecs()[2]).bytes);
  Result<GgufModel> m = GgufModel::Open(Shard(dir, 1));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kCorrupt);
  EXPECT_TRUE(m.status().message().starts_with(extra + ": extra shard")) << m.status().message();
}

TEST(GgufSplitTest, FirstShardNameMustFollowThePattern) {
  TempDir dir;
  WriteSpecs(dir, GoodSpecs());
  std::filesystem::copy_file(Shard(dir, 1), dir.File("renamed.gguf"));
  Result<GgufModel> m = GgufModel::Open(dir.File("renamed.gguf"));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("does not end in -00001-of-00003.gguf"), std::string::npos)
      << m.status().message();
}

TEST(GgufSplitTest, TensorInTwoShards) {
  TempDir dir;
  std::vector<ShardSpec> specs = GoodSpecs();
  specs[2].tensors = {"b"};
  auto built = WriteSpecs(dir, specs);
  ExpectFormatError(GgufModel::Open(Shard(dir, 1)).status(), StatusCode::kCorrupt, Shard(dir, 3),
                    built[2].info_offset[0], "tensor 'b' is also in an earlier shard");
}

TEST(GgufSplitTest, BrokenLaterShardNamesItself) {
  TempDir dir;
  auto built = WriteSpecs(dir, GoodSpecs());
  built[2].bytes[0] = 'X';
  WriteFile(Shard(dir, 3), built[2].bytes);
  ExpectFormatError(GgufModel::Open(Shard(dir, 1)).status(), StatusCode::kCorrupt, Shard(dir, 3), 0,
                    "bad magic");
  built[2].bytes[0] = 'G';
  built[2].bytes.resize(built[2].bytes.size() - 20);  // cut into "d"'s data
  WriteFile(Shard(dir, 3), built[2].bytes);
  ExpectFormatError(GgufModel::Open(Shard(dir, 1)).status(), StatusCode::kCorrupt, Shard(dir, 3),
                    built[2].info_offset[0] + 8 + 1 + 4 + 8 + 4, "extends past the end");
}

TEST(GgufSplitTest, SplitKeysOfTheWrongKind) {
  TempDir dir;
  std::vector<ShardSpec> specs = GoodSpecs();
  specs[0].count_as_string = true;
  auto built = WriteSpecs(dir, specs);
  ExpectFormatError(GgufModel::Open(Shard(dir, 1)).status(), StatusCode::kCorrupt, Shard(dir, 1),
                    built[0].value_offset["split.count"],
                    "split.count must be an integer in 0..65535, not string");
  specs = GoodSpecs();
  specs[1].has_count = false;
  WriteSpecs(dir, specs);
  Result<GgufModel> m = GgufModel::Open(Shard(dir, 1));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().message(), Shard(dir, 2) +
                                      ": not a shard of a split set (no split.count); expected "
                                      "shard 2 of 3");
}

// Optional: a set split by tensor count is byte for byte what llama.cpp's gguf-split makes of
// the same model written as one file. Skipped without a llama.cpp build (MT_LLAMA_CPP_DIR).
TEST(GgufSplitTest, OptionalMatchesLlamaCppGgufSplit) {
  const char* env = std::getenv("MT_LLAMA_CPP_DIR");
  const std::string tool =
      std::string(env ? env : "/work/oracle/llama.cpp") + "/build/bin/llama-gguf-split";
  if (!Exists(tool)) GTEST_SKIP() << "no " << tool;
  TempDir dir;
  ASSERT_EQ(WriteSet(dir, {}).size(), 1u);  // dir/m.gguf, one file
  const std::string command = tool + " --split --split-max-tensors 2 " + dir.File("m.gguf") + " " +
                              dir.File("ll") + " > /dev/null 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  GgufWriterOptions o;
  o.split_max_tensors = 2;
  const std::vector<std::string> ours = WriteSet(dir, o);
  ASSERT_EQ(ours.size(), 3u);
  for (uint32_t k = 0; k < 3; ++k) {
    SCOPED_TRACE(ours[k]);
    const std::vector<uint8_t> theirs = testing_gguf::ReadFile(SplitPath(dir.File("ll"), k + 1, 3));
    ASSERT_FALSE(theirs.empty());
    EXPECT_TRUE(testing_gguf::ReadFile(ours[k]) == theirs);
  }
}

}  // namespace
}  // namespace mt
