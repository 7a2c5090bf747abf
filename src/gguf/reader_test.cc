// Reader tests: a hand-assembled file parsed field by field, and broken files, each checked
// for its error code and the byte offset it names.
#include <glob.h>

#include <cstdlib>

#include "gguf/gguf.h"
#include "gguf/gguf_test_util.h"

namespace mt {
namespace {

using testing_gguf::Bytes;
using testing_gguf::ExpectFormatError;
using testing_gguf::GoldenBytes;
using testing_gguf::kGoldenDataOffset;
using testing_gguf::kGoldenEndOfData;
using testing_gguf::kGoldenSize;
using testing_gguf::ParseBytes;
using testing_gguf::Patch;

constexpr StatusCode kCorrupt = StatusCode::kCorrupt;

void ExpectGoldenContents(const GgufModel& m, const uint8_t* base) {
  EXPECT_EQ(m.metadata().entries().size(), 5u);
  ASSERT_NE(m.metadata().FindString("general.architecture"), nullptr);
  EXPECT_EQ(*m.metadata().FindString("general.architecture"), "qwen3moe");
  EXPECT_EQ(m.metadata().Find("qwen3moe.expert_count")->type(), GgufType::kUint32);
  EXPECT_EQ(m.metadata().FindUint("qwen3moe.expert_count"), 128u);
  const GgufArray* tokens = m.metadata().FindArray("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->element_type, GgufType::kString);
  ASSERT_EQ(tokens->items.size(), 3u);
  EXPECT_EQ(*tokens->items[0].AsString(), "a");
  EXPECT_EQ(*tokens->items[1].AsString(), "<s>");
  EXPECT_EQ(*tokens->items[2].AsString(), "");
  EXPECT_EQ(m.metadata().Find("x.f32")->type(), GgufType::kFloat32);
  EXPECT_EQ(m.metadata().FindDouble("x.f32"), 1.5);
  const GgufArray* scores = m.metadata().FindArray("x.scores");
  ASSERT_NE(scores, nullptr);
  EXPECT_EQ(scores->element_type, GgufType::kFloat32);
  ASSERT_EQ(scores->items.size(), 2u);
  EXPECT_EQ(scores->items[0].AsDouble(), -1.0);
  EXPECT_EQ(scores->items[1].AsDouble(), 0.5);

  ASSERT_EQ(m.shards().size(), 1u);
  EXPECT_EQ(m.shards()[0].alignment, 32u);
  EXPECT_EQ(m.shards()[0].data_offset, kGoldenDataOffset);
  EXPECT_EQ(m.shards()[0].file_size, kGoldenSize);
  ASSERT_EQ(m.tensors().size(), 2u);
  const GgufTensor& tok = m.tensors()[0];
  EXPECT_EQ(tok.name, "tok");
  EXPECT_EQ(tok.type, GgmlType::kF32);
  EXPECT_EQ(tok.shape, (std::vector<uint64_t>{4, 2}));
  EXPECT_EQ(tok.n_elements, 8u);
  EXPECT_EQ(tok.n_bytes, 32u);  // 8 floats
  EXPECT_EQ(tok.rows(), 2u);
  EXPECT_EQ(tok.file_offset, 352u);
  EXPECT_EQ(tok.data, base + 352);
  float f[8];
  std::memcpy(f, tok.data, sizeof(f));
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[7], 8.0f);
  const GgufTensor& out = m.tensors()[1];
  EXPECT_EQ(out.name, "out");
  EXPECT_EQ(out.type, GgmlType::kQ8_0);
  EXPECT_EQ(out.shape, (std::vector<uint64_t>{32}));
  EXPECT_EQ(out.n_bytes, 34u);  // one block: f16 scale + 32 int8
  EXPECT_EQ(out.file_offset, 384u);
  EXPECT_EQ(out.data, base + 384);
  EXPECT_EQ(out.data[1], 0x3c);
  EXPECT_EQ(static_cast<int8_t>(out.data[2]), -16);
  EXPECT_EQ(m.FindTensor("out"), &out);
  EXPECT_EQ(m.FindTensor("nope"), nullptr);
}

TEST(GgufReaderTest, ParsesHandAssembledV3File) {
  const std::vector<uint8_t> bytes = GoldenBytes();
  ASSERT_EQ(bytes.size(), kGoldenSize);
  Result<GgufModel> m = ParseBytes(bytes);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->version(), 3u);
  ExpectGoldenContents(*m, bytes.data());
}

TEST(GgufReaderTest, ParsesVersion2WhichAlsoUses64BitCounts) {
  std::vector<uint8_t> bytes = GoldenBytes();
  Patch<uint32_t>(&bytes, 4, 2);
  Result<GgufModel> m = ParseBytes(bytes);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->version(), 2u);
  ExpectGoldenContents(*m, bytes.data());
}

