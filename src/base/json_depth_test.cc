#include "base/json_depth.h"

#include <gtest/gtest.h>

#include <string>

namespace mt {
namespace {

TEST(JsonDepthTest, CountsArraysAndObjects) {
  EXPECT_EQ(JsonDepth(""), 0u);
  EXPECT_EQ(JsonDepth("42"), 0u);
  EXPECT_EQ(JsonDepth("[]"), 1u);
  EXPECT_EQ(JsonDepth(R"({"a": [1, {"b": [[]]}], "c": {}})"), 5u);
  EXPECT_EQ(JsonDepth("[[]] [[[]]]"), 3u);  // the deepest, not the last
}

TEST(JsonDepthTest, BracketsInStringsDoNotCount) {
  EXPECT_EQ(JsonDepth(R"(["[[[{{{"])"), 1u);
  EXPECT_EQ(JsonDepth(R"(["\"[[[", "\\", [2]])"), 2u);  // escaped quotes, an escaped backslash
}

TEST(JsonDepthTest, MalformedTextGetsANumber) {
  EXPECT_EQ(JsonDepth("]]]["), 1u);
  EXPECT_EQ(JsonDepth(std::string(100000, '[')), 100000u);
  EXPECT_EQ(JsonDepth("\"unterminated [[["), 0u);
}

}  // namespace
}  // namespace mt
