// Stop strings: text is sent as soon as it cannot be the start of a stop string; a stop
// string, even split across pushes, ends the text before it.
#include "server/stop_matcher.h"

#include <gtest/gtest.h>

namespace mt::server {
namespace {

TEST(StopMatcherTest, NoStopsPassesEverythingThrough) {
  StopMatcher m({});
  bool stopped = false;
  EXPECT_EQ(m.Push("abc", &stopped), "abc");
  EXPECT_EQ(m.Push("", &stopped), "");
  EXPECT_FALSE(stopped);
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopMatcherTest, HoldsBackAPossiblePrefixUntilItCannotMatch) {
  StopMatcher m({"END"});
  bool stopped = false;
  EXPECT_EQ(m.Push("abE", &stopped), "ab");  // "E" could start "END"
  EXPECT_EQ(m.Push("N", &stopped), "");      // "EN" too
  EXPECT_EQ(m.Push("x", &stopped), "ENx");   // "ENx" cannot
  EXPECT_FALSE(stopped);
  EXPECT_EQ(m.Push("yE", &stopped), "y");
  EXPECT_EQ(m.Flush(), "E");  // generation ended for another reason: the tail is sent
}

TEST(StopMatcherTest, AStopStringSplitAcrossPushesEndsTheText) {
  StopMatcher m({"\n\n", "STOP"});
  bool stopped = false;
  EXPECT_EQ(m.Push("Hello S", &stopped), "Hello ");
  EXPECT_EQ(m.Push("TO", &stopped), "");
  EXPECT_EQ(m.Push("P and more", &stopped), "");
  EXPECT_TRUE(stopped);
}

TEST(StopMatcherTest, TheEarliestStopStringWins) {
  StopMatcher m({"cd", "b"});
  bool stopped = false;
  EXPECT_EQ(m.Push("abcd", &stopped), "a");
  EXPECT_TRUE(stopped);
  StopMatcher m2({"bcd", "c"});
  stopped = false;
  EXPECT_EQ(m2.Push("abcd", &stopped), "a");  // "bcd" starts at 1, before "c" at 2
  EXPECT_TRUE(stopped);
}

TEST(StopMatcherTest, OverlappingPrefixesKeepTheLongestCandidate) {
  // "aab": after "xaa" both "a" and "aa" could start it; "aa" must be held.
  StopMatcher m({"aab"});
  bool stopped = false;
  EXPECT_EQ(m.Push("xaa", &stopped), "x");
  EXPECT_EQ(m.Push("a", &stopped), "a");  // "aaa": only the last "aa" can still match
  EXPECT_EQ(m.Push("b", &stopped), "");
  EXPECT_TRUE(stopped);
}

TEST(StopMatcherTest, EmptyStopStringsAreIgnored) {
  StopMatcher m({"", "z"});
  bool stopped = false;
  EXPECT_EQ(m.Push("abc", &stopped), "abc");
  EXPECT_FALSE(stopped);
}

}  // namespace
}  // namespace mt::server
