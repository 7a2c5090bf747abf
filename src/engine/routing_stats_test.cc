// Routing statistics: counting, the placement ranking (hand-derived), the JSON file round
// trip, and one-line errors for files that do not fit the model.
#include "engine/routing_stats.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace mt {
namespace {

namespace fs = std::filesystem;

std::string TempPath(const std::string& name) {
  return (fs::temp_directory_path() / (name + "-" + std::to_string(getpid()) + ".json")).string();
}

TEST(RoutingStatsTest, RanksByActivationsPerByte) {
  RoutingStats s("olmoe", 2, 3);
  s.Add(0, 0, 4);
  s.Add(0, 2, 1);
  s.Add(1, 1, 6);
  s.Add(1, 2, 2);
  // Layer 0's experts are 1000 bytes, layer 1's 3000: per byte 4/1000, 1/1000 against
  // 6/3000 = 2/1000 and 2/3000. Unused experts are not ranked.
  const std::vector<std::pair<uint32_t, uint32_t>> want = {{0, 0}, {1, 1}, {0, 2}, {1, 2}};
  EXPECT_EQ(s.RankByActivationsPerByte({1000, 3000}), want);
  const std::vector<float> score = s.Scores({1000, 3000});
  ASSERT_EQ(score.size(), 6u);
  EXPECT_GT(score[0], score[4]);
  EXPECT_GT(score[4], score[2]);
  EXPECT_EQ(score[1], 0.0f);
}

TEST(RoutingStatsTest, SavesAndLoadsAndMerges) {
  const std::string path = TempPath("routing");
  RoutingStats s("olmoe", 2, 3);
  s.Add(0, 1, 5);
  s.Add(1, 2);
  s.AddTokens(3);
  ASSERT_TRUE(s.Save(path).ok());
  Result<RoutingStats> back = RoutingStats::Load(path, "olmoe", 2, 3);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->tokens(), 3u);
  EXPECT_EQ(back->count(0, 1), 5u);
  EXPECT_EQ(back->count(1, 2), 1u);
  EXPECT_EQ(back->count(0, 0), 0u);
  back->Merge(s);
  EXPECT_EQ(back->tokens(), 6u);
  EXPECT_EQ(back->count(0, 1), 10u);
  fs::remove(path);
}

TEST(RoutingStatsTest, FilesThatDoNotFitAreErrorsNamingThePath) {
  const std::string path = TempPath("routing-bad");
  RoutingStats s("olmoe", 2, 3);
  ASSERT_TRUE(s.Save(path).ok());
  for (auto [arch, layers, experts] :
       {std::tuple{"qwen3moe", 2u, 3u}, {"olmoe", 3u, 3u}, {"olmoe", 2u, 4u}}) {
    Result<RoutingStats> r = RoutingStats::Load(path, arch, layers, experts);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("do not fit"), std::string::npos);
  }
  fs::remove(path);
  Result<RoutingStats> missing = RoutingStats::Load(path, "olmoe", 2, 3);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);

  const char* bad[] = {
      "",
      "[1, 2]",
      R"({"arch": "olmoe", "n_layer": 2, "n_expert": 3})",
      R"({"arch": 5, "n_layer": 2, "n_expert": 3, "tokens": 0, "counts": [[0,0,0],[0,0,0]]})",
      R"({"arch": "olmoe", "n_layer": 2, "n_expert": 3, "tokens": 0, "counts": [[0,0,0]]})",
      R"({"arch": "olmoe", "n_layer": 2, "n_expert": 3, "tokens": 0, "counts": [[0,0],[0,0,0]]})",
      R"({"arch": "olmoe", "n_layer": 2, "n_expert": 3, "tokens": 0,
          "counts": [[0,-1,0],[0,0,0]]})",
  };
  for (const char* text : bad) {
    Result<RoutingStats> r = RoutingStats::Parse(text, "x.json", "olmoe", 2, 3);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().message().rfind("x.json: ", 0), 0u) << r.status().message();
  }
}

}  // namespace
}  // namespace mt