TEST(GgufReaderTest, OpenMapsTheFile) {
  testing_gguf::TempDir dir;
  const std::string path = dir.File("golden.gguf");
  testing_gguf::WriteFile(path, GoldenBytes());
  Result<GgufModel> m = GgufModel::Open(path);
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->shards().size(), 1u);
  EXPECT_EQ(m->shards()[0].path, path);
  EXPECT_EQ(m->total_file_bytes(), kGoldenSize);
  ExpectGoldenContents(*m, m->tensors()[0].data - 352);
  // The model stays valid after a move (the mapping moves with it).
  GgufModel moved = std::move(m).value();
  EXPECT_EQ(moved.tensors()[1].data[1], 0x3c);
}

TEST(GgufReaderTest, OpenMissingFileNamesIt) {
  Result<GgufModel> m = GgufModel::Open("/nonexistent/dir/m.gguf");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kIoError);
  EXPECT_TRUE(m.status().message().starts_with("/nonexistent/dir/m.gguf: "))
      << m.status().message();
}

// Where a cut at byte `length` of the golden file must be reported: the field holding that
// byte (a string is one field: length, then bytes), or an earlier count that the bytes left
// can no longer hold. Derived from the layout in gguf_test_util.h.
uint64_t ExpectedTruncationOffset(uint64_t length) {
  if (length < 4) return 0;       // magic
  if (length < 8) return 4;       // version
  if (length < 16) return 8;      // n_tensors
  if (length < 24) return 16;     // n_kv
  if (length < 88) return 8;      // 2 tensor infos need >= 2 * 32 bytes after the header
  if (length < 89) return 16;     // 5 key/value pairs need >= 5 * 13 bytes
  if (length >= 384) return 313;  // "out" data past the end: its offset field
  if (length >= 352) return 278;  // "tok" data past the end
  if (length >= 321) return 321;  // data section (352) past the end
  if (length >= 146 && length < 178) return 146;  // 3 strings need >= 3 * 8 bytes
  if (length >= 227 && length < 243) return 227;  // 2 floats need 8 bytes
  static constexpr uint64_t kFieldStarts[] = {
      24,  52,  56,  72,  101, 105, 109, 138, 142, 146, 154, 163, 174, 182, 195, 199, 203,
      219, 223, 227, 235, 239, 243, 254, 258, 266, 274, 278, 286, 297, 301, 309, 313};
  uint64_t start = 0;
  for (uint64_t s : kFieldStarts) {
    if (s <= length) start = s;
  }
  return start;
}

TEST(GgufReaderTest, TruncatedAtEveryByteIsAnErrorAtTheRightOffset) {
  const std::vector<uint8_t> bytes = GoldenBytes();
  for (uint64_t length = 0; length < kGoldenEndOfData; ++length) {
    SCOPED_TRACE("length " + std::to_string(length));
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(length));
    Result<GgufModel> m = ParseBytes(cut);
    ExpectFormatError(m.status(), kCorrupt, "t.gguf", ExpectedTruncationOffset(length), "");
  }
  // Only the padding after the last tensor is missing: ggml accepts that, and so do we.
  for (uint64_t length = kGoldenEndOfData; length < kGoldenSize; ++length) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(length));
    Result<GgufModel> m = ParseBytes(cut);
    ASSERT_TRUE(m.ok()) << length << ": " << m.status().message();
    EXPECT_EQ(m->tensors().size(), 2u);
  }
}

