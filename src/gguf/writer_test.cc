// Writer tests: byte-exact output against the hand-assembled file, round trips of every
// value type, alignment, streaming in odd chunk sizes, and failures that leave no file.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <limits>

#include "gguf/gguf.h"
#include "gguf/gguf_test_util.h"

namespace mt {
namespace {

using testing_gguf::Exists;
using testing_gguf::ReadFile;
using testing_gguf::TempDir;
using testing_gguf::ValueEqual;

// Deterministic bytes for tensor `seed`.
std::vector<uint8_t> Pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> out(n);
  uint32_t x = seed * 2654435761u + 1;
  for (uint8_t& b : out) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  return out;
}

// Writes `bytes` in pieces of `chunk` bytes (the last one shorter).
Status WriteChunked(GgufWriter& w, const std::vector<uint8_t>& bytes, size_t chunk) {
  for (size_t i = 0; i < bytes.size(); i += chunk) {
    const size_t n = std::min(chunk, bytes.size() - i);
    MT_RETURN_IF_ERROR(w.Write(std::span<const uint8_t>(bytes.data() + i, n)));
  }
  return Status::Ok();
}

TEST(GgufWriterTest, WritesTheHandAssembledFileByteForByte) {
  TempDir dir;
  const std::string path = dir.File("golden.gguf");
  GgufWriter w(path);
  w.metadata().Set("general.architecture", GgufValue::String("qwen3moe"));
  w.metadata().Set("qwen3moe.expert_count", GgufValue::Uint32(128));
  w.metadata().Set("tokenizer.ggml.tokens", GgufValue::StringArray({"a", "<s>", ""}));
  w.metadata().Set("x.f32", GgufValue::Float32(1.5f));
  w.metadata().Set("x.scores", GgufValue::Float32Array({-1.0f, 0.5f}));
  ASSERT_TRUE(w.AddTensor("tok", GgmlType::kF32, {4, 2}).ok());
  ASSERT_TRUE(w.AddTensor("out", GgmlType::kQ8_0, {32}).ok());
  ASSERT_TRUE(w.Begin().ok());
  ASSERT_EQ(w.output_paths(), std::vector<std::string>{path});
  EXPECT_TRUE(Exists(path + ".tmp"));
  EXPECT_FALSE(Exists(path));
  ASSERT_TRUE(w.Write(testing_gguf::GoldenTokData()).ok());
  ASSERT_TRUE(w.Write(testing_gguf::GoldenOutData()).ok());
  ASSERT_TRUE(w.Finish().ok());
  EXPECT_FALSE(Exists(path + ".tmp"));
  EXPECT_EQ(ReadFile(path), testing_gguf::GoldenBytes());
}

// Metadata with every value type, nested arrays and string arrays.
GgufMetadata EveryType() {
  GgufMetadata md;
  md.Set("general.architecture", GgufValue::String("test"));
  md.Set("u8", GgufValue::Storage(uint8_t{200}));
  md.Set("i8", GgufValue::Storage(int8_t{-100}));
  md.Set("u16", GgufValue::Storage(uint16_t{60000}));
  md.Set("i16", GgufValue::Storage(int16_t{-30000}));
  md.Set("u32", GgufValue::Uint32(4000000000u));
  md.Set("i32", GgufValue::Int32(-2000000000));
  md.Set("f32", GgufValue::Float32(-1.0e-30f));
  md.Set("bool.t", GgufValue::Bool(true));
  md.Set("bool.f", GgufValue::Bool(false));
  md.Set("str", GgufValue::String("h\xc3\xa9llo\nworld"));
  md.Set("str.empty", GgufValue::String(""));
  md.Set("u64", GgufValue::Uint64(~uint64_t{0}));
  md.Set("i64", GgufValue::Storage(std::numeric_limits<int64_t>::min()));
  md.Set("f64", GgufValue::Storage(-2.5e300));
  md.Set("f64.inf", GgufValue::Storage(std::numeric_limits<double>::infinity()));
  md.Set("arr.str", GgufValue::StringArray({"", "a", std::string(300, 'x'), "\xe4\xb8\xad"}));
  md.Set("arr.f32", GgufValue::Float32Array({1.0f, -0.0f, 3.5f}));
  md.Set("arr.i32", GgufValue::Int32Array({-1, 0, 1}));
  md.Set("arr.empty", GgufValue::Array(GgufType::kUint16, {}));
  md.Set("arr.bool",
         GgufValue::Array(GgufType::kBool, {GgufValue::Bool(true), GgufValue::Bool(false)}));
  md.Set("arr.u64", GgufValue::Array(GgufType::kUint64,
                                     {GgufValue::Uint64(1), GgufValue::Uint64(uint64_t{1} << 63)}));
  // [[1, 2], ["x", ""], []] and a three-level [[[7]]].
  md.Set("arr.nested",
         GgufValue::Array(GgufType::kArray,
                          {GgufValue::Int32Array({1, 2}), GgufValue::StringArray({"x", ""}),
                           GgufValue::Array(GgufType::kFloat64, {})}));
  md.Set("arr.deep",
         GgufValue::Array(GgufType::kArray,
                          {GgufValue::Array(GgufType::kArray, {GgufValue::Int32Array({7})})}));
  return md;
}

TEST(GgufWriterTest, RoundTripsEveryValueType) {
  TempDir dir;
  const std::string path = dir.File("m.gguf");
  GgufWriter w(path);
  const GgufMetadata md = EveryType();
  for (const auto& e : md.entries()) w.metadata().Set(e.key, e.value);
  ASSERT_TRUE(w.Begin().ok());
  ASSERT_TRUE(w.Finish().ok());

  Result<GgufModel> m = GgufModel::Open(path);
  ASSERT_TRUE(m.ok()) << m.status().message();
  const auto& got = m->metadata().entries();
  ASSERT_EQ(got.size(), md.entries().size());  // alignment 32 is the default: no key added
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(md.entries()[i].key);
    EXPECT_EQ(got[i].key, md.entries()[i].key);
    EXPECT_TRUE(ValueEqual(got[i].value, md.entries()[i].value))
        << got[i].value.ToShortString() << " vs " << md.entries()[i].value.ToShortString();
  }
  // Spot checks that do not rely on ValueEqual.
  EXPECT_EQ(std::get<int8_t>(m->metadata().Find("i8")->storage()), -100);
  EXPECT_EQ(m->metadata().FindArray("arr.str")->items[2].AsString()->size(), 300u);
  EXPECT_TRUE(std::isinf(*m->metadata().FindDouble("f64.inf")));
  const GgufArray* deep = m->metadata().FindArray("arr.deep");
  EXPECT_EQ(deep->items[0].AsArray()->items[0].AsArray()->items[0].AsInt(), 7);
  EXPECT_TRUE(m->tensors().empty());
  // No tensors: the file is the header padded to the alignment.
  EXPECT_EQ(m->shards()[0].file_size % 32, 0u);
  EXPECT_EQ(m->shards()[0].data_offset, m->shards()[0].file_size);
}

