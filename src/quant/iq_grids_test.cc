// The IQ code books against ggml's tables (ggml-common.h): entries quoted from there, and a
// checksum of every table as generated from it (a changed byte anywhere changes the sum).
#include "quant/iq_grids.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace mt {
namespace {

// FNV-1a over the bytes of n little-endian entries.
template <typename Entry>
uint64_t Checksum(const Entry* e, int n) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < n; ++i) {
    for (size_t k = 0; k < sizeof(Entry); ++k) {
      h = (h ^ static_cast<uint8_t>(e[i] >> (8 * k))) * 1099511628211ull;
    }
  }
  return h;
}

TEST(IqGrids, EntriesQuotedFromGgml) {
  EXPECT_EQ(kIq2XxsGrid.entry[0], 0x0808080808080808ull);
  EXPECT_EQ(kIq2XxsGrid.entry[1], 0x080808080808082bull);
  EXPECT_EQ(kIq2XxsGrid.entry[255], 0x2b2b2b1908081908ull);
  EXPECT_EQ(kIq2XsGrid.entry[2], 0x0808080808081919ull);
  EXPECT_EQ(kIq2XsGrid.entry[511], 0x2b2b2b2b2b2b2b2bull);
  EXPECT_EQ(kIq2SGrid.entry[259], 0x08190819192b1908ull);
  EXPECT_EQ(kIq2SGrid.entry[1023], 0x2b2b2b2b2b2b2b2bull);
  EXPECT_EQ(kIq3XxsGrid.entry[1], 0x04040414u);
  EXPECT_EQ(kIq3XxsGrid.entry[255], 0x3e341c04u);
  EXPECT_EQ(kIq3SGrid.entry[5], 0x01010301u);
  EXPECT_EQ(kIq3SGrid.entry[256], 0x05090507u);
  EXPECT_EQ(kIq3SGrid.entry[511], 0x0f0f0101u);
  EXPECT_EQ(kIq1SGrid.entry[0], 0xffffffffffffffffull);
  EXPECT_EQ(kIq1SGrid.entry[2], 0xffffffffffff0000ull);
  EXPECT_EQ(kIq1SGrid.entry[2047], 0x0101010101010101ull);
  EXPECT_EQ(kIqSigns.sign[0], 0);
  EXPECT_EQ(kIqSigns.sign[1], 129);
  EXPECT_EQ(kIqSigns.sign[3], 3);
  EXPECT_EQ(kIqSigns.sign[127], 255);
}

TEST(IqGrids, ChecksumsOfEveryTable) {
  // FNV-1a of ggml's tables (computed from ggml-common.h by the generator of iq_grids.cc).
  EXPECT_EQ(Checksum(kIq2XxsGrid.entry, 256), 0x5bd45ef8a547a7e8ull);
  EXPECT_EQ(Checksum(kIq2XsGrid.entry, 512), 0xa3e52388268ca2a3ull);
  EXPECT_EQ(Checksum(kIq2SGrid.entry, 1024), 0xcdb5ae5bcfe7fb32ull);
  EXPECT_EQ(Checksum(kIq3XxsGrid.entry, 256), 0x2748ed45beb63233ull);
  EXPECT_EQ(Checksum(kIq3SGrid.entry, 512), 0x5f1781aa06d14fbfull);
  EXPECT_EQ(Checksum(kIq1SGrid.entry, 2048), 0x31aaba1fc89a41d0ull);
  EXPECT_EQ(Checksum(kIqSigns.sign, 128), 0x100b4e510a867c83ull);
}

TEST(IqGrids, BiasedGridsAreTheGridsPlus64) {
  auto check = [](const auto& biased, const auto& grid, int points, int coords) {
    for (int i = 0; i < points; ++i) {
      for (int k = 0; k < coords; ++k) {
        ASSERT_EQ((biased.entry[i] >> (8 * k)) & 0xFF, ((grid.entry[i] >> (8 * k)) & 0xFF) + 64)
            << i << " " << k;
      }
    }
  };
  check(kIq2XxsGridBiased, kIq2XxsGrid, 256, 8);
  check(kIq2XsGridBiased, kIq2XsGrid, 512, 8);
  check(kIq2SGridBiased, kIq2SGrid, 1024, 8);
  check(kIq3XxsGridBiased, kIq3XxsGrid, 256, 4);
  check(kIq3SGridBiased, kIq3SGrid, 512, 4);
}

TEST(IqGrids, BiasedIq1GridIsEightTimesCoordinatePlusOne) {
  for (int i = 0; i < 2048; ++i) {
    for (int k = 0; k < 8; ++k) {
      const int g = static_cast<int8_t>(kIq1SGrid.entry[i] >> (8 * k));
      ASSERT_EQ(static_cast<int>((kIq1SGridBiased.entry[i] >> (8 * k)) & 0xFF), 8 * (g + 1));
    }
  }
}

TEST(IqGrids, LevelIndicesGiveTheGridBytes) {
  struct Case {
    IqGridId id;
    int coords, bits;
    const int* levels;
  };
  for (const Case& c :
       {Case{IqGridId::kIq2Xxs, 8, 2, kIq2Levels}, Case{IqGridId::kIq2S, 8, 2, kIq2Levels},
        Case{IqGridId::kIq3Xxs, 4, 3, kIq3XxsLevels}, Case{IqGridId::kIq3S, 4, 3, kIq3SLevels},
        Case{IqGridId::kIq1S, 8, 2, kIq1Levels}}) {
    for (int i = 0; i < IqGridPoints(c.id); ++i) {
      const uint16_t code = IqGridLevelIndex(c.id, i);
      for (int k = 0; k < c.coords; ++k) {
        const int v = c.levels[(code >> (c.bits * k)) & ((1 << c.bits) - 1)];
        uint8_t want;
        switch (c.id) {
          case IqGridId::kIq2Xxs:
            want = static_cast<uint8_t>(kIq2XxsGrid.entry[i] >> (8 * k));
            break;
          case IqGridId::kIq2S:
            want = static_cast<uint8_t>(kIq2SGrid.entry[i] >> (8 * k));
            break;
          case IqGridId::kIq3Xxs:
            want = static_cast<uint8_t>(kIq3XxsGrid.entry[i] >> (8 * k));
            break;
          case IqGridId::kIq3S:
            want = static_cast<uint8_t>(kIq3SGrid.entry[i] >> (8 * k));
            break;
          default:
            want = static_cast<uint8_t>(kIq1SGrid.entry[i] >> (8 * k));
            break;
        }
        ASSERT_EQ(static_cast<uint8_t>(v), want) << i << " " << k;
      }
    }
  }
}

}  // namespace
}  // namespace mt
