#include "wire/decode.h"

#include <gtest/gtest.h>

#include <vector>

#include "msgpack_builder.h"

namespace kvgate::wire {
namespace {

using testing::MsgpackBuilder;

std::vector<uint32_t> Tokens(const DecodedBatch& b, const Event& e) {
  auto t = b.TokenIds(e);
  return {t.begin(), t.end()};
}
std::vector<uint64_t> Hashes(const DecodedBatch& b, const Event& e) {
  auto h = b.BlockHashes(e);
  return {h.begin(), h.end()};
}

TEST(Decode, PositionalStoredWithEveryField) {
  MsgpackBuilder m;
  m.pk.pack_array(3);
  m.pk.pack(1.5);
  m.pk.pack_array(1);
  m.pk.pack_array(13);
  m.pk.pack("BlockStored");
  m.pk.pack(std::vector<int64_t>{11, -1});
  m.pk.pack(7);
  m.pk.pack(std::vector<uint64_t>{1, 2, 3, 4});
  m.pk.pack(2);
  m.pk.pack_nil();  // lora_id
  m.pk.pack("CPU");
  m.pk.pack("adapter-a");
  m.pk.pack_array(1);
  m.pk.pack("salt");
  m.pk.pack(0);
  m.pk.pack("full_attention");
  m.pk.pack_nil();
  m.pk.pack(42);  // extra trailing field: ignored
  m.pk.pack(3);

  DecodedBatch b;
  ASSERT_TRUE(DecodeEventBatch(m.str(), b).ok());
  EXPECT_EQ(b.ts, 1.5);
  EXPECT_EQ(b.dp_rank, 3);
  ASSERT_EQ(b.events.size(), 1u);
  const Event& e = b.events[0];
  EXPECT_EQ(e.kind, EventKind::kStored);
  EXPECT_EQ(Hashes(b, e), (std::vector<uint64_t>{11, ~uint64_t{0}}));
  EXPECT_TRUE(e.has_parent);
  EXPECT_EQ(e.parent_hash, 7u);
  EXPECT_EQ(Tokens(b, e), (std::vector<uint32_t>{1, 2, 3, 4}));
  EXPECT_EQ(e.block_size, 2u);
  EXPECT_EQ(e.medium, Tier::kHost);
  EXPECT_EQ(b.LoraName(e), "adapter-a");
  ASSERT_EQ(e.extra_keys.size, 1u);
  EXPECT_EQ(b.Text(b.extra_keys[e.extra_keys.offset]), "salt");
}

TEST(Decode, MapEventWithTypeLastAndUnknownKeys) {
  MsgpackBuilder m;
  m.pk.pack_map(2);
  m.pk.pack("ts");
  m.pk.pack(2);
  m.pk.pack("events");
  m.pk.pack_array(1);
  m.pk.pack_map(5);
  m.pk.pack("block_hashes");
  m.pk.pack(std::vector<int>{5});
  m.pk.pack("future_field");
  m.pk.pack_map(1);
  m.pk.pack("x");
  m.pk.pack(std::vector<int>{1, 2});
  m.pk.pack("token_ids");
  m.pk.pack(std::vector<int>{9, 8});
  m.pk.pack("block_size");
  m.pk.pack(2);
  m.pk.pack("type");
  m.pk.pack("BlockStored");
  DecodedBatch b;
  ASSERT_TRUE(DecodeEventBatch(m.str(), b).ok());
  EXPECT_EQ(b.ts, 2.0);
  EXPECT_FALSE(b.dp_rank.has_value());
  ASSERT_EQ(b.events.size(), 1u);
  EXPECT_EQ(b.events[0].kind, EventKind::kStored);
  EXPECT_FALSE(b.events[0].has_parent);
  EXPECT_EQ(Tokens(b, b.events[0]), (std::vector<uint32_t>{9, 8}));
}

TEST(Decode, WideIdsFoldOnlyAboveU32) {
  MsgpackBuilder m;
  m.BeginOneEventBatch(5, "BlockStored");
  m.pk.pack(std::vector<int>{1});
  m.pk.pack_nil();
  const uint64_t wide = (uint64_t{1} << 62) + 12345;
  m.pk.pack(std::vector<uint64_t>{0xFFFFFFFFull, 0x100000000ull, wide, 17});
  m.pk.pack(4);
  DecodedBatch b;
  ASSERT_TRUE(DecodeEventBatch(m.str(), b).ok());
  ASSERT_EQ(b.events[0].kind, EventKind::kStored);
  EXPECT_EQ(Tokens(b, b.events[0]),
            (std::vector<uint32_t>{0xFFFFFFFFu, 1'000'000u, 1'000'000u + 12345u, 17u}));
}

TEST(Decode, BigramPairsBecomeTokensAndMarkEagle) {
  MsgpackBuilder m;
  m.BeginOneEventBatch(5, "BlockStored");
  m.pk.pack(std::vector<int>{1});
  m.pk.pack_nil();
  m.pk.pack(std::vector<std::vector<int>>{{10, 11}, {11, 12}, {12, 13}});
  m.pk.pack(2);
  DecodedBatch b;
  ASSERT_TRUE(DecodeEventBatch(m.str(), b).ok());
  EXPECT_TRUE(b.events[0].is_eagle);
  EXPECT_EQ(Tokens(b, b.events[0]), (std::vector<uint32_t>{10, 11, 12, 13}));
}

TEST(Decode, BytesHashesUseLastEightBytesBigEndian) {
  MsgpackBuilder m;
  m.BeginOneEventBatch(3, "BlockRemoved");
  m.pk.pack_array(2);
  const char digest[10] = {9, 9, 1, 2, 3, 4, 5, 6, 7, 8};
  m.pk.pack_bin(10);
  m.pk.pack_bin_body(digest, 10);
  const char short_digest[2] = {1, 2};
  m.pk.pack_bin(2);
  m.pk.pack_bin_body(short_digest, 2);
  m.pk.pack("DISK");
  DecodedBatch b;
  ASSERT_TRUE(DecodeEventBatch(m.str(), b).ok());
  EXPECT_EQ(Hashes(b, b.events[0]), (std::vector<uint64_t>{0x0102030405060708ull, 0x0102ull}));
  EXPECT_EQ(b.events[0].medium, Tier::kDisk);
}

TEST(Decode, SglangMetadataMapWhereLoraNameGoes) {
  // SGLang 0.5.18+: [tag, hashes, parent, tokens, block_size, lora_id, medium, metadata].
  for (const bool salted : {true, false}) {
    MsgpackBuilder m;
    m.BeginOneEventBatch(8, "BlockStored");
    m.pk.pack(std::vector<int64_t>{5});
    m.pk.pack_nil();
    m.pk.pack(std::vector<uint64_t>{1, 2});
    m.pk.pack(2);
    m.pk.pack_nil();
    m.pk.pack("GPU");
    m.pk.pack_map(2);
    m.pk.pack("session_id");
    m.pk.pack("sess-1");
    m.pk.pack("cache_salt");
    if (salted) {
      m.pk.pack("s1");
    } else {
      m.pk.pack_nil();
    }
    DecodedBatch b;
    ASSERT_TRUE(DecodeEventBatch(m.str(), b).ok());
    ASSERT_EQ(b.events[0].kind, EventKind::kStored) << b.events[0].message;
    EXPECT_FALSE(b.events[0].has_lora_name);
    EXPECT_EQ(b.CacheSalt(b.events[0]), salted ? "s1" : "");
  }
}

TEST(Decode, EventsWrappedAsBytesAreDecodedInside) {
  // llm-d's storage publisher: each event is a msgpack bin holding the event's msgpack.
  MsgpackBuilder inner;
  inner.pk.pack_array(3);
  inner.pk.pack("BlockRemoved");
  inner.pk.pack(std::vector<int>{4, 5});
  inner.pk.pack("SHARED_STORAGE");
  const std::string event = inner.str();
  MsgpackBuilder m;
  m.pk.pack_array(2);
  m.pk.pack(0.0);
  m.pk.pack_array(3);
  m.pk.pack_bin(static_cast<uint32_t>(event.size()));
  m.pk.pack_bin_body(event.data(), static_cast<uint32_t>(event.size()));
  const char garbage[3] = {'\xc1', 1, 2};  // a reserved byte: not an event
  m.pk.pack_bin(3);
  m.pk.pack_bin_body(garbage, 3);
  m.pk.pack_bin(static_cast<uint32_t>(event.size()));
  m.pk.pack_bin_body(event.data(), static_cast<uint32_t>(event.size()));
  DecodedBatch b;
  ASSERT_TRUE(DecodeEventBatch(m.str(), b).ok());
  ASSERT_EQ(b.events.size(), 3u);
  EXPECT_EQ(b.events[0].kind, EventKind::kRemoved);
  EXPECT_EQ(Hashes(b, b.events[0]), (std::vector<uint64_t>{4, 5}));
  EXPECT_EQ(b.events[0].medium, Tier::kExternal);
  EXPECT_EQ(b.events[1].kind, EventKind::kInvalid);  // the bad one alone
  EXPECT_EQ(b.events[2].kind, EventKind::kRemoved);
}

TEST(Decode, MediaNamesOfRealEnginesAndConnectorsMapToTheirTier) {
  const std::pair<const char*, Tier> cases[] = {
      {"GPU", Tier::kDevice},
      {"gpu", Tier::kDevice},
      {"cpu", Tier::kHost},
      {"CPU_PINNED", Tier::kHost},
      {"DISK", Tier::kDisk},
      {"SHARED_STORAGE", Tier::kExternal},
      {"OBJECT_STORE", Tier::kExternal},
      {"STORAGE", Tier::kExternal},
      {"REMOTE", Tier::kExternal},
      {"shared_storage", Tier::kExternal},
  };
  for (const auto& [name, tier] : cases) {
    MsgpackBuilder m;
    m.BeginOneEventBatch(3, "BlockRemoved");
    m.pk.pack(std::vector<int>{1});
    m.pk.pack(name);
    DecodedBatch b;
    ASSERT_TRUE(DecodeEventBatch(m.str(), b).ok()) << name;
    EXPECT_EQ(b.events[0].medium, tier) << name;
    EXPECT_FALSE(b.events[0].unknown_medium) << name;
  }
}

TEST(Decode, BadEventsAreIsolated) {
  MsgpackBuilder m;
  m.pk.pack_array(3);
  m.pk.pack(0.0);
  m.pk.pack_array(7);
  // 0: unknown tag
  m.pk.pack_array(2);
  m.pk.pack("BlockFrobbed");
  m.pk.pack(std::vector<int>{1});
  // 1: negative token id, mid-array
  m.pk.pack_array(5);
  m.pk.pack("BlockStored");
  m.pk.pack(std::vector<int>{1});
  m.pk.pack_nil();
  m.pk.pack(std::vector<int>{1, -2, 3, 4});
  m.pk.pack(4);
  // 2: truncated positional stored (no token ids)
  m.pk.pack_array(3);
  m.pk.pack("BlockStored");
  m.pk.pack(std::vector<int>{1});
  m.pk.pack_nil();
  // 3: valid removal
  m.pk.pack_array(2);
  m.pk.pack("BlockRemoved");
  m.pk.pack(std::vector<int>{77});
  // 4: not a container
  m.pk.pack(5);
  // 5: float token id inside a bigram pair
  m.pk.pack_array(5);
  m.pk.pack("BlockStored");
  m.pk.pack(std::vector<int>{1});
  m.pk.pack_nil();
  m.pk.pack_array(1);
  m.pk.pack_array(2);
  m.pk.pack(1.5);
  m.pk.pack(2);
  m.pk.pack(1);
  // 6: sliding window: dropped, not invalid
  m.pk.pack_map(5);
  m.pk.pack("type");
  m.pk.pack("BlockStored");
  m.pk.pack("block_hashes");
  m.pk.pack(std::vector<int>{1});
  m.pk.pack("token_ids");
  m.pk.pack(std::vector<int>{1});
  m.pk.pack("block_size");
  m.pk.pack(1);
  m.pk.pack("kv_cache_spec_kind");
  m.pk.pack("sliding_window");
  m.pk.pack(0);

  DecodedBatch b;
  ASSERT_TRUE(DecodeEventBatch(m.str(), b).ok());
  ASSERT_EQ(b.events.size(), 7u);
  const EventKind want[] = {EventKind::kInvalid, EventKind::kInvalid, EventKind::kInvalid,
                            EventKind::kRemoved, EventKind::kInvalid, EventKind::kInvalid,
                            EventKind::kDropped};
  for (size_t i = 0; i < 7; ++i) {
    EXPECT_EQ(b.events[i].kind, want[i]) << "event " << i << ": " << b.events[i].message;
    EXPECT_EQ(b.events[i].index, i);
  }
  EXPECT_NE(b.events[0].message.find("BlockFrobbed"), std::string::npos);
  EXPECT_NE(b.events[1].message.find("negative"), std::string::npos);
  EXPECT_NE(b.events[2].message.find("truncated"), std::string::npos);
  EXPECT_NE(b.events[6].message.find("sliding_window"), std::string::npos);
  EXPECT_EQ(Hashes(b, b.events[3]), (std::vector<uint64_t>{77}));
  // Failed and dropped events leave nothing behind in the arenas.
  EXPECT_EQ(b.tokens.size(), 0u);
}

TEST(Decode, NotAnEventBatch) {
  DecodedBatch b;
  EXPECT_FALSE(DecodeEventBatch("", b).ok());
  MsgpackBuilder scalar;
  scalar.pk.pack(5);
  EXPECT_FALSE(DecodeEventBatch(scalar.str(), b).ok());
  MsgpackBuilder short_array;
  short_array.pk.pack(std::vector<int>{1});
  EXPECT_FALSE(DecodeEventBatch(short_array.str(), b).ok());
  MsgpackBuilder events_not_array;
  events_not_array.pk.pack_array(2);
  events_not_array.pk.pack(0.0);
  events_not_array.pk.pack("nope");
  EXPECT_FALSE(DecodeEventBatch(events_not_array.str(), b).ok());
  MsgpackBuilder map_without_events;
  map_without_events.pk.pack_map(1);
  map_without_events.pk.pack("ts");
  map_without_events.pk.pack(1.0);
  EXPECT_FALSE(DecodeEventBatch(map_without_events.str(), b).ok());
  MsgpackBuilder good;
  good.pk.pack_array(2);
  good.pk.pack(0.0);
  good.pk.pack_array(0);
  const std::string payload = good.str();
  EXPECT_TRUE(DecodeEventBatch(payload, b).ok());
  EXPECT_FALSE(DecodeEventBatch(payload.substr(0, payload.size() - 1), b).ok());
  EXPECT_FALSE(DecodeEventBatch(payload + "x", b).ok());
}

TEST(Decode, DeepNestingInIgnoredFieldsIsSkipped) {
  MsgpackBuilder m;
  m.BeginOneEventBatch(6, "BlockStored");
  m.pk.pack(std::vector<int>{1});
  m.pk.pack_nil();
  m.pk.pack(std::vector<int>{1, 2});
  m.pk.pack(2);
  for (int i = 0; i < 1000; ++i) m.pk.pack_array(1);  // lora_id: ignored, however deep
  m.pk.pack(1);
  DecodedBatch b;
  ASSERT_TRUE(DecodeEventBatch(m.str(), b).ok());
  EXPECT_EQ(b.events[0].kind, EventKind::kStored);
}

// vLLM's BlockStored.extra_keys: one tuple (or nil) per block; a salted request's first
// block ends with its salt. Built field by field as msgspec writes the map form.
TEST(Decode, VllmExtraKeysNameTheSaltOfAChainRoot) {
  auto stored = [](MsgpackBuilder& m, bool root, bool lora, std::vector<std::string> first) {
    m.pk.pack_map(root ? 8 : 9);
    m.pk.pack("type");
    m.pk.pack("BlockStored");
    m.pk.pack("block_hashes");
    m.pk.pack(std::vector<int>{1, 2});
    m.pk.pack("token_ids");
    m.pk.pack(std::vector<int>{1, 2, 3, 4});
    m.pk.pack("block_size");
    m.pk.pack(2);
    m.pk.pack("lora_id");
    m.pk.pack_nil();
    m.pk.pack("medium");
    m.pk.pack("GPU");
    m.pk.pack("lora_name");
    if (lora) {
      m.pk.pack("ad");
    } else {
      m.pk.pack_nil();
    }
    if (!root) {
      m.pk.pack("parent_block_hash");
      m.pk.pack(9);
    }
    m.pk.pack("extra_keys");
    m.pk.pack_array(2);
    m.pk.pack(first);
    m.pk.pack_array(1);
    m.pk.pack("second-block-key");
  };
  MsgpackBuilder m;
  m.pk.pack_array(2);
  m.pk.pack(1.0);
  m.pk.pack_array(4);
  stored(m, true, true, {"ad", "media-1", "the-salt"});
  stored(m, true, true, {"ad"});        // LoRA alone: no salt
  stored(m, false, false, {"x-salt"});  // not a chain root: the salt is the parent's business
  stored(m, true, false, {});
  DecodedBatch b;
  ASSERT_TRUE(DecodeEventBatch(m.str(), b).ok());
  ASSERT_EQ(b.events.size(), 4u);
  for (const Event& e : b.events) ASSERT_EQ(e.kind, EventKind::kStored) << e.message;
  EXPECT_EQ(b.CacheSalt(b.events[0]), "the-salt");
  EXPECT_EQ(b.events[0].extra_keys.size, 3u);  // the first block's keys only
  EXPECT_FALSE(b.events[1].has_cache_salt);
  EXPECT_FALSE(b.events[2].has_cache_salt);
  EXPECT_FALSE(b.events[3].has_cache_salt);
}

TEST(Decode, RemainingCopyCountsAreReadAndMustMatchTheHashes) {
  MsgpackBuilder m;
  m.pk.pack_array(2);
  m.pk.pack(1.0);
  m.pk.pack_array(3);
  m.pk.pack_array(5);  // positional: hashes, medium, group_idx, remaining_copy_counts
  m.pk.pack("BlockRemoved");
  m.pk.pack(std::vector<int>{5, 6});
  m.pk.pack("GPU");
  m.pk.pack(0);
  m.pk.pack(std::vector<int>{1, 0});
  m.pk.pack_map(3);
  m.pk.pack("type");
  m.pk.pack("BlockRemoved");
  m.pk.pack("block_hashes");
  m.pk.pack(std::vector<int>{5, 6});
  m.pk.pack("remaining_copy_counts");
  m.pk.pack(std::vector<int>{1});  // one count for two hashes
  m.pk.pack_array(5);
  m.pk.pack("BlockRemoved");
  m.pk.pack(std::vector<int>{7});
  m.pk.pack("GPU");
  m.pk.pack_nil();
  m.pk.pack_nil();
  DecodedBatch b;
  ASSERT_TRUE(DecodeEventBatch(m.str(), b).ok());
  ASSERT_EQ(b.events.size(), 3u);
  ASSERT_EQ(b.events[0].kind, EventKind::kRemoved);
  const auto counts = b.RemainingCopyCounts(b.events[0]);
  EXPECT_EQ(std::vector<uint32_t>(counts.begin(), counts.end()), (std::vector<uint32_t>{1, 0}));
  EXPECT_EQ(b.events[1].kind, EventKind::kInvalid);
  EXPECT_NE(b.events[1].message.find("remaining_copy_counts"), std::string::npos);
  EXPECT_EQ(b.events[2].kind, EventKind::kRemoved);
  EXPECT_FALSE(b.events[2].has_copy_counts);
}

}  // namespace
}  // namespace kvgate::wire
