#include "kernels/panel_layout.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/matmul.h"

namespace mt {
namespace {

std::vector<uint8_t> RandomBytes(uint64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

class PanelLayoutTest : public testing::TestWithParam<GgmlType> {};

TEST_P(PanelLayoutTest, RoundTripsInPlaceAndMovesEveryByte) {
  const GgmlType type = GetParam();
  const int64_t rows = 48, cols = 512;
  const std::vector<uint8_t> orig = RandomBytes(rows * RowBytes(type, cols), 7);
  std::vector<uint8_t> panels(orig.size());
  RowsToPanels(type, rows, cols, orig.data(), panels.data());
  EXPECT_NE(panels, orig);  // a permutation, not a copy
  std::vector<uint8_t> in_place = orig;
  RowsToPanels(type, rows, cols, in_place.data(), in_place.data());
  EXPECT_EQ(in_place, panels);
  PanelsToRows(type, rows, cols, in_place.data(), in_place.data());
  EXPECT_EQ(in_place, orig);
  std::vector<uint8_t> back(orig.size());
  PanelsToRows(type, rows, cols, panels.data(), back.data());
  EXPECT_EQ(back, orig);
}

TEST_P(PanelLayoutTest, FollowsTheDefinition) {
  const GgmlType type = GetParam();
  const int64_t rows = 16, cols = 256;
  const uint64_t row_bytes = RowBytes(type, cols);
  const std::vector<uint8_t> orig = RandomBytes(rows * row_bytes, 11);
  std::vector<uint8_t> panels(orig.size());
  RowsToPanels(type, rows, cols, orig.data(), panels.data());
  // Byte b of word o of row i (o = 4, 44, the block's last whole word), and the 2-byte
  // tail (Q6_K's and Q3_K's d).
  const uint64_t last = row_bytes / 4 * 4 - 4;
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(panels[64 * 1 + 4 * i + 2], orig[i * row_bytes + 4 * 1 + 2]);
    EXPECT_EQ(panels[16 * 32 + 64 * 3 + 4 * i + 0], orig[i * row_bytes + 32 + 12]);
    EXPECT_EQ(panels[16 * last + 4 * i + 3], orig[i * row_bytes + last + 3]);
    if (row_bytes % 4 == 2) {
      EXPECT_EQ(panels[16 * (row_bytes - 2) + 2 * i + 1], orig[i * row_bytes + row_bytes - 1]);
    }
  }
}

TEST_P(PanelLayoutTest, IsWhatTheActiveKernelsRead) {
  const GgmlType type = GetParam();
  if (!PanelsPreferred(type, 16)) GTEST_SKIP() << "the active kernels read GGUF rows only";
  const int64_t rows = 32, cols = 768;
  const std::vector<uint8_t> orig = RandomBytes(rows * RowBytes(type, cols), 3);
  std::vector<uint8_t> portable(orig.size()), kernels(orig.size());
  RowsToPanels(type, rows, cols, orig.data(), portable.data());
  RepackToPanels(type, rows, cols, orig.data(), kernels.data());
  EXPECT_EQ(portable, kernels);
}

TEST(PanelLayout, OnlySixteenRowKQuants) {
  EXPECT_TRUE(HasPanelForm(GgmlType::kQ4_K, 16));
  EXPECT_TRUE(HasPanelForm(GgmlType::kQ6_K, 2048));
  EXPECT_FALSE(HasPanelForm(GgmlType::kQ4_K, 24));
  EXPECT_FALSE(HasPanelForm(GgmlType::kQ4_K, 0));
  EXPECT_TRUE(HasPanelForm(GgmlType::kQ2_K, 32));
  EXPECT_TRUE(HasPanelForm(GgmlType::kQ3_K, 16));
  EXPECT_TRUE(HasPanelForm(GgmlType::kIQ4_XS, 16));
  EXPECT_FALSE(HasPanelForm(GgmlType::kQ8_0, 16));
  EXPECT_FALSE(HasPanelForm(GgmlType::kIQ4_NL, 16));
}

INSTANTIATE_TEST_SUITE_P(KQuants, PanelLayoutTest,
                         testing::Values(GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K,
                                         GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kIQ4_XS),
                         [](const testing::TestParamInfo<GgmlType>& p) {
                           return std::string(TypeName(p.param));
                         });

}  // namespace
}  // namespace mt