TEST(GgufReaderTest, TruncationMessagesSayWhat) {
  const std::vector<uint8_t> bytes = GoldenBytes();
  auto cut = [&](size_t n) { return std::vector<uint8_t>(bytes.begin(), bytes.begin() + n); };
  ExpectFormatError(ParseBytes(cut(2)).status(), kCorrupt, "t.gguf", 0,
                    "truncated: magic needs 4 bytes, 2 left");
  ExpectFormatError(ParseBytes(cut(300)).status(), kCorrupt, "t.gguf", 297,
                    "truncated: n_dims needs 4 bytes, 3 left");
  ExpectFormatError(ParseBytes(cut(330)).status(), kCorrupt, "t.gguf", 321,
                    "data section would start at 352");
  ExpectFormatError(ParseBytes(cut(400)).status(), kCorrupt, "t.gguf", 313,
                    "tensor 'out' (34 bytes at offset 32 of the data section at 352) extends past "
                    "the end of the file (400 bytes)");
}

TEST(GgufReaderTest, BadMagic) {
  std::vector<uint8_t> bytes = GoldenBytes();
  bytes[3] = 'X';
  ExpectFormatError(ParseBytes(bytes, "m.gguf").status(), kCorrupt, "m.gguf", 0, "bad magic");
}

TEST(GgufReaderTest, UnsupportedVersions) {
  std::vector<uint8_t> bytes = GoldenBytes();
  Patch<uint32_t>(&bytes, 4, 1);
  ExpectFormatError(ParseBytes(bytes).status(), StatusCode::kUnimplemented, "t.gguf", 4,
                    "GGUF version 1 is not supported");
  Patch<uint32_t>(&bytes, 4, 4);
  ExpectFormatError(ParseBytes(bytes).status(), StatusCode::kUnimplemented, "t.gguf", 4,
                    "GGUF version 4 is not supported");
  Patch<uint32_t>(&bytes, 4, 0);
  ExpectFormatError(ParseBytes(bytes).status(), kCorrupt, "t.gguf", 4, "bad GGUF version 0");
}

TEST(GgufReaderTest, BigEndianIsRefusedClearly) {
  // gguf-py writes "GGUF" then a big-endian version: 00 00 00 03.
  std::vector<uint8_t> bytes = GoldenBytes();
  bytes[4] = 0, bytes[5] = 0, bytes[6] = 0, bytes[7] = 3;
  ExpectFormatError(ParseBytes(bytes).status(), StatusCode::kUnimplemented, "t.gguf", 4,
                    "big-endian GGUF (version 3 byte-swapped) is not supported");
}

TEST(GgufReaderTest, AbsurdCountsAreRefusedBeforeAllocating) {
  std::vector<uint8_t> bytes = GoldenBytes();
  Patch<uint64_t>(&bytes, 8, uint64_t{1} << 60);
  ExpectFormatError(ParseBytes(bytes).status(), kCorrupt, "t.gguf", 8,
                    "tensor count 1152921504606846976 is more than the 424 bytes left can hold");
  bytes = GoldenBytes();
  Patch<uint64_t>(&bytes, 16, ~uint64_t{0});
  ExpectFormatError(ParseBytes(bytes).status(), kCorrupt, "t.gguf", 16, "metadata count");
  bytes = GoldenBytes();
  Patch<uint64_t>(&bytes, 146, uint64_t{1} << 62);  // string array length
  ExpectFormatError(ParseBytes(bytes).status(), kCorrupt, "t.gguf", 146,
                    "array of 4611686018427387904 string is more than the 294 bytes left");
  bytes = GoldenBytes();
  Patch<uint64_t>(&bytes, 227, 200);  // 200 floats need 800 bytes; 213 are left
  ExpectFormatError(ParseBytes(bytes).status(), kCorrupt, "t.gguf", 227, "array of 200 float32");
  bytes = GoldenBytes();
  Patch<uint64_t>(&bytes, 24, uint64_t{1} << 40);  // key length
  ExpectFormatError(ParseBytes(bytes).status(), kCorrupt, "t.gguf", 24,
                    "key length 1099511627776 exceeds the 416 bytes left");
  bytes = GoldenBytes();
  Patch<uint64_t>(&bytes, 56, ~uint64_t{0});  // string value length
  ExpectFormatError(ParseBytes(bytes).status(), kCorrupt, "t.gguf", 56, "string value length");
  bytes = GoldenBytes();
  Patch<uint64_t>(&bytes, 286, 1000);  // tensor name length
  ExpectFormatError(ParseBytes(bytes).status(), kCorrupt, "t.gguf", 286, "tensor name length");
}

