#include "kv/prefix_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "kv/block_hash.h"
#include "wire/decode.h"
#include "wire/encode.h"

namespace kvgate::kv {
namespace {

constexpr uint32_t kBs = 4;

// Content-defined engine hash, like a real engine's (distinct from kvgate's own hashes).
uint64_t EngineHash(uint64_t seq) { return seq * 0x9E3779B97F4A7C15ull + 1; }

struct Doc {
  std::vector<uint32_t> tokens;
  std::vector<uint64_t> local, seq;
};

Doc MakeDoc(std::vector<uint32_t> tokens) {
  Doc d{std::move(tokens), {}, {}};
  AppendLocalBlockHashes(d.tokens, kBs, kDefaultSeed, false, d.local);
  SequenceHashes(d.local, d.seq);
  return d;
}

wire::StoredBlocks Store(const Doc& d, size_t from, size_t to, wire::Tier tier) {
  wire::StoredBlocks s;
  for (size_t i = from; i < to; ++i) s.block_hashes.push_back(EngineHash(d.seq[i]));
  if (from > 0) s.parent_hash = EngineHash(d.seq[from - 1]);
  s.token_ids.assign(d.tokens.begin() + from * kBs, d.tokens.begin() + to * kBs);
  s.block_size = kBs;
  s.medium = tier;
  return s;
}

wire::DecodedBatch Decoded(const std::vector<wire::OutEvent>& events, uint32_t dp_rank = 0) {
  wire::DecodedBatch batch;
  const std::string payload = wire::EncodeEventBatch(0, dp_rank, events, {});
  EXPECT_TRUE(wire::DecodeEventBatch(payload, batch).ok());
  return batch;
}

ApplyStats Apply(PrefixIndex& index, WorkerKey w, std::vector<wire::OutEvent> events) {
  ApplyStats stats;
  index.ApplyBatch(w, Decoded(events, w.dp_rank), stats);
  return stats;
}

using Blocks = std::array<uint32_t, 4>;
using Key = std::pair<uint32_t, uint32_t>;

std::map<Key, Blocks> MatchMap(const PrefixIndex& index, const std::vector<uint64_t>& local) {
  std::vector<Overlap> out;
  index.Match(local, out);
  std::map<Key, Blocks> m;
  for (const Overlap& o : out) m[{o.worker.worker, o.worker.dp_rank}] = o.blocks;
  return m;
}

Doc Counting(uint32_t start, size_t blocks) {
  std::vector<uint32_t> t(blocks * kBs);
  for (size_t i = 0; i < t.size(); ++i) t[i] = start + static_cast<uint32_t>(i);
  return MakeDoc(t);
}

TEST(PrefixIndex, ChainsAcrossEventsAndStopsAtRemovedBlock) {
  PrefixIndex index(kBs);
  const Doc d = Counting(100, 6);
  const WorkerKey a{1, 0};
  EXPECT_EQ(Apply(index, a, {Store(d, 0, 3, wire::Tier::kDevice)}).stored_blocks, 3u);
  EXPECT_EQ(Apply(index, a, {Store(d, 3, 6, wire::Tier::kDevice)}).stored_blocks, 3u);
  EXPECT_EQ(MatchMap(index, d.local)[Key(1, 0)], (Blocks{6, 0, 0, 0}));

  Apply(index, a, {wire::RemovedBlocks{{EngineHash(d.seq[2])}, wire::Tier::kDevice, {}}});
  EXPECT_EQ(MatchMap(index, d.local)[Key(1, 0)], (Blocks{2, 0, 0, 0}));
  // A request that diverges after block 1 matches 1 block.
  Doc other = d;
  other.tokens[kBs + 1] = 7;
  other = MakeDoc(other.tokens);
  EXPECT_EQ(MatchMap(index, other.local)[Key(1, 0)], (Blocks{1, 0, 0, 0}));
}

TEST(PrefixIndex, UnknownParentSkipsTheWholeStore) {
  PrefixIndex index(kBs);
  const Doc d = Counting(0, 4);
  const ApplyStats s = Apply(index, {1, 0}, {Store(d, 2, 4, wire::Tier::kDevice)});
  EXPECT_EQ(s.unknown_parent, 1u);
  EXPECT_EQ(s.stored_blocks, 0u);
  EXPECT_EQ(index.Stats().nodes, 0u);
}

TEST(PrefixIndex, BlockSizeAndTokenCountMismatchesAreSkipped) {
  PrefixIndex index(kBs);
  const Doc d = Counting(0, 2);
  wire::StoredBlocks wrong_size = Store(d, 0, 2, wire::Tier::kDevice);
  wrong_size.block_size = 8;
  wire::StoredBlocks short_tokens = Store(d, 0, 2, wire::Tier::kDevice);
  short_tokens.token_ids.pop_back();
  const ApplyStats s = Apply(index, {1, 0}, {wrong_size, short_tokens});
  EXPECT_EQ(s.block_size_mismatch, 1u);
  EXPECT_EQ(s.token_count_mismatch, 1u);
  EXPECT_EQ(index.Stats().nodes, 0u);
}

TEST(PrefixIndex, TiersDpRanksClearAndRemoveWorker) {
  PrefixIndex index(kBs);
  const Doc d = Counting(0, 4);
  Apply(index, {1, 0}, {Store(d, 0, 2, wire::Tier::kDevice), Store(d, 2, 4, wire::Tier::kHost)});
  Apply(index, {1, 1}, {Store(d, 0, 4, wire::Tier::kDisk)});
  Apply(index, {2, 0}, {Store(d, 0, 1, wire::Tier::kHost), Store(d, 0, 1, wire::Tier::kDevice)});
  auto m = MatchMap(index, d.local);
  EXPECT_EQ(m[std::make_pair(1u, 0u)], (Blocks{2, 2, 0, 0}));
  EXPECT_EQ(m[std::make_pair(1u, 1u)], (Blocks{0, 0, 4, 0}));
  EXPECT_EQ(m[std::make_pair(2u, 0u)], (Blocks{1, 0, 0, 0}));

  // Removing the device copy leaves the host copy.
  Apply(index, {2, 0}, {wire::RemovedBlocks{{EngineHash(d.seq[0])}, wire::Tier::kDevice, {}}});
  EXPECT_EQ(MatchMap(index, d.local)[std::make_pair(2u, 0u)], (Blocks{0, 1, 0, 0}));

  Apply(index, {1, 1}, {wire::AllCleared{}});
  m = MatchMap(index, d.local);
  EXPECT_FALSE(m.contains(std::make_pair(1u, 1u)));
  EXPECT_TRUE(m.contains(std::make_pair(1u, 0u)));

  Apply(index, {1, 1}, {Store(d, 0, 4, wire::Tier::kDisk)});
  index.RemoveWorker(1);
  m = MatchMap(index, d.local);
  EXPECT_EQ(m.size(), 1u);
  EXPECT_TRUE(m.contains(std::make_pair(2u, 0u)));
  EXPECT_EQ(index.Stats().entries, 1u);
}

// Long prompts: longer than Match's prefetch distance and inline buffers, holders that
// change along the chain (three workers, so a node's holders leave the inline pair), a tier
// change in the middle of a worker's prefix, and a removal far down the chain.
TEST(PrefixIndex, LongChainsWithChangingHolders) {
  PrefixIndex index(kBs);
  const Doc d = Counting(7, 300);
  Apply(index, {1, 0}, {Store(d, 0, 100, wire::Tier::kDevice)});
  Apply(index, {1, 0}, {Store(d, 100, 150, wire::Tier::kHost)});
  Apply(index, {2, 0}, {Store(d, 0, 40, wire::Tier::kDevice)});
  Apply(index, {3, 0}, {Store(d, 0, 300, wire::Tier::kDevice)});
  Apply(index, {4, 0}, {Store(d, 0, 299, wire::Tier::kDisk)});
  auto m = MatchMap(index, d.local);
  EXPECT_EQ(m[std::make_pair(1u, 0u)], (Blocks{100, 50, 0, 0}));
  EXPECT_EQ(m[std::make_pair(2u, 0u)], (Blocks{40, 0, 0, 0}));
  EXPECT_EQ(m[std::make_pair(3u, 0u)], (Blocks{300, 0, 0, 0}));
  EXPECT_EQ(m[std::make_pair(4u, 0u)], (Blocks{0, 0, 299, 0}));

  Apply(index, {3, 0}, {wire::RemovedBlocks{{EngineHash(d.seq[257])}, wire::Tier::kDevice, {}}});
  Apply(index, {4, 0}, {wire::RemovedBlocks{{EngineHash(d.seq[17])}, wire::Tier::kDisk, {}}});
  m = MatchMap(index, d.local);
  EXPECT_EQ(m[std::make_pair(3u, 0u)], (Blocks{257, 0, 0, 0}));
  EXPECT_EQ(m[std::make_pair(4u, 0u)], (Blocks{0, 0, 17, 0}));
  EXPECT_EQ(m[std::make_pair(1u, 0u)], (Blocks{100, 50, 0, 0}));
  // A prompt that leaves the chain stops every worker there.
  std::vector<uint64_t> prompt(d.local.begin(), d.local.begin() + 200);
  prompt[120] ^= 1;
  m = MatchMap(index, prompt);
  EXPECT_EQ(m[std::make_pair(1u, 0u)], (Blocks{100, 20, 0, 0}));
  EXPECT_EQ(m[std::make_pair(3u, 0u)], (Blocks{120, 0, 0, 0}));
}

// One writer storing and evicting a chain (and growing the table with others) while
// readers match: a reader sees any prefix of the churning worker's chain, and always the
// whole chain of a worker that keeps it. (Meant to be run under TSan too.)
TEST(PrefixIndex, ReadersMatchWhileTheWriterApplies) {
  PrefixIndex index(kBs);
  const Doc stable = Counting(1, 96);
  Apply(index, {7, 0}, {Store(stable, 0, 96, wire::Tier::kDevice)});
  std::vector<wire::DecodedBatch> store, evict;
  for (size_t from = 0; from < 96; from += 8) {
    store.push_back(Decoded({Store(stable, from, from + 8, wire::Tier::kHost)}));
    std::vector<uint64_t> hashes;
    for (size_t i = from; i < from + 8; ++i) hashes.push_back(EngineHash(stable.seq[i]));
    evict.push_back(Decoded({wire::RemovedBlocks{hashes, wire::Tier::kHost, {}}}));
  }
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::atomic<int> matches{0};
  std::thread writer([&] {
    ApplyStats stats;
    // At least 200 rounds, and on until the readers have matched a while (on a busy machine
    // they may start late); other content cycles so the table grows, then stays put.
    for (int round = 0; round < 200 || (matches < 2000 && round < 1000000); ++round) {
      for (const auto& b : store) index.ApplyBatch({8, 0}, b, stats);
      for (auto it = evict.rbegin(); it != evict.rend(); ++it) index.ApplyBatch({8, 0}, *it, stats);
      const Doc other = Counting(1000 + static_cast<uint32_t>(round % 500) * 100, 16);
      index.ApplyBatch({9, 0}, Decoded({Store(other, 0, 16, wire::Tier::kDevice)}), stats);
    }
    stop = true;
  });
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      std::vector<Overlap> out;
      while (!stop) {
        index.Match(stable.local, out);
        bool saw_stable = false;
        for (const Overlap& o : out) {
          if (o.worker.worker == 7) saw_stable = o.blocks[0] == 96 && o.total() == 96;
          // Worker 8 holds some prefix of the chain, on the host tier only.
          if (o.worker.worker == 8 && (o.total() > 96 || o.blocks[1] != o.total())) ++bad;
          if (o.worker.worker != 7 && o.worker.worker != 8) ++bad;
        }
        if (!saw_stable) ++bad;
        ++matches;
      }
    });
  }
  writer.join();
  for (auto& t : readers) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(matches.load(), 0);
  const auto m = MatchMap(index, stable.local);
  EXPECT_EQ(m.size(), 1u);
}