struct TensorCase {
  std::string name;
  GgmlType type;
  std::vector<uint64_t> shape;
  uint64_t n_bytes;  // by hand: elements / block size * block bytes
};

// f32 [3,5]: 15 * 4; q4_0 [64,2]: 4 blocks * 18; q6_K [256]: 1 * 210; i8 [7]: 7;
// q4_K [256,1,2]: 2 * 144; bf16 [5]: 10.
std::vector<TensorCase> Cases() {
  return {{"a.f32", GgmlType::kF32, {3, 5}, 60},         {"b.q4_0", GgmlType::kQ4_0, {64, 2}, 72},
          {"c.q6_k", GgmlType::kQ6_K, {256}, 210},       {"d.i8", GgmlType::kI8, {7}, 7},
          {"e.q4_k", GgmlType::kQ4_K, {256, 1, 2}, 288}, {"f.bf16", GgmlType::kBF16, {5}, 10}};
}

void RoundTripTensors(uint32_t alignment, size_t chunk) {
  SCOPED_TRACE("alignment " + std::to_string(alignment) + " chunk " + std::to_string(chunk));
  TempDir dir;
  const std::string path = dir.File("t.gguf");
  GgufWriterOptions options;
  options.alignment = alignment;
  GgufWriter w(path, options);
  w.metadata().Set("general.name", GgufValue::String("tensors"));
  std::vector<uint8_t> all;
  const std::vector<TensorCase> cases = Cases();
  for (size_t i = 0; i < cases.size(); ++i) {
    ASSERT_TRUE(w.AddTensor(cases[i].name, cases[i].type, cases[i].shape).ok());
    std::vector<uint8_t> p = Pattern(cases[i].n_bytes, static_cast<uint32_t>(i));
    all.insert(all.end(), p.begin(), p.end());
  }
  ASSERT_TRUE(w.Begin().ok());
  ASSERT_TRUE(WriteChunked(w, all, chunk).ok());
  ASSERT_TRUE(w.Finish().ok());

  Result<GgufModel> m = GgufModel::Open(path);
  ASSERT_TRUE(m.ok()) << m.status().message();
  const GgufShard& shard = m->shards()[0];
  EXPECT_EQ(shard.alignment, alignment);
  if (alignment == 32) {
    EXPECT_FALSE(m->metadata().Contains("general.alignment"));
  } else {
    EXPECT_EQ(m->metadata().Find("general.alignment")->type(), GgufType::kUint32);
    EXPECT_EQ(m->metadata().FindUint("general.alignment"), alignment);
  }
  EXPECT_EQ(shard.data_offset % alignment, 0u);
  ASSERT_EQ(m->tensors().size(), cases.size());
  uint64_t expected_offset = shard.data_offset;
  for (size_t i = 0; i < cases.size(); ++i) {
    const GgufTensor& t = m->tensors()[i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.name, cases[i].name);
    EXPECT_EQ(t.type, cases[i].type);
    EXPECT_EQ(t.shape, cases[i].shape);
    EXPECT_EQ(t.n_bytes, cases[i].n_bytes);
    EXPECT_EQ(t.file_offset, expected_offset);  // packed, each padded to the alignment
    const std::vector<uint8_t> p = Pattern(cases[i].n_bytes, static_cast<uint32_t>(i));
    EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.n_bytes), p);
    // Padding is zeros.
    const uint64_t padded = (t.n_bytes + alignment - 1) / alignment * alignment;
    for (uint64_t k = t.n_bytes; k < padded; ++k) ASSERT_EQ(t.data[k], 0) << k;
    expected_offset += padded;
  }
  EXPECT_EQ(shard.file_size, expected_offset);
}

