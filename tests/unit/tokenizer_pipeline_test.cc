// tokenizer/pipeline: pieces of the tokenizer pipeline tested alone.
#include <gtest/gtest.h>

#include "tokenizer/pipeline.h"

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

}  // namespace
}  // namespace kvgate
