#include "tokenizer/utf8.h"

#include <gtest/gtest.h>

namespace mt {
namespace {

TEST(Utf8Test, ValidSequences) {
  EXPECT_EQ(utf8::ValidSequenceLength("a", 0), 1u);
  EXPECT_EQ(utf8::ValidSequenceLength("\xC3\xA9", 0), 2u);          // é
  EXPECT_EQ(utf8::ValidSequenceLength("\xE4\xBD\xA0", 0), 3u);      // 你
  EXPECT_EQ(utf8::ValidSequenceLength("\xF0\x9F\x9A\x80", 0), 4u);  // 🚀
  EXPECT_EQ(utf8::ValidSequenceLength("\xC0\xAF", 0), 0u);          // overlong
  EXPECT_EQ(utf8::ValidSequenceLength("\xED\xA0\x80", 0), 0u);      // surrogate
  EXPECT_EQ(utf8::ValidSequenceLength("\xF4\x90\x80\x80", 0), 0u);  // > U+10FFFF
  EXPECT_EQ(utf8::ValidSequenceLength("\xE4\xBD", 0), 0u);          // truncated
  EXPECT_EQ(utf8::ValidSequenceLength("\x80", 0), 0u);
  EXPECT_EQ(utf8::DecodeAt("\xF0\x9F\x9A\x80", 0, 4), U'\U0001F680');
  EXPECT_EQ(utf8::Encode(U'\U0001F680'), "\xF0\x9F\x9A\x80");
  EXPECT_EQ(utf8::Encode(U'\u00E9'), "\xC3\xA9");
}

TEST(Utf8Test, CompletePrefixHoldsBackOnlyCompletableTails) {
  EXPECT_EQ(utf8::CompletePrefixLength("ab"), 2u);
  EXPECT_EQ(utf8::CompletePrefixLength("a\xF0\x9F\x9A"), 1u);  // 3 of 4 bytes of 🚀
  EXPECT_EQ(utf8::CompletePrefixLength("a\xF0\x9F"), 1u);
  EXPECT_EQ(utf8::CompletePrefixLength("a\xF0"), 1u);
  EXPECT_EQ(utf8::CompletePrefixLength("a\xF0\x9F\x9A\x80"), 5u);
  EXPECT_EQ(utf8::CompletePrefixLength("a\xE0\x80"), 3u);  // can never become valid
  EXPECT_EQ(utf8::CompletePrefixLength("a\xFF"), 2u);
  EXPECT_EQ(utf8::CompletePrefixLength("\x80\x80\x80\x80"), 4u);
}

TEST(Utf8Test, Gpt2ByteMap) {
  EXPECT_EQ(utf8::ByteToUnicode('!'), U'!');
  EXPECT_EQ(utf8::ByteToUnicode(' '), U'\u0120');
  EXPECT_EQ(utf8::ByteToUnicode('\n'), U'\u010A');
  EXPECT_EQ(utf8::ByteToUnicode(0), U'\u0100');
  EXPECT_EQ(utf8::ByteToUnicode(0x7F), U'\u0121');  // after the 33 bytes 0x00..0x20
  EXPECT_EQ(utf8::ByteToUnicode(0xAD), U'\u0143');  // the last unprintable byte
  for (int b = 0; b < 256; ++b) EXPECT_EQ(utf8::UnicodeToByte(utf8::ByteToUnicode(b)), b);
  std::string bytes;
  ASSERT_TRUE(utf8::ByteLevelToBytes(utf8::BytesToByteLevel("hi \xE4\xBD\xA0\n"), bytes));
  EXPECT_EQ(bytes, "hi \xE4\xBD\xA0\n");
  EXPECT_FALSE(utf8::ByteLevelToBytes("\xE4\xBD\xA0", bytes));  // 你 is not in the map
}

}  // namespace
}  // namespace mt