TEST(GgufReaderTest, UnknownValueTypes) {
  std::vector<uint8_t> bytes = GoldenBytes();
  Patch<uint32_t>(&bytes, 52, 13);
  ExpectFormatError(ParseBytes(bytes).status(), kCorrupt, "t.gguf", 52, "unknown value type 13");
  bytes = GoldenBytes();
  Patch<uint32_t>(&bytes, 142, 0xffffffffu);
  ExpectFormatError(ParseBytes(bytes).status(), kCorrupt, "t.gguf", 142,
                    "unknown array element type 4294967295");
}

TEST(GgufReaderTest, DuplicateKey) {
  std::vector<uint8_t> bytes = GoldenBytes();
  // Rename the third key (21 bytes at 117) to the second one's name.
  std::memcpy(bytes.data() + 117, "qwen3moe.expert_count", 21);
  ExpectFormatError(ParseBytes(bytes, "m.gguf").status(), kCorrupt, "m.gguf", 109,
                    "duplicate key 'qwen3moe.expert_count'");
}

TEST(GgufReaderTest, EmptyKey) {
  Bytes b;
  b.Header(0, 1).Key("", GgufType::kUint8).Put<uint8_t>(1);
  ExpectFormatError(ParseBytes(b.data).status(), kCorrupt, "t.gguf", 24, "empty key");
}

TEST(GgufReaderTest, DuplicateTensorName) {
  std::vector<uint8_t> bytes = GoldenBytes();
  std::memcpy(bytes.data() + 294, "tok", 3);
  ExpectFormatError(ParseBytes(bytes).status(), kCorrupt, "t.gguf", 286,
                    "duplicate tensor name 'tok'");
}

TEST(GgufReaderTest, BadDimensions) {
  std::vector<uint8_t> bytes = GoldenBytes();
  Patch<uint32_t>(&bytes, 254, 0);
  ExpectFormatError(ParseBytes(bytes).status(), kCorrupt, "t.gguf", 254,
                    "tensor 'tok': n_dims 0 is not in 1..4");
  Patch<uint32_t>(&bytes, 254, 5);
  ExpectFormatError(ParseBytes(bytes).status(), kCorrupt, "t.gguf", 254, "n_dims 5");
  bytes = GoldenBytes();
  Patch<uint64_t>(&bytes, 266, 0);
  ExpectFormatError(ParseBytes(bytes).status(), kCorrupt, "t.gguf", 266,
                    "tensor 'tok': dimension 1 is 0");
  // 4 * 2^61 = 2^63 elements: past int64, as ggml counts them.
  Patch<uint64_t>(&bytes, 266, uint64_t{1} << 61);
  ExpectFormatError(ParseBytes(bytes).status(), kCorrupt, "t.gguf", 266,
                    "element count overflows at dimension 1");
  // 4 * 2^62 = 2^64: wraps in 64 bits.
  Patch<uint64_t>(&bytes, 266, uint64_t{1} << 62);
  ExpectFormatError(ParseBytes(bytes).status(), kCorrupt, "t.gguf", 266, "overflows");
  bytes = GoldenBytes();
  Patch<uint64_t>(&bytes, 258, ~uint64_t{0});  // a single huge dimension
  ExpectFormatError(ParseBytes(bytes).status(), kCorrupt, "t.gguf", 258, "overflows");
}

TEST(GgufReaderTest, UnknownAndRemovedTensorTypes) {
  for (uint32_t id : {4u, 5u, 31u, 36u, 43u, 99u}) {
    std::vector<uint8_t> bytes = GoldenBytes();
    Patch<uint32_t>(&bytes, 274, id);
    ExpectFormatError(ParseBytes(bytes).status(), kCorrupt, "t.gguf", 274,
                      "tensor 'tok': unknown or removed tensor type " + std::to_string(id));
  }
}

