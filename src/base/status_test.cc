#include "base/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>

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

Result<int> IntOrError(int x) {
  if (x < 0) return OutOfRange("x = {} is out of range", x);
  return x * 10;
}

// Counts the copies and moves made of it, to check that MT_TRY moves its value out.
struct Counted {
  static int copies;
  static int moves;
  Counted() = default;
  Counted(const Counted&) { ++copies; }
  Counted(Counted&&) noexcept { ++moves; }
  Counted& operator=(const Counted&) = delete;
  Counted& operator=(Counted&&) = delete;
};
int Counted::copies = 0;
int Counted::moves = 0;

// MT_TRY in a function that returns Status; `*reached` says whether it got past MT_TRY.
Status TryInStatus(int x, bool* reached, int* value) {
  int v = MT_TRY(IntOrError(x));
  *reached = true;
  *value = v;
  return NotFound("reached the end");
}

// MT_TRY in a function that returns a Result of another type.
Result<std::string> TryInResult(int x, bool* reached) {
  int v = MT_TRY(IntOrError(x));
  *reached = true;
  return std::to_string(v);
}

Result<std::unique_ptr<int>> MoveOnly(int x) {
  if (x < 0) return IoError("no pointer for {}", x);
  return std::make_unique<int>(x);
}

Result<int> TryMoveOnly(int x) {
  std::unique_ptr<int> p = MT_TRY(MoveOnly(x));
  return *p + 1;
}

Result<Counted> MakeCounted() { return Counted(); }

Status TryCounted() {
  Counted c = MT_TRY(MakeCounted());
  (void)c;
  return Status::Ok();
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

TEST(TryTest, ReturnsTheErrorFromAStatusFunction) {
  bool reached = false;
  int value = 0;
  Status s = TryInStatus(-2, &reached, &value);
  EXPECT_FALSE(reached);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(s.message(), "x = -2 is out of range");
}

TEST(TryTest, GivesTheValueInAStatusFunction) {
  bool reached = false;
  int value = 0;
  Status s = TryInStatus(4, &reached, &value);
  EXPECT_TRUE(reached);
  EXPECT_EQ(value, 40);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
}

TEST(TryTest, ReturnsTheErrorFromAResultFunction) {
  bool reached = false;
  Result<std::string> r = TryInResult(-5, &reached);
  EXPECT_FALSE(reached);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(r.status().message(), "x = -5 is out of range");
}

TEST(TryTest, GivesTheValueInAResultFunction) {
  bool reached = false;
  Result<std::string> r = TryInResult(3, &reached);
  EXPECT_TRUE(reached);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value(), "30");
}

TEST(TryTest, MovesAMoveOnlyValue) {
  Result<int> good = TryMoveOnly(6);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(good.value(), 7);
  Result<int> bad = TryMoveOnly(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kIoError);
  EXPECT_EQ(bad.status().message(), "no pointer for -1");
}

TEST(TryTest, MovesTheValueOutWithoutACopy) {
  Counted::copies = 0;
  Counted::moves = 0;
  Result<Counted> r = MakeCounted();
  ASSERT_TRUE(r.ok());
  const int moves_to_make = Counted::moves;
  Counted::moves = 0;
  ASSERT_TRUE(TryCounted().ok());
  EXPECT_EQ(Counted::copies, 0);
  // MakeCounted's own moves, then one more out of the Result that MT_TRY holds.
  EXPECT_EQ(Counted::moves, moves_to_make + 1);
}

}  // namespace
}  // namespace mt