TEST(GgufWriterTest, RoundTripsTensorsAtEveryAlignmentAndChunkSize) {
  for (uint32_t alignment : {32u, 64u, 4096u, 1u, 8u}) {
    for (size_t chunk : {size_t{1}, size_t{7}, size_t{64}, size_t{1} << 20}) {
      RoundTripTensors(alignment, chunk);
    }
  }
}

TEST(GgufWriterTest, LayoutMatchesHandComputedSizes) {
  // Header: 24 + key "general.alignment" (8 + 17 + 4 + 4 = 33) + info "a" (8 + 1 + 4 + 8 + 4 +
  // 8 = 33) = 90, padded to 4096; then 12 data bytes padded to 4096: 8192 bytes.
  TempDir dir;
  GgufWriterOptions options;
  options.alignment = 4096;
  GgufWriter w(dir.File("a.gguf"), options);
  ASSERT_TRUE(w.AddTensor("a", GgmlType::kF32, {3}).ok());
  ASSERT_TRUE(w.Begin().ok());
  ASSERT_TRUE(w.Write(Pattern(12, 1)).ok());
  ASSERT_TRUE(w.Finish().ok());
  const std::vector<uint8_t> bytes = ReadFile(dir.File("a.gguf"));
  ASSERT_EQ(bytes.size(), 8192u);
  // The general.alignment value sits at 24 + 8 + 17 + 4 = 53.
  uint32_t v;
  std::memcpy(&v, bytes.data() + 53, 4);
  EXPECT_EQ(v, 4096u);
  EXPECT_EQ(std::vector<uint8_t>(bytes.begin() + 4096, bytes.begin() + 4108), Pattern(12, 1));
}

TEST(GgufWriterTest, SplitKeysAreDroppedFromASingleFile) {
  TempDir dir;
  GgufWriter w(dir.File("s.gguf"));
  w.metadata().Set("split.count", GgufValue::Storage(uint16_t{3}));
  w.metadata().Set("split.no", GgufValue::Storage(uint16_t{0}));
  w.metadata().Set("general.name", GgufValue::String("n"));
  ASSERT_TRUE(w.Begin().ok());
  ASSERT_TRUE(w.Finish().ok());
  Result<GgufModel> m = GgufModel::Open(dir.File("s.gguf"));
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_FALSE(m->metadata().Contains("split.count"));
  EXPECT_EQ(m->metadata().entries().size(), 1u);
}

