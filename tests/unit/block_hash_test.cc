// Structural properties of the hashes; exact values are checked against Python's xxhash in
// tests/py/test_hash.py.
#include "kv/block_hash.h"

#include <gtest/gtest.h>

namespace kvgate::kv {
namespace {

TEST(BlockHash, OnlyFullBlocksAreHashed) {
  std::vector<uint32_t> tokens(37);
  for (uint32_t i = 0; i < tokens.size(); ++i) tokens[i] = i;
  std::vector<uint64_t> local;
  AppendLocalBlockHashes(tokens, 16, kDefaultSeed, false, local);
  EXPECT_EQ(local.size(), 2u);
  std::vector<uint64_t> again;
  AppendLocalBlockHashes(std::span(tokens).first(32), 16, kDefaultSeed, false, again);
  EXPECT_EQ(local, again);
}

TEST(BlockHash, EagleWindowNeedsOneMoreToken) {
  std::vector<uint32_t> tokens(32);
  std::vector<uint64_t> local;
  AppendLocalBlockHashes(tokens, 16, kDefaultSeed, true, local);
  EXPECT_EQ(local.size(), 1u);  // the second block lacks its lookahead token
  tokens.push_back(1);
  local.clear();
  AppendLocalBlockHashes(tokens, 16, kDefaultSeed, true, local);
  EXPECT_EQ(local.size(), 2u);
}

TEST(BlockHash, SeedChangesOnlyWithNonEmptyStrings) {
  EXPECT_EQ(BlockHashSeed(), kDefaultSeed);
  EXPECT_EQ(BlockHashSeed("", ""), kDefaultSeed);
  EXPECT_NE(BlockHashSeed("lora"), kDefaultSeed);
  EXPECT_NE(BlockHashSeed("", "salt"), BlockHashSeed("salt", ""));
}

TEST(BlockHash, SequenceHashesChain) {
  const std::vector<uint64_t> local = {10, 20, 30};
  std::vector<uint64_t> seq;
  SequenceHashes(local, seq);
  ASSERT_EQ(seq.size(), 3u);
  EXPECT_EQ(seq[0], 10u);
  EXPECT_EQ(seq[1], ChainSequenceHash(10, 20));
  EXPECT_EQ(seq[2], ChainSequenceHash(seq[1], 30));
}

}  // namespace
}  // namespace kvgate::kv
