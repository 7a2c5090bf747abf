// Tests of the fault-injecting wrapper, over the pread engine (always available) and
// io_uring where the kernel has it.

#include "io/fault_injecting_engine.h"

#include <gtest/gtest.h>

#include <bit>
#include <chrono>
#include <cstring>
#include <set>

#include "io/io_test_util.h"

namespace mt {
namespace {

using io_test::CollectAll;
using io_test::RandomBytes;
using io_test::TempFile;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kBlock = 4096;

class FaultTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "io_uring" && !CreateUringEngine(1).ok()) {
      GTEST_SKIP() << "io_uring unavailable here";
    }
    content_ = RandomBytes(64 * kBlock, 42);
    file_ = std::make_unique<TempFile>(std::filesystem::temp_directory_path().string(), content_);
  }

  std::unique_ptr<FaultInjectingEngine> Make(FaultPlan plan) {
    auto inner = GetParam() == "io_uring" ? CreateUringEngine(4) : CreatePreadEngine(4);
    EXPECT_TRUE(inner.ok());
    auto e = std::make_unique<FaultInjectingEngine>(std::move(inner).value(), std::move(plan));
    file_index_ = e->AddFile(file_->path(), DirectMode::kOff).value();
    EXPECT_EQ(e->name(), "faulty(" + GetParam() + ")");
    return e;
  }

  // Reads block i (4 KiB at i * 4 KiB) into dst_[i] with tag i, for i in [0, n), one op per
  // Submit so the submission order is i; returns results by tag.
  std::map<uint64_t, int64_t> ReadBlocks(IoEngine& e, int n) {
    dst_.assign(size_t(n), std::vector<uint8_t>(kBlock, 0xCD));
    for (int i = 0; i < n; ++i) {
      ReadOp op{file_index_, uint64_t(i) * kBlock, kBlock, dst_[size_t(i)].data(), uint64_t(i)};
      EXPECT_TRUE(e.Submit({&op, 1}).ok());
    }
    return CollectAll(e, size_t(n));
  }

  bool BlockIntact(int i) const {
    return std::memcmp(dst_[size_t(i)].data(), content_.data() + size_t(i) * kBlock, kBlock) == 0;
  }

  std::vector<uint8_t> content_;
  std::unique_ptr<TempFile> file_;
  int file_index_ = -1;
  std::vector<std::vector<uint8_t>> dst_;  // (n, kBlock) one buffer per read
};

TEST_P(FaultTest, EveryThirdReadFailsWithEio) {
  FaultPlan plan;
  plan.rules.push_back({.kind = FaultKind::kError, .every_nth = 3});
  auto e = Make(plan);
  std::map<uint64_t, int64_t> r = ReadBlocks(*e, 30);
  for (int i = 0; i < 30; ++i) {
    if ((i + 1) % 3 == 0) {
      EXPECT_EQ(r[i], -EIO) << i;
    } else {
      EXPECT_EQ(r[i], int64_t(kBlock)) << i;
      EXPECT_TRUE(BlockIntact(i)) << i;
    }
  }
  FaultCounters c = e->counters();
  EXPECT_EQ(c.reads, 30u);
  EXPECT_EQ(c.errors, 10u);
  EXPECT_EQ(c.short_reads + c.delays + c.corruptions, 0u);
}

TEST_P(FaultTest, PredicateChoosesReadsByOffset) {
  FaultPlan plan;
  plan.rules.push_back({.kind = FaultKind::kError,
                        .match = [](const ReadOp& op) { return op.offset == 5 * kBlock; },
                        .error = ENODATA});
  auto e = Make(plan);
  std::map<uint64_t, int64_t> r = ReadBlocks(*e, 10);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(r[i], i == 5 ? -ENODATA : int64_t(kBlock)) << i;
  EXPECT_EQ(e->counters().errors, 1u);
}

TEST_P(FaultTest, ShortReadsKeepTheirPrefixAndSpoilTheTail) {
  FaultPlan plan;
  plan.rules.push_back({.kind = FaultKind::kShortRead,
                        .match = [](const ReadOp& op) { return op.offset < 4 * kBlock; },
                        .short_bytes = 1000});
  plan.rules.push_back({.kind = FaultKind::kShortRead});  // the rest: a seeded length
  auto e = Make(plan);
  std::map<uint64_t, int64_t> r = ReadBlocks(*e, 20);
  for (int i = 0; i < 20; ++i) {
    const uint8_t* want = content_.data() + size_t(i) * kBlock;
    const uint8_t* got = dst_[size_t(i)].data();
    if (i < 4) {
      ASSERT_EQ(r[i], 1000) << i;
      // 3096 garbage bytes: equal to the file in all of them would mean no garbage written.
      EXPECT_NE(std::memcmp(got + 1000, want + 1000, kBlock - 1000), 0) << i;
    } else {
      ASSERT_GE(r[i], 0) << i;
      ASSERT_LT(r[i], int64_t(kBlock)) << i;
    }
    EXPECT_EQ(std::memcmp(got, want, size_t(r[i])), 0) << i;
  }
  EXPECT_EQ(e->counters().short_reads, 20u);
}

TEST_P(FaultTest, CorruptionFlipsExactlyTheRequestedBits) {
  FaultPlan plan;
  plan.rules.push_back({.kind = FaultKind::kCorrupt, .every_nth = 2, .flip_bits = 3});
  auto e = Make(plan);
  std::map<uint64_t, int64_t> r = ReadBlocks(*e, 10);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(r[i], int64_t(kBlock)) << i;  // the result does not betray the corruption
    int flipped = 0;
    for (size_t k = 0; k < kBlock; ++k) {
      flipped += std::popcount(uint8_t(dst_[size_t(i)][k] ^ content_[size_t(i) * kBlock + k]));
    }
    EXPECT_EQ(flipped, (i + 1) % 2 == 0 ? 3 : 0) << i;
  }
  EXPECT_EQ(e->counters().corruptions, 5u);
}

