#include "routing/in_flight_prefixes.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "kv/block_hash.h"

namespace kvgate::routing {
namespace {

using Matches = std::vector<std::pair<kv::WorkerKey, uint32_t>>;

Matches Sorted(Matches m) {
  std::sort(m.begin(), m.end(),
            [](const auto& a, const auto& b) { return a.first.worker < b.first.worker; });
  return m;
}

// Chained hashes of a prompt of `blocks` blocks whose block i holds token `first[i]` (or
// `i` past `first`): equal leading blocks give equal leading hashes, as kv::SequenceHashes.
std::vector<uint64_t> Prompt(uint32_t blocks, std::vector<uint64_t> first = {}) {
  std::vector<uint64_t> local;
  for (uint32_t i = 0; i < blocks; ++i) local.push_back(i < first.size() ? first[i] : 1000 + i);
  std::vector<uint64_t> chained;
  kv::SequenceHashes(local, chained);
  return chained;
}

TEST(PrefixMarks, KeepBlocksAtPowersOfTwoLessOneAndTheLast) {
  const std::vector<uint64_t> p = Prompt(12);
  EXPECT_EQ(PrefixMarks::Of(p).hashes, (std::vector<uint64_t>{p[0], p[1], p[3], p[7], p[11]}));
  EXPECT_EQ(PrefixMarks::Of(Prompt(8)).hashes.size(), 4u);  // 0, 1, 3, 7
  EXPECT_EQ(PrefixMarks::Of(Prompt(1)).hashes, (std::vector<uint64_t>{Prompt(1)[0]}));
  EXPECT_TRUE(PrefixMarks::Of(Prompt(0)).hashes.empty());
  PrefixMarks bad = PrefixMarks::Of(p);
  EXPECT_TRUE(bad.valid());
  bad.blocks = 40;  // would need six hashes
  EXPECT_FALSE(bad.valid());
}

TEST(InFlightPrefixes, ANextTurnMatchesInFullAPartShareAtLeastHalfUntilTheRequestsEnd) {
  InFlightPrefixes t;
  const kv::WorkerKey a{1, 0}, b{2, 0};
  const std::vector<uint64_t> turn = Prompt(12);
  t.Add(10, a, PrefixMarks::Of(turn));
  Matches m;
  // The next turn: the whole of it and two blocks more.
  t.Match(Prompt(14), m);
  EXPECT_EQ(m, (Matches{{a, 12}}));
  // Sharing 10 blocks, then another text: at least the 8 up to the last mark within them.
  std::vector<uint64_t> branch_tokens(14);
  for (uint32_t i = 0; i < 14; ++i) branch_tokens[i] = i < 10 ? 1000 + i : 7;
  t.Match(Prompt(14, branch_tokens), m);
  EXPECT_EQ(m, (Matches{{a, 8}}));
  // Its first 6 blocks alone: 4 (block 5 is no mark of it).
  t.Match(Prompt(6), m);
  EXPECT_EQ(m, (Matches{{a, 4}}));
  // Another prompt from its first block on: nothing.
  t.Match(Prompt(14, {5}), m);
  EXPECT_TRUE(m.empty());

  t.Add(11, b, PrefixMarks::Of(Prompt(3)));
  t.Add(12, a, PrefixMarks::Of(Prompt(2)));
  t.Match(Prompt(14), m);
  EXPECT_EQ(Sorted(m), (Matches{{a, 12}, {b, 3}}));  // each worker's longest
  t.Remove(10);                                      // a keeps request 12's two blocks
  t.Match(Prompt(14), m);
  EXPECT_EQ(Sorted(m), (Matches{{a, 2}, {b, 3}}));
  t.Remove(10);  // (twice is harmless)
  t.RemoveWorker(b);
  t.Match(Prompt(14), m);
  EXPECT_EQ(m, (Matches{{a, 2}}));
  t.Remove(12);
  EXPECT_EQ(t.requests(), 0u);
  t.Match(Prompt(14), m);
  EXPECT_TRUE(m.empty());
  // Marks that do not fit their block count (a peer's bad message) are not kept.
  PrefixMarks bad = PrefixMarks::Of(turn);
  bad.hashes.pop_back();
  t.Add(13, a, bad);
  EXPECT_EQ(t.requests(), 0u);
}

}  // namespace
}  // namespace kvgate::routing