TEST(GgufWriterTest, AddTensorRefusesBadDeclarations) {
  TempDir dir;
  GgufWriter w(dir.File("x.gguf"));
  ASSERT_TRUE(w.AddTensor("a", GgmlType::kF32, {4}).ok());
  auto expect_invalid = [&](Status s, std::string_view fragment) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
    EXPECT_TRUE(s.message().starts_with(dir.File("x.gguf") + ": ")) << s.message();
    EXPECT_NE(s.message().find(fragment), std::string::npos) << s.message();
  };
  expect_invalid(w.AddTensor("a", GgmlType::kF32, {4}), "duplicate tensor 'a'");
  expect_invalid(w.AddTensor("b", GgmlType::kF32, {}), "0 dimensions");
  expect_invalid(w.AddTensor("b", GgmlType::kF32, {1, 1, 1, 1, 1}), "5 dimensions");
  expect_invalid(w.AddTensor("b", GgmlType::kF32, {4, 0}), "a dimension is 0");
  expect_invalid(w.AddTensor("b", GgmlType::kQ4_0, {33}), "row length 33");
  expect_invalid(w.AddTensor("b", GgmlType::kF32, {uint64_t{1} << 32, uint64_t{1} << 32}),
                 "overflows");
  expect_invalid(w.AddTensor("b", static_cast<GgmlType>(4), {4}), "unknown type 4");
  expect_invalid(w.AddTensor("", GgmlType::kF32, {4}), "tensor name");
  expect_invalid(w.AddTensor(std::string(64, 'n'), GgmlType::kF32, {4}), "tensor name");
  ASSERT_TRUE(w.Begin().ok());
  expect_invalid(w.AddTensor("c", GgmlType::kF32, {4}), "after Begin");
}

TEST(GgufWriterTest, BeginRefusesBadOptionsAndMetadata) {
  TempDir dir;
  for (uint32_t alignment : {0u, 48u, 3u}) {
    GgufWriterOptions o;
    o.alignment = alignment;
    GgufWriter w(dir.File("a.gguf"), o);
    Status s = w.Begin();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
    EXPECT_NE(s.message().find("not a nonzero power of two"), std::string::npos);
  }
  {
    GgufWriter w(dir.File("a.gguf"));
    w.metadata().Set("general.alignment", GgufValue::Uint32(64));
    EXPECT_EQ(w.Begin().code(), StatusCode::kInvalidArgument);
  }
  {
    GgufWriter w(dir.File("a.gguf"));
    w.metadata().Set(
        "mixed", GgufValue::Array(GgufType::kInt32, {GgufValue::Int32(1), GgufValue::Float32(2)}));
    Status s = w.Begin();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("key 'mixed': array of int32 holds a float32 item"),
              std::string::npos)
        << s.message();
  }
  {
    GgufWriter w(dir.File("a.gguf"));
    GgufValue v = GgufValue::Int32Array({1});
    for (int i = 0; i < 8; ++i) v = GgufValue::Array(GgufType::kArray, {v});  // 9 levels
    w.metadata().Set("deep", v);
    Status s = w.Begin();
    EXPECT_NE(s.message().find("nested deeper than 8"), std::string::npos) << s.message();
  }
  {
    GgufWriterOptions o;
    o.split_max_tensors = 1;
    GgufWriter w(dir.File("noext"), o);
    EXPECT_EQ(w.Begin().code(), StatusCode::kInvalidArgument);
  }
  {
    GgufWriter w(dir.File("missing/dir/a.gguf"));
    Status s = w.Begin();
    EXPECT_EQ(s.code(), StatusCode::kIoError);
    EXPECT_TRUE(s.message().starts_with(dir.File("missing/dir/a.gguf.tmp") + ": ")) << s.message();
  }
  EXPECT_TRUE(dir.List().empty());  // no file left by any refused writer
}