TEST_P(FaultTest, SameSeedSameFaultsOtherSeedOtherFaults) {
  auto run = [&](uint64_t seed) {
    FaultPlan plan;
    plan.seed = seed;
    plan.rules.push_back({.kind = FaultKind::kError, .probability = 0.3});
    plan.rules.push_back({.kind = FaultKind::kCorrupt, .probability = 0.5, .flip_bits = 5});
    auto e = Make(plan);
    std::map<uint64_t, int64_t> r = ReadBlocks(*e, 64);
    std::set<int> failed;
    for (int i = 0; i < 64; ++i) {
      if (r[i] < 0) failed.insert(i);
    }
    return std::make_pair(failed, dst_);
  };
  auto [failed_a, bytes_a] = run(7);
  auto [failed_b, bytes_b] = run(7);
  auto [failed_c, bytes_c] = run(8);
  EXPECT_EQ(failed_a, failed_b);
  EXPECT_EQ(bytes_a, bytes_b);  // the same bits flipped
  EXPECT_NE(failed_a, failed_c);
  // Binomial(64, 0.3): mean 19.2, sd 3.7.
  EXPECT_GT(failed_a.size(), 5u);
  EXPECT_LT(failed_a.size(), 35u);
}

TEST_P(FaultTest, MaxFaultsStopsARule) {
  FaultPlan plan;
  plan.rules.push_back({.kind = FaultKind::kError, .max_faults = 4});
  auto e = Make(plan);
  std::map<uint64_t, int64_t> r = ReadBlocks(*e, 12);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(r[i], i < 4 ? -EIO : int64_t(kBlock)) << i;
  EXPECT_EQ(e->counters().errors, 4u);
}

TEST_P(FaultTest, FirstFiringRuleDecides) {
  FaultPlan plan;
  plan.rules.push_back({.kind = FaultKind::kError, .every_nth = 2});
  plan.rules.push_back({.kind = FaultKind::kCorrupt, .flip_bits = 1});
  auto e = Make(plan);
  std::map<uint64_t, int64_t> r = ReadBlocks(*e, 8);
  for (int i = 0; i < 8; ++i) {
    if ((i + 1) % 2 == 0) {
      EXPECT_EQ(r[i], -EIO) << i;
    } else {
      EXPECT_EQ(r[i], int64_t(kBlock)) << i;
      EXPECT_FALSE(BlockIntact(i)) << i;
    }
  }
  EXPECT_EQ(e->counters().errors, 4u);
  EXPECT_EQ(e->counters().corruptions, 4u);
}

TEST_P(FaultTest, DelayedReadsArriveLateAndWaitTimesOut) {
  FaultPlan plan;
  plan.rules.push_back({.kind = FaultKind::kDelay,
                        .match = [](const ReadOp& op) { return op.offset == 0; },
                        .delay_ms = 200});
  auto e = Make(plan);
  std::vector<uint8_t> a(kBlock), b(kBlock);
  std::vector<ReadOp> ops = {{file_index_, 0, kBlock, a.data(), 1},
                             {file_index_, kBlock, kBlock, b.data(), 2}};
  Clock::time_point t0 = Clock::now();
  ASSERT_TRUE(e->Submit(ops).ok());
  std::vector<ReadCompletion> out(2);
  // The undelayed read comes; the delayed one is not there within 50 ms.
  size_t n = e->Wait(out, 2, 50);
  auto ms = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  };
  EXPECT_GE(ms(), 50);
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(out[0].tag, 2u);
  EXPECT_EQ(e->in_flight(), 1u);
  n = e->Wait(out, 1, 0);  // a poll: still not due
  EXPECT_EQ(n, 0u);
  n = e->Wait(out, 1, -1);
  EXPECT_GE(ms(), 200);
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(out[0].tag, 1u);
  EXPECT_EQ(out[0].result, int64_t(kBlock));
  EXPECT_EQ(std::memcmp(a.data(), content_.data(), kBlock), 0);
  EXPECT_EQ(e->counters().delays, 1u);
  EXPECT_EQ(e->in_flight(), 0u);
}

TEST_P(FaultTest, DestructionWithHeldAndInFlightReads) {
  FaultPlan plan;
  plan.rules.push_back({.kind = FaultKind::kDelay, .every_nth = 2, .delay_ms = 1000});
  auto e = Make(plan);
  std::vector<std::vector<uint8_t>> bufs(64, std::vector<uint8_t>(kBlock));
  std::vector<ReadOp> ops;
  for (int i = 0; i < 64; ++i) {
    ops.push_back(
        {file_index_, uint64_t(i % 64) * kBlock, kBlock, bufs[size_t(i)].data(), uint64_t(i)});
  }
  ASSERT_TRUE(e->Submit(ops).ok());
  std::vector<ReadCompletion> out(4);
  e->Wait(out, 4, 1000);
  e.reset();  // must not crash, hang for the delays, or leak (run under ASan to see)
}

INSTANTIATE_TEST_SUITE_P(Engines, FaultTest, ::testing::Values("io_uring", "pread"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param == "io_uring" ? std::string("uring")
                                                           : std::string("pread");
                         });

}  // namespace
}  // namespace mt
