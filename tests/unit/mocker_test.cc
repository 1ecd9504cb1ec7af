#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "kv/block_hash.h"
#include "kv/prefix_index.h"
#include "mocker/engine.h"
#include "wire/decode.h"

namespace kvgate::mocker {
namespace {

std::vector<uint32_t> Prompt(uint32_t start, size_t n) {
  std::vector<uint32_t> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = start + static_cast<uint32_t>(i);
  return p;
}

// Runs steps until idle; returns the outputs by request and feeds the events through the
// real wire code into `index` (worker 0) when given.
std::map<uint64_t, std::vector<StepOutput>> RunToIdle(Engine& e, kv::PrefixIndex* index,
                                                      double* total_ms = nullptr) {
  std::map<uint64_t, std::vector<StepOutput>> out;
  for (int guard = 0; e.HasWork() && guard < 100000; ++guard) {
    StepResult r = e.Step();
    if (total_ms) *total_ms += r.duration_ms;
    for (const StepOutput& o : r.outputs) out[o.request_id].push_back(o);
    if (index && !r.events.empty()) {
      wire::DecodedBatch batch;
      EXPECT_TRUE(wire::DecodeEventBatch(wire::EncodeEventBatch(0, 0, r.events, {}), batch).ok());
      kv::ApplyStats stats;
      index->ApplyBatch({0, 0}, batch, stats);
      EXPECT_EQ(stats.unknown_parent, 0u);
    }
  }
  EXPECT_FALSE(e.HasWork());
  return out;
}

TEST(BlockPool, EvictsLeastRecentlyUsedAndReportsEvents) {
  BlockPool pool(3, 2);
  const uint32_t a = *pool.Allocate(), b = *pool.Allocate(), c = *pool.Allocate();
  pool.Commit(a, 100, std::nullopt, std::vector<uint32_t>{1, 2});
  pool.Commit(b, 101, 100, std::vector<uint32_t>{3, 4});  // chains onto 100: one event
  pool.Commit(c, 200, std::nullopt, std::vector<uint32_t>{5, 6});
  auto events = pool.TakeEvents();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(std::get<wire::StoredBlocks>(events[0]).block_hashes,
            (std::vector<uint64_t>{100, 101}));
  EXPECT_EQ(std::get<wire::StoredBlocks>(events[0]).token_ids, (std::vector<uint64_t>{1, 2, 3, 4}));
  EXPECT_EQ(std::get<wire::StoredBlocks>(events[1]).parent_hash, std::nullopt);
  EXPECT_FALSE(pool.Allocate().has_value());  // all referenced
  pool.Release(c);
  pool.Release(a);
  pool.Release(b);  // LRU order now: 200, 100, 101
  EXPECT_EQ(pool.available(), 3u);
  EXPECT_EQ(pool.CachedPrefix(std::vector<uint64_t>{100, 101}, 9), 2u);
  pool.AcquireCached(100);         // touch: 100 is in use again
  EXPECT_EQ(*pool.Allocate(), c);  // evicts 200
  EXPECT_EQ(*pool.Allocate(), b);  // then 101
  events = pool.TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(std::get<wire::RemovedBlocks>(events[0]).block_hashes,
            (std::vector<uint64_t>{200, 101}));
}

TEST(Engine, RepeatedPromptHitsWholeBlocksUpToLenMinusOne) {
  EngineConfig cfg;
  cfg.num_blocks = 64;
  cfg.block_size = 16;
  Engine e(cfg);
  kv::PrefixIndex index(16);
  ASSERT_TRUE(e.Submit({1, Prompt(0, 40), 4, "", "", 0, 0}));
  auto out = RunToIdle(e, &index);
  ASSERT_EQ(out[1].size(), 4u);
  const auto first_run = out[1];
  EXPECT_TRUE(out[1][0].first);
  EXPECT_EQ(out[1][0].cached_tokens, 0u);
  EXPECT_TRUE(out[1][3].finished);

  ASSERT_TRUE(e.Submit({2, Prompt(0, 40), 4, "", "", 0, 0}));
  out = RunToIdle(e, &index);
  EXPECT_EQ(out[2][0].cached_tokens, 32u);  // blocks 0-1; (40 - 1) / 16 = 2
  // Same prompt, same deterministic completion.
  ASSERT_EQ(out[2].size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[2][i].token, first_run[i].token);

  ASSERT_TRUE(e.Submit({3, Prompt(0, 32), 1, "", "", 0, 0}));
  out = RunToIdle(e, &index);
  EXPECT_EQ(out[3][0].cached_tokens, 16u);  // (32 - 1) / 16 = 1 block

  // The index, fed only by the engine's events, agrees with the pool.
  std::vector<uint32_t> tokens = Prompt(0, 40);
  std::vector<uint64_t> local;
  kv::AppendLocalBlockHashes(tokens, 16, kv::kDefaultSeed, false, local);
  std::vector<kv::Overlap> overlaps;
  index.Match(local, overlaps);
  ASSERT_EQ(overlaps.size(), 1u);
  EXPECT_EQ(overlaps[0].total(), 2u);  // both full blocks of the 40-token prompt
}

// Disaggregation: KV imported from a prefill worker counts as cached, is published as
// stored (so a router sees it), costs no prefill compute, and changes no generated token.
TEST(Engine, ImportedBlocksAreCachedStoredAndNotComputed) {
  EngineConfig cfg;
  cfg.num_blocks = 64;
  cfg.block_size = 16;
  Engine aggregated(cfg), decode(cfg);
  ASSERT_TRUE(aggregated.Submit({1, Prompt(0, 83), 3, "", "", 0, 0}));
  ASSERT_TRUE(decode.Submit({1, Prompt(0, 83), 3, "", "", 0, 9}));  // asks for more than exists
  kv::PrefixIndex index(16);
  const auto whole = RunToIdle(aggregated, nullptr);
  StepResult first = decode.Step();
  EXPECT_EQ(first.prefill_tokens, 83u - 5 * 16);  // (83 - 1) / 16 = 5 blocks came over
  ASSERT_EQ(first.outputs.size(), 1u);
  EXPECT_EQ(first.outputs[0].cached_tokens, 5u * 16);
  wire::DecodedBatch batch;
  ASSERT_TRUE(wire::DecodeEventBatch(wire::EncodeEventBatch(0, 0, first.events, {}), batch).ok());
  kv::ApplyStats stats;
  index.ApplyBatch({0, 0}, batch, stats);
  const std::vector<uint32_t> tokens = Prompt(0, 83);
  std::vector<uint64_t> local;
  kv::AppendLocalBlockHashes(tokens, 16, kv::kDefaultSeed, false, local);
  std::vector<kv::Overlap> overlaps;
  index.Match(local, overlaps);
  ASSERT_EQ(overlaps.size(), 1u);
  EXPECT_EQ(overlaps[0].total(), 5u);
  auto rest = RunToIdle(decode, nullptr);
  rest[1].insert(rest[1].begin(), first.outputs[0]);
  ASSERT_EQ(rest[1].size(), whole.at(1).size());
  for (size_t i = 0; i < rest[1].size(); ++i) EXPECT_EQ(rest[1][i].token, whole.at(1)[i].token);
}

// An EAGLE engine's blocks are hashed over one token more: the index matches them by a
// request's EAGLE hashes only, and a block goes out once the token after it is known.
TEST(Engine, EagleEventsMatchEagleHashes) {
  EngineConfig cfg;
  cfg.num_blocks = 64;
  cfg.block_size = 16;
  cfg.eagle = true;
  Engine e(cfg);
  kv::PrefixIndex index(16);
  ASSERT_TRUE(e.Submit({1, Prompt(0, 48), 4, "", "", 0, 0}));
  auto out = RunToIdle(e, &index);
  ASSERT_EQ(out[1].size(), 4u);
  EXPECT_TRUE(index.has_eagle_blocks());

  std::vector<uint32_t> tokens = Prompt(0, 48);
  std::vector<uint64_t> plain, eagle;
  kv::AppendLocalBlockHashes(tokens, 16, kv::kDefaultSeed, false, plain);
  std::vector<kv::Overlap> overlaps;
  index.Match(plain, overlaps);
  EXPECT_TRUE(overlaps.empty());
  kv::AppendLocalBlockHashes(tokens, 16, kv::kDefaultSeed, true, eagle);
  index.Match(eagle, overlaps);
  ASSERT_EQ(overlaps.size(), 1u);
  EXPECT_EQ(overlaps[0].total(), 2u);  // the prompt alone has (48 - 1) / 16 windows
  // The third block's window ends at the first generated token.
  tokens.push_back(out[1][0].token);
  eagle.clear();
  kv::AppendLocalBlockHashes(tokens, 16, kv::kDefaultSeed, true, eagle);
  index.Match(eagle, overlaps);
  ASSERT_EQ(overlaps.size(), 1u);
  EXPECT_EQ(overlaps[0].total(), 3u);
}

TEST(Engine, EvictionEventsKeepTheIndexExact) {
  EngineConfig cfg;
  cfg.num_blocks = 12;
  cfg.block_size = 4;
  Engine e(cfg);
  kv::PrefixIndex index(4);
  for (uint64_t id = 0; id < 30; ++id) {
    ASSERT_TRUE(e.Submit({id, Prompt(static_cast<uint32_t>(id % 7) * 100, 17), 3, "", "", 0, 0}));
    RunToIdle(e, &index);
  }
  EXPECT_EQ(index.Stats().entries, e.pool().cached());
  for (uint32_t start = 0; start < 700; start += 100) {
    const std::vector<uint32_t> tokens = Prompt(start, 16);
    std::vector<uint64_t> local, seq;
    kv::AppendLocalBlockHashes(tokens, 4, kv::kDefaultSeed, false, local);
    kv::SequenceHashes(local, seq);
    std::vector<kv::Overlap> overlaps;
    index.Match(local, overlaps);
    const uint32_t in_index = overlaps.empty() ? 0 : overlaps[0].total();
    EXPECT_EQ(in_index, e.pool().CachedPrefix(seq, 99)) << start;
  }
}

TEST(Engine, SimulatedTimeIsTheFormulaSum) {
  EngineConfig cfg;
  cfg.num_blocks = 100;
  cfg.block_size = 16;
  cfg.timing.speedup = 2;
  Engine e(cfg);
  ASSERT_TRUE(e.Submit({7, Prompt(5, 100), 3, "", "", 0, 0}));
  double total = 0;
  RunToIdle(e, nullptr, &total);
  auto prefill = [](double t) { return 4.209989e-07 * t * t + 1.518344e-02 * t + 16.50142; };
  auto decode = [](double p) { return std::max(1.0, -25.74 * p * p + 54.01 * p + 5.74); };
  // Step 1: prefill 100 tokens (7 blocks). Steps 2, 3: decode one token each; the KV of
  // tokens 101 and 102 still fits in block 7.
  const double expected = (prefill(100) + decode(7 / 100.0) + decode(7 / 100.0)) / 2;
  EXPECT_DOUBLE_EQ(total, expected);
}

TEST(Engine, PreemptsUnderPressureAndFinishesEverything) {
  EngineConfig cfg;
  cfg.num_blocks = 20;
  cfg.block_size = 4;
  cfg.max_num_batched_tokens = 16;
  Engine e(cfg);
  for (uint64_t id = 0; id < 6; ++id)
    ASSERT_TRUE(e.Submit({id, Prompt(id * 1000, 30), 20, "", "", 0, 0}));
  EXPECT_FALSE(e.Submit({99, Prompt(0, 100), 1, "", "", 0, 0}));  // can never fit
  auto out = RunToIdle(e, nullptr);
  ASSERT_EQ(out.size(), 6u);
  for (auto& [id, outputs] : out) {
    ASSERT_EQ(outputs.size(), 20u) << id;
    EXPECT_TRUE(outputs.front().first);
    EXPECT_TRUE(outputs.back().finished);
  }
  EXPECT_EQ(e.pool().used(), 0u);
}

}  // namespace
}  // namespace kvgate::mocker