TEST(GgufReaderTest, RowLengthNotMultipleOfBlockSize) {
  std::vector<uint8_t> bytes = GoldenBytes();
  Patch<uint64_t>(&bytes, 301, 48);  // q8_0 blocks hold 32
  ExpectFormatError(ParseBytes(bytes).status(), kCorrupt, "t.gguf", 309,
                    "tensor 'out': row length 48 is not a multiple of the block size 32 of q8_0");
}

TEST(GgufReaderTest, TensorPlacement) {
  std::vector<uint8_t> bytes = GoldenBytes();
  Patch<uint64_t>(&bytes, 313, 64);  // 352 + 64 + 34 = 450 > 448
  ExpectFormatError(ParseBytes(bytes).status(), kCorrupt, "t.gguf", 313,
                    "extends past the end of the file (448 bytes)");
  Patch<uint64_t>(&bytes, 313, ~uint64_t{0} - 31);  // offset + size would wrap
  ExpectFormatError(ParseBytes(bytes).status(), kCorrupt, "t.gguf", 313, "extends past the end");
  Patch<uint64_t>(&bytes, 313, 48);
  ExpectFormatError(ParseBytes(bytes).status(), kCorrupt, "t.gguf", 313,
                    "tensor 'out': offset 48 is not a multiple of the alignment 32");
  Patch<uint64_t>(&bytes, 313, 0);  // both at 0
  ExpectFormatError(ParseBytes(bytes).status(), kCorrupt, "t.gguf", 286,
                    "tensor 'out' overlaps tensor 'tok'");
  bytes = GoldenBytes();
  Patch<uint64_t>(&bytes, 278, 32);  // "tok" [32, 64) over "out" [32, 66)
  Patch<uint64_t>(&bytes, 313, 0);   // "out" [0, 34) over "tok"
  ExpectFormatError(ParseBytes(bytes).status(), kCorrupt, "t.gguf", 243,
                    "tensor 'tok' overlaps tensor 'out'");
}

// A file with general.alignment = `alignment` (value at offset 53) and one f32 [4] tensor.
Bytes AlignedFile(uint32_t alignment) {
  Bytes b;
  b.Header(1, 1).Key("general.alignment", GgufType::kUint32).U32(alignment);
  b.TensorInfo("t", {4}, GgmlType::kF32, 0);
  b.PadTo(alignment == 0 ? 32 : alignment).Fill(16, 0xab);
  return b;
}

TEST(GgufReaderTest, GeneralAlignment) {
  // Header 24 + key/value 33 + tensor info 33 = 90 bytes, padded to 128.
  Bytes b = AlignedFile(64);
  ASSERT_EQ(b.size(), 128u + 16u);
  Result<GgufModel> m = ParseBytes(b.data);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->shards()[0].alignment, 64u);
  EXPECT_EQ(m->shards()[0].data_offset, 128u);
  EXPECT_EQ(m->tensors()[0].file_offset, 128u);

  Bytes big = AlignedFile(256);
  m = ParseBytes(big.data);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->shards()[0].data_offset, 256u);
}

TEST(GgufReaderTest, BadAlignment) {
  // Header 24 + key (8 + 17) + type 4 = 53: the value's offset.
  ExpectFormatError(ParseBytes(AlignedFile(0).data).status(), kCorrupt, "t.gguf", 53,
                    "general.alignment 0 is not a nonzero power of two");
  Bytes b;
  b.Header(0, 1).Key("general.alignment", GgufType::kUint32).U32(48);
  ExpectFormatError(ParseBytes(b.data).status(), kCorrupt, "t.gguf", 53,
                    "general.alignment 48 is not a nonzero power of two");
  Bytes wrong_type;
  wrong_type.Header(0, 1).Key("general.alignment", GgufType::kUint64).U64(32);
  ExpectFormatError(ParseBytes(wrong_type.data).status(), kCorrupt, "t.gguf", 53,
                    "general.alignment must be uint32, not uint64");
}

