// A read-only mapping knows which ranges it holds and hands whole pages of one back to the
// kernel: they leave this process, and reading them again gives the file's bytes.
#include "io/mapped_file.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "io/io_test_util.h"

namespace mt {
namespace {

using io_test::PresentPages;
using io_test::RandomBytes;
using io_test::TempFile;

TEST(MappedFileTest, HoldsOnlyItsOwnRanges) {
  const std::vector<uint8_t> content = RandomBytes(10000, 1);
  TempFile f(std::filesystem::temp_directory_path().string(), content);
  const MappedFile map = MappedFile::Open(f.path()).value();
  EXPECT_TRUE(map.Holds(map.data(), map.size()));
  EXPECT_TRUE(map.Holds(map.data() + 9999, 1));
  EXPECT_TRUE(map.Holds(map.data() + 10000, 0));
  EXPECT_FALSE(map.Holds(map.data() + 9999, 2));
  EXPECT_FALSE(map.Holds(map.data() - 1, 1));
  EXPECT_FALSE(map.Holds(content.data(), 1));  // a copy elsewhere
}

TEST(MappedFileTest, ReleasedPagesLeaveTheProcessAndReadBackTheSame) {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const std::vector<uint8_t> content = RandomBytes(64 * page, 2);
  TempFile f(std::filesystem::temp_directory_path().string(), content);
  const MappedFile map = MappedFile::Open(f.path()).value();
  uint64_t sum = 0;
  for (uint64_t i = 0; i < map.size(); i += page) sum += map.data()[i];
  ASSERT_EQ(PresentPages(map.data(), map.size()), 64u) << sum;

  // Pages 10..49 whole, plus half of page 9 and half of page 50: those two stay.
  map.Release(map.data() + 9 * page + page / 2, 41 * page);
  EXPECT_EQ(PresentPages(map.data() + 10 * page, 40 * page), 0u);
  EXPECT_EQ(PresentPages(map.data(), 10 * page), 10u);
  EXPECT_EQ(PresentPages(map.data() + 50 * page, 14 * page), 14u);
  EXPECT_TRUE(std::equal(content.begin(), content.end(), map.data()));
}

}  // namespace
}  // namespace mt
