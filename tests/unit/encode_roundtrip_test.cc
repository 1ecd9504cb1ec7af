#include <gtest/gtest.h>

#include <random>

#include "wire/decode.h"
#include "wire/encode.h"

namespace kvgate::wire {
namespace {

class RoundTrip : public ::testing::TestWithParam<std::tuple<EventFormat, HashFormat>> {};

TEST_P(RoundTrip, EveryEventSurvives) {
  const auto [format, hash_format] = GetParam();
  std::mt19937_64 rng(7);
  std::vector<OutEvent> events;
  StoredBlocks stored;
  stored.block_hashes = {rng(), rng()};
  stored.parent_hash = rng();
  for (int i = 0; i < 8; ++i) stored.token_ids.push_back(rng() % 150000);
  stored.token_ids[3] = (uint64_t{1} << 61) | 77;  // SGLang-style wide pad id
  stored.block_size = 4;
  stored.medium = Tier::kHost;
  stored.lora_name = "adapter";
  events.push_back(stored);
  StoredBlocks eagle = stored;
  eagle.bigram = true;
  eagle.lora_name.reset();
  eagle.parent_hash.reset();
  eagle.token_ids.push_back(5);  // EAGLE: one token more than the blocks hold
  events.push_back(eagle);
  events.push_back(RemovedBlocks{{stored.block_hashes[1]}, Tier::kDisk, {}});
  events.push_back(AllCleared{});

  const std::string payload = EncodeEventBatch(3.25, 2, events, {format, hash_format});
  DecodedBatch b;
  ASSERT_TRUE(DecodeEventBatch(payload, b).ok());
  EXPECT_EQ(b.ts, 3.25);
  EXPECT_EQ(b.dp_rank, 2);
  ASSERT_EQ(b.events.size(), 4u);

  const Event& s = b.events[0];
  ASSERT_EQ(s.kind, EventKind::kStored) << s.message;
  EXPECT_EQ(std::vector<uint64_t>(b.BlockHashes(s).begin(), b.BlockHashes(s).end()),
            stored.block_hashes);
  EXPECT_EQ(s.parent_hash, *stored.parent_hash);
  std::vector<uint32_t> want;
  for (uint64_t t : stored.token_ids) {
    want.push_back(t > 0xFFFFFFFFull ? FoldWideTokenId(t) : static_cast<uint32_t>(t));
  }
  EXPECT_EQ(std::vector<uint32_t>(b.TokenIds(s).begin(), b.TokenIds(s).end()), want);
  EXPECT_EQ(s.medium, Tier::kHost);
  EXPECT_EQ(b.LoraName(s), "adapter");
  EXPECT_FALSE(s.is_eagle);

  const Event& e = b.events[1];
  ASSERT_EQ(e.kind, EventKind::kStored) << e.message;
  EXPECT_TRUE(e.is_eagle);
  EXPECT_FALSE(e.has_parent);
  EXPECT_EQ(e.token_ids.size, 9u);
  EXPECT_FALSE(b.LoraName(e).has_value());

  EXPECT_EQ(b.events[2].kind, EventKind::kRemoved);
  EXPECT_EQ(b.events[2].medium, Tier::kDisk);
  EXPECT_EQ(b.BlockHashes(b.events[2])[0], stored.block_hashes[1]);
  EXPECT_EQ(b.events[3].kind, EventKind::kCleared);
}

INSTANTIATE_TEST_SUITE_P(
    AllFormats, RoundTrip,
    ::testing::Combine(::testing::Values(EventFormat::kVllmMap, EventFormat::kVllmPositional,
                                         EventFormat::kSglang),
                       ::testing::Values(HashFormat::kInt, HashFormat::kBytes)));

}  // namespace
}  // namespace kvgate::wire