// A writer with two f32 [4] tensors (16 bytes each), begun.
std::unique_ptr<GgufWriter> BegunWriter(const std::string& path) {
  auto w = std::make_unique<GgufWriter>(path);
  EXPECT_TRUE(w->AddTensor("a", GgmlType::kF32, {4}).ok());
  EXPECT_TRUE(w->AddTensor("b", GgmlType::kF32, {4}).ok());
  EXPECT_TRUE(w->Begin().ok());
  return w;
}

TEST(GgufWriterTest, TooManyBytesFailsAndLeavesNoFile) {
  TempDir dir;
  const std::string path = dir.File("m.gguf");
  auto w = BegunWriter(path);
  ASSERT_TRUE(w->Write(Pattern(20, 0)).ok());
  Status s = w->Write(Pattern(13, 0));  // 33 > 32 declared
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("1 bytes written past the last declared tensor"), std::string::npos)
      << s.message();
  EXPECT_FALSE(w->Finish().ok());
  EXPECT_TRUE(dir.List().empty());
}

TEST(GgufWriterTest, TooFewBytesFailsAndLeavesNoFile) {
  TempDir dir;
  const std::string path = dir.File("m.gguf");
  auto w = BegunWriter(path);
  ASSERT_TRUE(w->Write(Pattern(20, 0)).ok());
  Status s = w->Finish();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tensor 'b' at 4 of 16 bytes"), std::string::npos) << s.message();
  EXPECT_TRUE(dir.List().empty());
}

TEST(GgufWriterTest, AbandonedWriterLeavesNoFile) {
  TempDir dir;
  const std::string path = dir.File("m.gguf");
  {
    auto w = BegunWriter(path);
    ASSERT_TRUE(w->Write(Pattern(32, 0)).ok());
    EXPECT_EQ(dir.List(), std::vector<std::string>{"m.gguf.tmp"});
  }  // destroyed without Finish
  EXPECT_TRUE(dir.List().empty());
  {
    GgufWriterOptions o;
    o.split_max_tensors = 1;
    GgufWriter w(path, o);
    ASSERT_TRUE(w.AddTensor("a", GgmlType::kF32, {4}).ok());
    ASSERT_TRUE(w.AddTensor("b", GgmlType::kF32, {4}).ok());
    ASSERT_TRUE(w.Begin().ok());
    EXPECT_EQ(dir.List(),
              (std::vector<std::string>{"m-00001-of-00002.gguf.tmp", "m-00002-of-00002.gguf.tmp"}));
  }
  EXPECT_TRUE(dir.List().empty());
}

TEST(GgufWriterTest, WriteBeforeBeginAndAfterFinishAreErrors) {
  TempDir dir;
  GgufWriter w(dir.File("m.gguf"));
  EXPECT_EQ(w.Write(Pattern(4, 0)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.Finish().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(w.Begin().ok());
  ASSERT_TRUE(w.Finish().ok());
  EXPECT_FALSE(w.Finish().ok());
  EXPECT_FALSE(w.Write(Pattern(4, 0)).ok());
  EXPECT_EQ(dir.List(), std::vector<std::string>{"m.gguf"});  // the finished file stays
}

TEST(GgufWriterTest, VocabularySizedMetadataRoundTrips) {
  constexpr int kTokens = 151936;
  std::vector<std::string> tokens;
  std::vector<float> scores;
  for (int i = 0; i < kTokens; ++i) {
    tokens.push_back("t" + std::to_string(i));
    scores.push_back(static_cast<float>(-i));
  }
  TempDir dir;
  GgufWriter w(dir.File("v.gguf"));
  w.metadata().Set("tokenizer.ggml.tokens", GgufValue::StringArray(tokens));
  w.metadata().Set("tokenizer.ggml.scores", GgufValue::Float32Array(scores));
  ASSERT_TRUE(w.Begin().ok());
  ASSERT_TRUE(w.Finish().ok());
  Result<GgufModel> m = GgufModel::Open(dir.File("v.gguf"));
  ASSERT_TRUE(m.ok()) << m.status().message();
  const GgufArray* got = m->metadata().FindArray("tokenizer.ggml.tokens");
  ASSERT_EQ(got->items.size(), static_cast<size_t>(kTokens));
  EXPECT_EQ(*got->items[123456].AsString(), "t123456");
  EXPECT_EQ(m->metadata().FindArray("tokenizer.ggml.scores")->items[kTokens - 1].AsDouble(),
            -151935.0);
}

}  // namespace
}  // namespace mt
