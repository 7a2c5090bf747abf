#include "base/status.h"

#include <gtest/gtest.h>

namespace mt {
namespace {

Status FailsWith(int x) {
  if (x < 0) return InvalidArgument("x = {} is negative", x);
  return Status::Ok();
}

Status Chain(int x) {
  MT_RETURN_IF_ERROR(FailsWith(x));
  return NotFound("reached the end");
}

TEST(StatusTest, OkIsOk) {
  EXPECT_TRUE(Status::Ok().ok());
  EXPECT_EQ(Status::Ok().code(), StatusCode::kOk);
}

TEST(StatusTest, ReturnIfErrorStopsAtFirstError) {
  Status s = Chain(-3);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "x = -3 is negative");
  EXPECT_EQ(Chain(1).code(), StatusCode::kNotFound);
}

TEST(StatusTest, WithContextPrefixes) {
  Status s = Corrupt("bad magic").WithContext("model.gguf: offset 0");
  EXPECT_EQ(s.message(), "model.gguf: offset 0: bad magic");
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
}

TEST(StatusTest, WithContextNamesAFileOnce) {
  EXPECT_EQ(IoError("m.gguf: layer 1").WithContext("m.gguf").message(), "m.gguf: layer 1");
  // Only a whole leading context counts.
  EXPECT_EQ(IoError("m.gguf.1: x").WithContext("m.gguf").message(), "m.gguf: m.gguf.1: x");
  EXPECT_EQ(IoError("m.gguf").WithContext("m.gguf").message(), "m.gguf: m.gguf");
}

TEST(ResultTest, HoldsValueOrStatus) {
  Result<int> good = 7;
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(good.value(), 7);
  Result<int> bad = IoError("disk gone");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "disk gone");
}

}  // namespace
}  // namespace mt