TEST(GgufReaderTest, DataSectionAlignedByGeneralAlignment) {
  // A 4096-aligned tensor whose offset is a multiple of 32 but not of 4096.
  Bytes b;
  b.Header(2, 1).Key("general.alignment", GgufType::kUint32).U32(4096);
  b.TensorInfo("a", {4}, GgmlType::kF32, 0);
  const uint64_t offset_field = b.size() + 8 + 1 + 4 + 8 + 4;
  b.TensorInfo("b", {4}, GgmlType::kF32, 32);
  b.PadTo(4096).Fill(4096 + 16, 0);
  ExpectFormatError(ParseBytes(b.data).status(), kCorrupt, "t.gguf", offset_field,
                    "offset 32 is not a multiple of the alignment 4096");
}

TEST(GgufReaderTest, ZeroTensorsNeedNoPadding) {
  Bytes b;
  b.Header(0, 1).Key("general.name", GgufType::kString).Str("x");
  Result<GgufModel> m = ParseBytes(b.data);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_TRUE(m->tensors().empty());
  EXPECT_EQ(*m->metadata().FindString("general.name"), "x");
  EXPECT_EQ(m->shards()[0].data_offset, b.size());
}

TEST(GgufReaderTest, EveryScalarTypeAndNestedArrays) {
  Bytes b;
  b.Header(0, 15);
  b.Key("u8", GgufType::kUint8).Put<uint8_t>(250);
  b.Key("i8", GgufType::kInt8).Put<int8_t>(-7);
  b.Key("u16", GgufType::kUint16).Put<uint16_t>(65000);
  b.Key("i16", GgufType::kInt16).Put<int16_t>(-32000);
  b.Key("u32", GgufType::kUint32).Put<uint32_t>(4000000000u);
  b.Key("i32", GgufType::kInt32).Put<int32_t>(-2000000000);
  b.Key("f32", GgufType::kFloat32).Put<float>(-0.25f);
  b.Key("bool", GgufType::kBool).Put<uint8_t>(1);
  b.Key("str", GgufType::kString).Str("h\xc3\xa9llo");
  b.Key("u64", GgufType::kUint64).Put<uint64_t>(~uint64_t{0});
  b.Key("i64", GgufType::kInt64).Put<int64_t>(std::numeric_limits<int64_t>::min());
  b.Key("f64", GgufType::kFloat64).Put<double>(3.141592653589793);
  // [[1, 2], ["x"]]: an array of arrays whose items have their own element types.
  b.Key("nested", GgufType::kArray).U32(9).U64(2);
  b.U32(5).U64(2).Put<int32_t>(1).Put<int32_t>(2);
  b.U32(8).U64(1).Str("x");
  b.Key("empty", GgufType::kArray).U32(12).U64(0);
  b.Key("bools", GgufType::kArray).U32(7).U64(3).Put<uint8_t>(0).Put<uint8_t>(1).Put<uint8_t>(2);
  Result<GgufModel> m = ParseBytes(b.data);
  ASSERT_TRUE(m.ok()) << m.status().message();
  const GgufMetadata& md = m->metadata();
  EXPECT_EQ(std::get<uint8_t>(md.Find("u8")->storage()), 250);
  EXPECT_EQ(std::get<int8_t>(md.Find("i8")->storage()), -7);
  EXPECT_EQ(std::get<uint16_t>(md.Find("u16")->storage()), 65000);
  EXPECT_EQ(std::get<int16_t>(md.Find("i16")->storage()), -32000);
  EXPECT_EQ(std::get<uint32_t>(md.Find("u32")->storage()), 4000000000u);
  EXPECT_EQ(std::get<int32_t>(md.Find("i32")->storage()), -2000000000);
  EXPECT_EQ(std::get<float>(md.Find("f32")->storage()), -0.25f);
  EXPECT_EQ(md.FindBool("bool"), true);
  EXPECT_EQ(*md.FindString("str"), "h\xc3\xa9llo");
  EXPECT_EQ(std::get<uint64_t>(md.Find("u64")->storage()), ~uint64_t{0});
  EXPECT_EQ(std::get<int64_t>(md.Find("i64")->storage()), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(std::get<double>(md.Find("f64")->storage()), 3.141592653589793);
  const GgufArray* nested = md.FindArray("nested");
  ASSERT_NE(nested, nullptr);
  EXPECT_EQ(nested->element_type, GgufType::kArray);
  ASSERT_EQ(nested->items.size(), 2u);
  const GgufArray* first = nested->items[0].AsArray();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->element_type, GgufType::kInt32);
  ASSERT_EQ(first->items.size(), 2u);
  EXPECT_EQ(first->items[1].AsInt(), 2);
  const GgufArray* second = nested->items[1].AsArray();
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(*second->items[0].AsString(), "x");
  EXPECT_EQ(md.FindArray("empty")->element_type, GgufType::kFloat64);
  EXPECT_TRUE(md.FindArray("empty")->items.empty());
  const GgufArray* bools = md.FindArray("bools");
  ASSERT_EQ(bools->items.size(), 3u);
  EXPECT_EQ(bools->items[0].AsBool(), false);
  EXPECT_EQ(bools->items[2].AsBool(), true);  // like ggml, any nonzero byte is true
}