TEST(PrefixIndex, LoraStoresOnlyMatchLoraRequests) {
  PrefixIndex index(kBs);
  const Doc d = Counting(0, 2);
  wire::StoredBlocks s = Store(d, 0, 2, wire::Tier::kDevice);
  s.lora_name = "ad";
  Apply(index, {1, 0}, {s});
  EXPECT_TRUE(MatchMap(index, d.local).empty());
  std::vector<uint64_t> lora_local;
  AppendLocalBlockHashes(d.tokens, kBs, BlockHashSeed("ad"), false, lora_local);
  EXPECT_EQ(MatchMap(index, lora_local)[std::make_pair(1u, 0u)][0], 2u);
}

TEST(PrefixIndex, SaltedStoresOnlyMatchRequestsWithTheSameSalt) {
  // SGLang's metadata map carries the request's cache_salt: the chain is hashed with it.
  PrefixIndex index(kBs);
  const Doc d = Counting(0, 2);
  wire::StoredBlocks s = Store(d, 0, 2, wire::Tier::kDevice);
  s.cache_salt = "tenant-a";
  wire::EncodeOptions sglang;
  sglang.format = wire::EventFormat::kSglang;
  wire::DecodedBatch batch;
  const std::vector<wire::OutEvent> events = {s};
  ASSERT_TRUE(wire::DecodeEventBatch(wire::EncodeEventBatch(0, 0, events, sglang), batch).ok());
  ASSERT_EQ(batch.events[0].kind, wire::EventKind::kStored) << batch.events[0].message;
  ApplyStats stats;
  index.ApplyBatch({1, 0}, batch, stats);
  EXPECT_TRUE(MatchMap(index, d.local).empty());  // unsalted requests do not match
  std::vector<uint64_t> salted, other;
  AppendLocalBlockHashes(d.tokens, kBs, BlockHashSeed("", "tenant-a"), false, salted);
  AppendLocalBlockHashes(d.tokens, kBs, BlockHashSeed("", "tenant-b"), false, other);
  EXPECT_EQ(MatchMap(index, salted)[std::make_pair(1u, 0u)][0], 2u);
  EXPECT_TRUE(MatchMap(index, other).empty());
}

