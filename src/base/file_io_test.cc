#include "base/file_io.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace mt {
namespace {

class FileIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/moetier-file-io.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  bool Exists(const std::string& p) {
    struct stat st;
    return ::stat(p.c_str(), &st) == 0;
  }
  std::string dir_;
};

TEST_F(FileIoTest, WritesThenReadsTheSameBytes) {
  const std::string path = dir_ + "/a.bin";
  const std::string bytes("one\0two\n\xff", 9);
  ASSERT_TRUE(WriteFileAtomically(path, bytes).ok());
  Result<std::string> back = ReadWholeFile(path);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back.value(), bytes);
  EXPECT_FALSE(Exists(path + ".tmp"));
}

TEST_F(FileIoTest, ReplacesAnExistingFileWhole) {
  const std::string path = dir_ + "/a.json";
  ASSERT_TRUE(WriteFileAtomically(path, std::string(100000, 'x')).ok());
  ASSERT_TRUE(WriteFileAtomically(path, "{}").ok());
  EXPECT_EQ(ReadWholeFile(path).value(), "{}");
}

TEST_F(FileIoTest, AMissingFileIsNotFound) {
  Result<std::string> r = ReadWholeFile(dir_ + "/none.txt");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("none.txt: no such file"), std::string::npos);
}

TEST_F(FileIoTest, ADirectoryIsAnErrorNamingIt) {
  Result<std::string> r = ReadWholeFile(dir_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIoError);
  EXPECT_NE(r.status().message().find("is a directory"), std::string::npos);
}

TEST_F(FileIoTest, AFailedWriteLeavesNothingAndKeepsTheOldFile) {
  // No such directory: the error says why, and names the file.
  Status s = WriteFileAtomically(dir_ + "/no/such/dir/x.json", "{}");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("x.json.tmp: cannot create: No such file or directory"),
            std::string::npos)
      << s.message();
  // The rename fails (the target is a non-empty directory): the temporary file goes and the
  // target stays as it was.
  const std::string target = dir_ + "/taken";
  ASSERT_EQ(::mkdir(target.c_str(), 0755), 0);
  ASSERT_TRUE(WriteFileAtomically(target + "/inside", "x").ok());
  s = WriteFileAtomically(target, "new");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cannot rename"), std::string::npos) << s.message();
  EXPECT_FALSE(Exists(target + ".tmp"));
  EXPECT_EQ(ReadWholeFile(target + "/inside").value(), "x");
}

}  // namespace
}  // namespace mt
