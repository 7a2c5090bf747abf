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
  // Byte 4 k + b of chunk `off` of row i, and Q6_K's d.
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(panels[64 * 1 + 4 * i + 2], orig[i * row_bytes + 4 * 1 + 2]);
    EXPECT_EQ(panels[16 * 32 + 64 * 3 + 4 * i + 0], orig[i * row_bytes + 32 + 12]);
    if (type == GgmlType::kQ6_K) {
      EXPECT_EQ(panels[16 * 208 + 2 * i + 1], orig[i * row_bytes + 209]);
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
  EXPECT_FALSE(HasPanelForm(GgmlType::kQ8_0, 16));
}

INSTANTIATE_TEST_SUITE_P(KQuants, PanelLayoutTest,
                         testing::Values(GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K),
                         [](const testing::TestParamInfo<GgmlType>& p) {
                           return std::string(TypeName(p.param));
                         });

}  // namespace
}  // namespace mt