// vLLM names the salt only in the first block's extra_keys; the blocks stored later under
// that chain are seeded by it all the same.
TEST(PrefixIndex, VllmSaltInTheFirstBlockSeedsTheWholeChain) {
  for (wire::EventFormat format :
       {wire::EventFormat::kVllmMap, wire::EventFormat::kVllmPositional}) {
    PrefixIndex index(kBs);
    std::vector<uint64_t> salted, unsalted, other;
    const Doc d = Counting(0, 4);
    AppendLocalBlockHashes(d.tokens, kBs, BlockHashSeed("", "tenant-a"), false, salted);
    AppendLocalBlockHashes(d.tokens, kBs, BlockHashSeed("", "tenant-b"), false, other);
    unsalted = d.local;
    wire::StoredBlocks root = Store(d, 0, 2, wire::Tier::kDevice);
    root.cache_salt = "tenant-a";
    wire::StoredBlocks next = Store(d, 2, 4, wire::Tier::kDevice);  // names no salt
    wire::EncodeOptions options;
    options.format = format;
    const std::vector<wire::OutEvent> events = {root, next};
    wire::DecodedBatch batch;
    ASSERT_TRUE(wire::DecodeEventBatch(wire::EncodeEventBatch(0, 0, events, options), batch).ok());
    ASSERT_TRUE(batch.events[0].has_cache_salt);
    ASSERT_FALSE(batch.events[1].has_cache_salt);
    ApplyStats stats;
    index.ApplyBatch({1, 0}, batch, stats);
    EXPECT_EQ(stats.stored_blocks, 4u);
    EXPECT_EQ(MatchMap(index, salted)[std::make_pair(1u, 0u)][0], 4u);
    EXPECT_TRUE(MatchMap(index, unsalted).empty());
    EXPECT_TRUE(MatchMap(index, other).empty());
    // Once the chain's blocks go, a later unsalted chain under the same engine hashes is not
    // seeded by the old salt.
    Apply(index, {1, 0},
          {wire::RemovedBlocks{{EngineHash(d.seq[0]), EngineHash(d.seq[1]), EngineHash(d.seq[2]),
                                EngineHash(d.seq[3])},
                               wire::Tier::kDevice,
                               {}}});
    Apply(index, {1, 0},
          {Store(d, 0, 2, wire::Tier::kDevice), Store(d, 2, 4, wire::Tier::kDevice)});
    EXPECT_EQ(MatchMap(index, unsalted)[std::make_pair(1u, 0u)][0], 4u);
    EXPECT_TRUE(MatchMap(index, salted).empty());
  }
}

