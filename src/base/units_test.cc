#include "base/units.h"

#include <gtest/gtest.h>

namespace mt {
namespace {

TEST(UnitsTest, HumanBytes) {
  EXPECT_EQ(HumanBytes(37), "37 B");
  EXPECT_EQ(HumanBytes(1536), "1.5 KiB");
  EXPECT_EQ(HumanBytes(uint64_t{17} << 30), "17.00 GiB");
}

TEST(UnitsTest, ParseBytes) {
  EXPECT_EQ(ParseBytes("123").value(), 123u);
  EXPECT_EQ(ParseBytes("4K").value(), 4096u);
  EXPECT_EQ(ParseBytes("1.5G").value(), 1610612736u);
  EXPECT_EQ(ParseBytes("512MiB").value(), 512u << 20);
  EXPECT_EQ(ParseBytes("2gb").value(), uint64_t{2} << 30);
  EXPECT_FALSE(ParseBytes("").ok());
  EXPECT_FALSE(ParseBytes("G").ok());
  EXPECT_FALSE(ParseBytes("12X").ok());
  EXPECT_FALSE(ParseBytes("1.2.3M").ok());
  EXPECT_FALSE(ParseBytes("99999999999T").ok());
}

}  // namespace
}  // namespace mt
