#include <gtest/gtest.h>

#include "gguf/gguf.h"

namespace mt {
namespace {

TEST(GgufValueTest, TypeMatchesStorageIndex) {
  EXPECT_EQ(GgufValue::Uint32(1).type(), GgufType::kUint32);
  EXPECT_EQ(GgufValue::Float32(1).type(), GgufType::kFloat32);
  EXPECT_EQ(GgufValue::String("x").type(), GgufType::kString);
  EXPECT_EQ(GgufValue::StringArray({"a"}).type(), GgufType::kArray);
  EXPECT_EQ(GgufValue(GgufValue::Storage(int64_t{-1})).type(), GgufType::kInt64);
  EXPECT_EQ(GgufValue(GgufValue::Storage(double{1})).type(), GgufType::kFloat64);
}

TEST(GgufValueTest, IntegerConversionsRespectSign) {
  EXPECT_EQ(GgufValue::Int32(-5).AsUint(), std::nullopt);
  EXPECT_EQ(GgufValue::Int32(-5).AsInt(), -5);
  EXPECT_EQ(GgufValue::Uint64(~0ull).AsInt(), std::nullopt);
  EXPECT_EQ(GgufValue::Uint64(~0ull).AsUint(), ~0ull);
  EXPECT_EQ(GgufValue::Bool(true).AsUint(), std::nullopt);
  EXPECT_EQ(GgufValue::Float32(1.5f).AsUint(), std::nullopt);
  EXPECT_EQ(GgufValue::Float32(1.5f).AsDouble(), 1.5);
}

TEST(GgufMetadataTest, SetReplacesInPlace) {
  GgufMetadata md;
  md.Set("a", GgufValue::Uint32(1));
  md.Set("b", GgufValue::String("x"));
  md.Set("a", GgufValue::Uint32(2));
  ASSERT_EQ(md.entries().size(), 2u);
  EXPECT_EQ(md.entries()[0].key, "a");
  EXPECT_EQ(md.FindUint("a"), 2u);
  EXPECT_EQ(*md.FindString("b"), "x");
  EXPECT_EQ(md.FindString("a"), nullptr);
  md.Erase("a");
  EXPECT_FALSE(md.Contains("a"));
}

TEST(GgufValueTest, ShortStringSummarizesArrays) {
  EXPECT_EQ(GgufValue::StringArray({"a", "b"}).ToShortString(), "[array of 2 string]");
  EXPECT_EQ(GgufValue::String("hi\nthere").ToShortString(), "\"hi there\"");
  EXPECT_EQ(GgufValue::Bool(false).ToShortString(), "false");
}

}  // namespace
}  // namespace mt