TEST(PrefixIndex, ABlockHeldTwiceStaysUntilItsLastCopyGoes) {
  PrefixIndex index(kBs);
  const Doc d = Counting(0, 2);
  const WorkerKey w{1, 0};
  Apply(index, w, {Store(d, 0, 2, wire::Tier::kDevice)});
  Apply(index, w, {Store(d, 0, 2, wire::Tier::kDevice)});  // a second physical copy
  const wire::RemovedBlocks remove_second{{EngineHash(d.seq[1])}, wire::Tier::kDevice, {}};
  EXPECT_EQ(Apply(index, w, {remove_second}).copies_removed, 1u);
  EXPECT_EQ(MatchMap(index, d.local)[Key(1, 0)], (Blocks{2, 0, 0, 0}));
  Apply(index, w, {remove_second});
  EXPECT_EQ(MatchMap(index, d.local)[Key(1, 0)], (Blocks{1, 0, 0, 0}));
  // Another tier's store is not a copy: one removal on device leaves the host copy.
  Apply(index, w, {Store(d, 1, 2, wire::Tier::kHost), Store(d, 1, 2, wire::Tier::kDevice)});
  Apply(index, w, {remove_second});
  EXPECT_EQ(MatchMap(index, d.local)[Key(1, 0)], (Blocks{1, 1, 0, 0}));
}