// Key "d" holding arrays nested `levels` deep around one int32.
Bytes NestedFile(int levels) {
  Bytes b;
  b.Header(0, 1).Key("d", GgufType::kArray);
  for (int i = 1; i < levels; ++i) b.U32(9).U64(1);
  b.U32(5).U64(1).Put<int32_t>(7);
  return b;
}

TEST(GgufReaderTest, NestingDepthIsLimited) {
  Result<GgufModel> m = ParseBytes(NestedFile(8).data);
  ASSERT_TRUE(m.ok()) << m.status().message();
  const GgufValue* v = m->metadata().Find("d");
  for (int i = 0; i < 8; ++i) {
    ASSERT_NE(v->AsArray(), nullptr);
    v = &v->AsArray()->items[0];
  }
  EXPECT_EQ(v->AsInt(), 7);
  // Level 8's element type (at 37 + 7 * 12) would open a ninth level.
  ExpectFormatError(ParseBytes(NestedFile(9).data).status(), kCorrupt, "t.gguf", 121,
                    "arrays nested deeper than 8 levels");
  EXPECT_FALSE(ParseBytes(NestedFile(100000).data).ok());
}

TEST(GgufReaderTest, ParsesAVocabularySizedStringArray) {
  constexpr int kTokens = 151936;  // qwen3's vocabulary
  Bytes b;
  b.Header(0, 1).Key("tokenizer.ggml.tokens", GgufType::kArray).U32(8).U64(kTokens);
  for (int i = 0; i < kTokens; ++i) b.Str("tok" + std::to_string(i));
  Result<GgufModel> m = ParseBytes(b.data);
  ASSERT_TRUE(m.ok()) << m.status().message();
  const GgufArray* tokens = m->metadata().FindArray("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens->items.size(), static_cast<size_t>(kTokens));
  EXPECT_EQ(*tokens->items[0].AsString(), "tok0");
  EXPECT_EQ(*tokens->items[kTokens - 1].AsString(), "tok151935");
}

// Optional: the vocabulary files llama.cpp ships (written by gguf-py) parse. Skipped when no
// llama.cpp checkout is around; MT_LLAMA_CPP_DIR points at one.
TEST(GgufReaderTest, OptionalLlamaCppVocabFilesParse) {
  const char* env = std::getenv("MT_LLAMA_CPP_DIR");
  const std::string root = env ? env : "/work/oracle/llama.cpp";
  glob_t g;
  const std::string pattern = root + "/models/ggml-vocab-*.gguf";
  if (::glob(pattern.c_str(), 0, nullptr, &g) != 0 || g.gl_pathc == 0) {
    GTEST_SKIP() << "no llama.cpp vocab files at " << pattern;
  }
  for (size_t i = 0; i < g.gl_pathc; ++i) {
    const std::string path = g.gl_pathv[i];
    SCOPED_TRACE(path);
    Result<GgufModel> m = GgufModel::Open(path);
    ASSERT_TRUE(m.ok()) << m.status().message();
    EXPECT_NE(m->metadata().FindString("general.architecture"), nullptr);
    EXPECT_NE(m->metadata().FindString("tokenizer.ggml.model"), nullptr);
    const GgufArray* tokens = m->metadata().FindArray("tokenizer.ggml.tokens");
    ASSERT_NE(tokens, nullptr);
    EXPECT_EQ(tokens->element_type, GgufType::kString);
    EXPECT_GT(tokens->items.size(), 1000u);
  }
  ::globfree(&g);
}

}  // namespace
}  // namespace mt
