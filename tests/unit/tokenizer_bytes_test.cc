// tokenizer/bytes: byte-level text and UTF-8.
#include <gtest/gtest.h>

#include "tokenizer/bytes.h"

namespace kvgate {
namespace {

TEST(LossyUtf8, ReplacesMaximalInvalidSubsequences) {
  EXPECT_EQ(tokenizer::LossyUtf8("ok \xC3\xA9"), "ok \xC3\xA9");
  EXPECT_EQ(tokenizer::LossyUtf8("\xEC\x9A!"), "\xEF\xBF\xBD!");            // truncated 3-byte
  EXPECT_EQ(tokenizer::LossyUtf8("\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // lone continuations
  EXPECT_EQ(tokenizer::LossyUtf8("\xED\xA0\x80"),
            "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");                // surrogate
  EXPECT_EQ(tokenizer::LossyUtf8("\xF0\x9F\x98"), "\xEF\xBF\xBD");  // truncated 4-byte
}

TEST(ByteLevel, EveryByteRoundTripsThroughPrintableCharacters) {
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  const std::string text = tokenizer::BytesToByteLevel(all);
  EXPECT_TRUE(tokenizer::IsValidUtf8(text));
  EXPECT_EQ(tokenizer::BytesToByteLevel(" "), "\xC4\xA0");  // GPT-2's space: U+0120
  EXPECT_EQ(tokenizer::BytesToByteLevel("a"), "a");
  std::string back;
  ASSERT_TRUE(tokenizer::ByteLevelToBytes(text, back));
  EXPECT_EQ(back, all);
  std::string none;
  EXPECT_FALSE(tokenizer::ByteLevelToBytes("\xE4\xB8\xAD", none));  // not in the alphabet
}

TEST(Utf8, ValidityFollowsTheStandard) {
  EXPECT_TRUE(tokenizer::IsValidUtf8("plain \xE4\xB8\xAD \xF0\x9F\x98\x80"));
  EXPECT_FALSE(tokenizer::IsValidUtf8("\xC0\xAF"));          // overlong
  EXPECT_FALSE(tokenizer::IsValidUtf8("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(tokenizer::IsValidUtf8("\xF4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(tokenizer::IsValidUtf8("\xE4\xB8"));          // truncated
}

}  // namespace
}  // namespace kvgate