TEST(PrefixIndex, RemainingCopyCountsFromTheEngineWin) {
  PrefixIndex index(kBs);
  const Doc d = Counting(0, 2);
  const WorkerKey w{1, 0};
  // The engine held three copies of block 1 but kvgate saw one store (e.g. it joined late).
  Apply(index, w, {Store(d, 0, 2, wire::Tier::kDevice)});
  wire::RemovedBlocks removed{{EngineHash(d.seq[1])}, wire::Tier::kDevice, {2}};
  Apply(index, w, {removed});
  removed.remaining_copy_counts = {1};
  Apply(index, w, {removed});
  EXPECT_EQ(MatchMap(index, d.local)[Key(1, 0)], (Blocks{2, 0, 0, 0}));
  removed.remaining_copy_counts = {0};
  Apply(index, w, {removed});
  EXPECT_EQ(MatchMap(index, d.local)[Key(1, 0)], (Blocks{1, 0, 0, 0}));
  // And they override kvgate's own count: two stores, then "none left".
  Apply(index, w, {Store(d, 1, 2, wire::Tier::kDevice), Store(d, 1, 2, wire::Tier::kDevice)});
  Apply(index, w, {removed});
  EXPECT_EQ(MatchMap(index, d.local)[Key(1, 0)], (Blocks{1, 0, 0, 0}));
}

// 100k random operations against a plain model: per worker, engine hash -> (seq, copies held
// per tier). A store of a block already held on a tier is one more copy of it there.
TEST(PrefixIndex, RandomizedAgainstReferenceModel) {
  std::mt19937_64 rng(12345);
  // Documents share prefixes: each starts as a prefix of an earlier one.
  std::vector<Doc> docs;
  for (int i = 0; i < 200; ++i) {
    std::vector<uint32_t> tokens;
    if (!docs.empty() && rng() % 4 != 0) {
      const Doc& base = docs[rng() % docs.size()];
      const size_t keep = rng() % (base.local.size() + 1);
      tokens.assign(base.tokens.begin(), base.tokens.begin() + keep * kBs);
    }
    const size_t extra = 1 + rng() % 8;
    for (size_t t = 0; t < extra * kBs; ++t) tokens.push_back(rng() % 50);
    docs.push_back(MakeDoc(tokens));
  }
  const WorkerKey workers[] = {{0, 0}, {0, 1}, {1, 0}, {2, 0}, {3, 0}};
  struct Held {
    uint64_t seq;
    std::array<uint32_t, 4> copies{};
    uint32_t tiers() const {
      uint32_t bits = 0;
      for (uint32_t t = 0; t < 4; ++t) bits |= copies[t] > 0 ? 1u << t : 0;
      return bits;
    }
  };
  std::map<std::pair<uint32_t, uint32_t>, std::map<uint64_t, Held>> model;
  PrefixIndex index(kBs);

  auto model_match = [&](const std::vector<uint64_t>& seq) {
    std::map<Key, Blocks> m;
    for (auto& [w, held] : model) {
      std::map<uint64_t, uint32_t> by_seq;
      for (auto& [eh, h] : held) by_seq[h.seq] |= h.tiers();
      std::array<uint32_t, 4> blocks{};
      for (uint64_t s : seq) {
        auto it = by_seq.find(s);
        if (it == by_seq.end() || it->second == 0) break;
        ++blocks[std::countr_zero(it->second)];
      }
      if (blocks[0] + blocks[1] + blocks[2] + blocks[3] > 0) m[w] = blocks;
    }
    return m;
  };

  for (int op = 0; op < 100000; ++op) {
    const WorkerKey w = workers[rng() % std::size(workers)];
    auto& held = model[{w.worker, w.dp_rank}];
    const uint64_t r = rng() % 100;
    if (r < 45) {
      const Doc& d = docs[rng() % docs.size()];
      const size_t from = rng() % d.local.size();
      const size_t to = from + 1 + rng() % (d.local.size() - from);
      const auto tier = static_cast<wire::Tier>(rng() % 3);
      Apply(index, w, {Store(d, from, to, tier)});
      if (from == 0 || held.contains(EngineHash(d.seq[from - 1]))) {
        for (size_t i = from; i < to; ++i) {
          Held& h = held[EngineHash(d.seq[i])];
          h.seq = d.seq[i];
          ++h.copies[static_cast<uint32_t>(tier)];
        }
      }
    } else if (r < 85) {
      if (held.empty()) continue;
      auto it = held.begin();
      std::advance(it, rng() % held.size());
      const auto tier = static_cast<wire::Tier>(rng() % 3);
      Apply(index, w, {wire::RemovedBlocks{{it->first}, tier, {}}});
      uint32_t& copies = it->second.copies[static_cast<uint32_t>(tier)];
      if (copies > 0) --copies;
      if (it->second.tiers() == 0) held.erase(it);
    } else if (r < 86) {
      Apply(index, w, {wire::AllCleared{}});
      held.clear();
    } else {
      const Doc& d = docs[rng() % docs.size()];
      const size_t n = 1 + rng() % d.local.size();
      const std::vector<uint64_t> local(d.local.begin(), d.local.begin() + n);
      const std::vector<uint64_t> seq(d.seq.begin(), d.seq.begin() + n);
      ASSERT_EQ(MatchMap(index, local), model_match(seq)) << "op " << op;
    }
  }
  size_t entries = 0;
  for (auto& [w, held] : model) {
    std::set<uint64_t> seqs;
    for (auto& [eh, h] : held) seqs.insert(h.seq);
    entries += seqs.size();
  }
  EXPECT_EQ(index.Stats().entries, entries);
}

}  // namespace
}  // namespace kvgate::kv
