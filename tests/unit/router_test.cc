#include "routing/router.h"

#include <gtest/gtest.h>

#include <map>

#include "kv/block_hash.h"
#include "wire/decode.h"
#include "wire/encode.h"

namespace kvgate::routing {
namespace {

constexpr uint32_t kBs = 4;

struct Fixture {
  kv::PrefixIndex index{kBs};
  std::vector<uint32_t> tokens;
  std::vector<uint64_t> local;

  explicit Fixture(size_t blocks) {
    for (uint32_t i = 0; i < blocks * kBs; ++i) tokens.push_back(1000 + i);
    kv::AppendLocalBlockHashes(tokens, kBs, kv::kDefaultSeed, false, local);
  }
  // `worker` caches the first `blocks` blocks of the prompt on `tier`; an EAGLE worker's
  // blocks each cover one token more (sent as bigram pairs).
  void Cache(uint32_t worker, size_t blocks, wire::Tier tier = wire::Tier::kDevice,
             bool eagle = false) {
    wire::StoredBlocks s;
    for (size_t i = 0; i < blocks; ++i) s.block_hashes.push_back(worker * 1000 + i);
    s.token_ids.assign(tokens.begin(), tokens.begin() + blocks * kBs + (eagle ? 1 : 0));
    s.block_size = kBs;
    s.medium = tier;
    s.bigram = eagle;
    const std::vector<wire::OutEvent> events = {s};
    wire::DecodedBatch batch;
    ASSERT_TRUE(wire::DecodeEventBatch(wire::EncodeEventBatch(0, 0, events, {}), batch).ok());
    kv::ApplyStats stats;
    index.ApplyBatch({worker, 0}, batch, stats);
  }
};

RouterConfig Config(Policy policy, double temperature = 0) {
  RouterConfig c;
  c.policy = policy;
  c.block_size = kBs;
  c.kv.prefill_weight = 1;  // the hand-computed costs below use unit weights
  c.kv.decode_weight = 1;
  c.kv.request_weight = 1;
  c.kv.reuse_weight = 0;  // the plain cost; the reuse bonus has its own test
  c.kv.temperature = temperature;
  c.seed = 99;
  return c;
}

TEST(Router, PrefixWinsUnderEqualLoad) {
  Fixture f(8);
  f.Cache(2, 6);
  Router r(Config(Policy::kKv), &f.index);
  for (uint32_t w = 0; w < 4; ++w) r.AddWorker({w, 0});
  auto d = r.Route({f.local, static_cast<uint32_t>(f.tokens.size()), {}, {}});
  ASSERT_TRUE(d);
  EXPECT_EQ(d->worker.worker, 2u);
  EXPECT_EQ(d->cached_blocks, 6u);
  // cost = (0 + 32)/4 - 6 = 2 prefill blocks, no decode blocks or requests yet.
  EXPECT_DOUBLE_EQ(d->cost, 2.0);
  // The request is in flight there: 8 tokens to prefill, 8 blocks, one request.
  EXPECT_EQ(r.Load({2, 0}).prefill_tokens, 8u);
  EXPECT_EQ(r.Load({2, 0}).decode_blocks, 8u);
  EXPECT_EQ(r.Load({2, 0}).requests, 1u);
  r.OnFirstToken(d->id);
  EXPECT_EQ(r.Load({2, 0}).prefill_tokens, 0u);
  r.OnFinished(d->id);
  EXPECT_EQ(r.Load({2, 0}).requests, 0u);
  EXPECT_EQ(r.Load({2, 0}).decode_blocks, 0u);
}

// An EAGLE worker's blocks match only the request's EAGLE hashes, which the router asks for
// once such a worker has stored blocks; a worker's overlap is the longer of the two matches.
TEST(Router, EagleBlocksMatchTheRequestsEagleHashes) {
  Fixture f(8);
  f.Cache(1, 3);
  Router r(Config(Policy::kKv), &f.index);
  r.AddWorker({1, 0});
  r.AddWorker({2, 0});
  EXPECT_FALSE(r.wants_eagle_hashes());
  f.Cache(2, 6, wire::Tier::kDevice, /*eagle=*/true);
  EXPECT_TRUE(r.wants_eagle_hashes());
  std::vector<uint64_t> eagle;
  kv::AppendLocalBlockHashes(f.tokens, kBs, kv::kDefaultSeed, true, eagle);
  ASSERT_EQ(eagle.size(), 7u);  // (32 - 1) / 4 windows of 5 tokens

  auto blind = r.Route({f.local, 32, {}, {}});  // without them worker 2 looks empty
  ASSERT_TRUE(blind);
  EXPECT_EQ(blind->worker.worker, 1u);
  EXPECT_EQ(blind->cached_blocks, 3u);
  r.OnFirstToken(blind->id);
  r.OnFinished(blind->id);

  auto d = r.Route({f.local, 32, {}, eagle});
  ASSERT_TRUE(d);
  EXPECT_EQ(d->worker.worker, 2u);
  EXPECT_EQ(d->cached_blocks, 6u);
  r.OnFirstToken(d->id);
  r.OnFinished(d->id);

  // Worker 1's ordinary blocks still count when the request carries both.
  f.Cache(1, 8);
  auto both = r.Route({f.local, 32, {}, eagle});
  ASSERT_TRUE(both);
  EXPECT_EQ(both->worker.worker, 1u);
  EXPECT_EQ(both->cached_blocks, 8u);
}

TEST(Router, HostAndDiskCountLessThanDevice) {
  Fixture f(8);
  f.Cache(0, 8, wire::Tier::kDisk);  // credit 2
  f.Cache(1, 4, wire::Tier::kHost);  // credit 3
  Router r(Config(Policy::kKv), &f.index);
  r.AddWorker({0, 0});
  r.AddWorker({1, 0});
  auto d = r.Route({f.local, 32, {}, {}});
  EXPECT_EQ(d->worker.worker, 1u);
  EXPECT_DOUBLE_EQ(d->cost, 8 - 3.0);
}

TEST(Router, LoadWinsWhenTheCachedWorkerIsSaturated) {
  Fixture f(8);
  f.Cache(1, 8);
  Router r(Config(Policy::kKv), &f.index);
  r.AddWorker({0, 0});
  r.AddWorker({1, 0});
  // Pile unrelated long prompts onto worker 1 (by excluding worker 0).
  const kv::WorkerKey exclude0[] = {{0, 0}};
  for (int i = 0; i < 10; ++i) {
    auto d = r.Route({{}, 400, exclude0, {}});
    ASSERT_EQ(d->worker.worker, 1u);
  }
  auto d = r.Route({f.local, 32, {}, {}});
  EXPECT_EQ(d->worker.worker, 0u);
}

// The reuse bonus: a worker holding the prefix keeps the request while its queue costs less
// than the prefill plus the bonus the cached blocks are worth; without it, the idle worker
// wins as soon as the queue outweighs the prefill alone.
TEST(Router, TheReuseWeightKeepsARequestWithItsPrefixUnderSomeQueue) {
  Fixture f(8);
  f.Cache(1, 8);
  auto route_after_queue = [&](double reuse_weight) {
    RouterConfig config = Config(Policy::kKv);
    config.kv.request_weight = 0;
    config.kv.decode_weight = 0;
    config.kv.reuse_weight = reuse_weight;
    Router r(config, &f.index);
    r.AddWorker({0, 0});
    r.AddWorker({1, 0});
    const kv::WorkerKey exclude0[] = {{0, 0}};
    auto queued = r.Route({{}, 40, exclude0, {}});  // 10 blocks to prefill on worker 1
    EXPECT_EQ(queued->worker.worker, 1u);
    auto d = r.Route({f.local, 32, {}, {}});
    return std::pair(d->worker.worker, d->cost);
  };
  // Worker 0: 8 blocks to prefill. Worker 1: 10 + 8 - 8 = 10, less the bonus on 8 blocks.
  EXPECT_EQ(route_after_queue(0), std::pair(0u, 8.0));
  EXPECT_EQ(route_after_queue(1), std::pair(1u, 10 - 8.0));
}

// A request's blocks reach the index only once its engine computed them; a longer prompt
// sharing its prefix (the next turn) that comes before then still finds the worker the
// first went to, until the first request ends.
TEST(Router, APrefixInFlightCountsAsCachedWhereItWasSentUntilItsRequestEnds) {
  Fixture f(8);
  RouterConfig config;  // the default weights
  config.block_size = kBs;
  Router r(config, &f.index);
  for (uint32_t w = 0; w < 3; ++w) r.AddWorker({w, 0});
  const std::span<const uint64_t> first_turn(f.local.data(), 6);
  auto first = r.Route({first_turn, 6 * kBs, {}, {}});
  ASSERT_TRUE(first);
  EXPECT_EQ(first->cached_blocks, 0u);  // (the prediction stays what the index says)
  r.OnFirstToken(first->id);            // prefilled, decoding; no event has come yet
  // Its worker is the busiest now, yet the next turn goes there.
  auto next = r.Route({f.local, 8 * kBs, {}, {}});
  ASSERT_TRUE(next);
  EXPECT_EQ(next->worker, first->worker);
  const RouteExplanation e = r.Explain({f.local, 8 * kBs, {}, {}});
  for (const Candidate& c : e.candidates) {
    EXPECT_EQ(c.in_flight_blocks, c.worker == first->worker ? 8u : 0u);  // next's, longer
  }
  r.OnFinished(next->id);
  r.OnFinished(first->id);
  // Both ended with nothing in the index (say the engine evicted them): load decides again.
  auto later = r.Route({f.local, 8 * kBs, {}, {}});
  ASSERT_TRUE(later);
  const RouteExplanation after = r.Explain({f.local, 8 * kBs, {}, {}});
  for (const Candidate& c : after.candidates) {
    EXPECT_EQ(c.in_flight_blocks, c.worker == later->worker ? 8u : 0u);
  }
}

TEST(Router, BusyWorkersTakeNothingButATenantWithinItsFairShareSkipsTheRequestCap) {
  Fixture f(8);
  RouterConfig c = Config(Policy::kKv);
  c.worker_max_requests = 2;
  c.worker_max_prefill_tokens = 1000;
  Router r(c, &f.index);
  r.AddWorker({0, 0});
  r.AddWorker({1, 0});
  EXPECT_EQ(r.RequestSlots(), 4u);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(r.Route({{}, 10, {}, {}}));
  bool all_busy = false;
  EXPECT_FALSE(r.Route({{}, 10, {}, {}}, &all_busy));  // two each: all busy
  EXPECT_TRUE(all_busy);
  RouteRequest within{{}, 10, {}, {}};
  within.fair_share = FairShare::kWithin;
  EXPECT_TRUE(r.Route(within));  // past the request cap ...
  within.prompt_tokens = 2000;
  ASSERT_TRUE(r.Route(within));  // (a worker with no prefill backlog takes any prompt)
  auto d = r.Route(within);
  ASSERT_TRUE(d);
  within.prompt_tokens = 10;
  EXPECT_FALSE(r.Route(within, &all_busy));  // ... but not past the prefill-token cap
  EXPECT_TRUE(all_busy);
}

TEST(Router, ATenantOverItsShareLeavesTheLastWorkerWithoutPrefillToTheOthers) {
  Fixture f(8);
  RouterConfig c = Config(Policy::kKv);
  c.worker_max_requests = 8;
  c.worker_max_prefill_tokens = 1000;
  Router r(c, &f.index);
  for (uint32_t w = 0; w < 3; ++w) r.AddWorker({w, 0});
  RouteRequest over{{}, 1000, {}, {}};  // each fills a worker's prefill cap
  over.fair_share = FairShare::kOver;
  auto a = r.Route(over);
  auto b = r.Route(over);
  ASSERT_TRUE(a && b);
  bool all_busy = false;
  EXPECT_FALSE(r.Route(over, &all_busy));  // one worker has no prefill: kept
  EXPECT_TRUE(all_busy);
  const RouteExplanation e = r.Explain(over);
  ASSERT_EQ(e.busy.size(), 3u);
  EXPECT_EQ(std::count_if(e.busy.begin(), e.busy.end(),
                          [](const Candidate& c) { return c.load.prefill_tokens == 0; }),
            1);
  for (FairShare share : {FairShare::kWithin, FairShare::kNotShared}) {
    RouteRequest other = over;
    other.fair_share = share;
    EXPECT_EQ(r.Explain(other).candidates.size(), 1u);  // the others may take it
  }
  r.OnFirstToken(a->id);  // a's worker has no prefill left: two free, one may go
  auto d = r.Route(over);
  ASSERT_TRUE(d);
  EXPECT_FALSE(r.Route(over));
}

TEST(Router, TiesPreferFewerCachedBlocksThenSpreadRandomly) {
  Fixture f(2);
  Router r(Config(Policy::kKv), &f.index);
  for (uint32_t w = 0; w < 4; ++w) r.AddWorker({w, 0});
  std::map<uint32_t, int> seen;
  for (int i = 0; i < 400; ++i) {
    auto d = r.Route({{}, 0, {}, {}});  // zero-cost requests: every worker ties
    ++seen[d->worker.worker];
    r.OnFinished(d->id);
  }
  EXPECT_EQ(seen.size(), 4u);
  for (auto& [w, n] : seen) EXPECT_GT(n, 50) << w;
}

TEST(Router, TemperatureSpreadsTemperatureZeroDoesNot) {
  Fixture f(8);
  f.Cache(3, 8);
  for (double t : {0.0, 1.0}) {
    Router r(Config(Policy::kKv, t), &f.index);
    for (uint32_t w = 0; w < 4; ++w) r.AddWorker({w, 0});
    std::map<uint32_t, int> seen;
    for (int i = 0; i < 200; ++i) {
      auto d = r.Route({f.local, 32, {}, {}});
      ++seen[d->worker.worker];
      r.OnFinished(d->id);
    }
    if (t == 0) {
      EXPECT_EQ(seen.size(), 1u);
      EXPECT_EQ(seen[3], 200);
    } else {
      EXPECT_GT(seen.size(), 1u);
      EXPECT_GT(seen[3], 200 / 4);  // the cheapest is still the most likely
    }
  }
}

TEST(Router, BaselinesAndWorkerLifecycle) {
  Router rr(Config(Policy::kRoundRobin), nullptr);
  for (uint32_t w = 0; w < 3; ++w) rr.AddWorker({w, 0});
  EXPECT_EQ(rr.Route({})->worker.worker, 0u);
  EXPECT_EQ(rr.Route({})->worker.worker, 1u);
  EXPECT_EQ(rr.Route({})->worker.worker, 2u);
  rr.DrainWorker({1, 0});
  for (int i = 0; i < 6; ++i) EXPECT_NE(rr.Route({})->worker.worker, 1u);
  rr.RemoveWorker({0, 0});
  rr.RemoveWorker({2, 0});
  EXPECT_FALSE(rr.Route({}).has_value());
  rr.AddWorker({1, 0});  // un-drain
  EXPECT_EQ(rr.Route({})->worker.worker, 1u);

  Router ll(Config(Policy::kLeastLoaded), nullptr);
  ll.AddWorker({0, 0});
  ll.AddWorker({1, 0});
  const auto first = ll.Route({{}, 10, {}, {}});
  const auto second = ll.Route({{}, 10, {}, {}});
  EXPECT_NE(first->worker, second->worker);
  ll.OnFinished(first->id);
  EXPECT_EQ(ll.Route({{}, 10, {}, {}})->worker, first->worker);
}

TEST(Router, ApproxFollowsItsOwnHistoryUntilImbalanced) {
  Fixture f(8);
  RouterConfig c = Config(Policy::kApprox);
  Router r(c, nullptr);
  for (uint32_t w = 0; w < 3; ++w) r.AddWorker({w, 0});
  const auto first = r.Route({f.local, 32, {}, {}});
  // Same prompt again: full approximate match -> same worker.
  for (int i = 0; i < 20; ++i) EXPECT_EQ(r.Route({f.local, 32, {}, {}})->worker, first->worker);
  // 21 in flight there vs 0 elsewhere is not yet imbalanced (needs > 32); push further.
  for (int i = 0; i < 12; ++i) r.Route({f.local, 32, {}, {}});
  EXPECT_NE(r.Route({f.local, 32, {}, {}})->worker, first->worker);
}

TEST(Router, ApproxRemembersEachPromptApartFromTheOthers) {
  // Three prompts in turn, each finished before the next: every repeat goes back to the
  // worker its prompt went to first (what each request is matched on is its own prefix).
  RouterConfig c = Config(Policy::kApprox);
  Router r(c, nullptr);
  for (uint32_t w = 0; w < 3; ++w) r.AddWorker({w, 0});
  std::vector<std::vector<uint64_t>> prompts;
  for (uint64_t p = 0; p < 3; ++p) {
    std::vector<uint64_t> local;
    for (uint64_t b = 0; b < 4; ++b) local.push_back(p * 100 + b + 1);
    prompts.push_back(local);
  }
  std::vector<kv::WorkerKey> first;
  for (const auto& p : prompts) {
    const auto d = r.Route({p, 64, {}, {}});
    first.push_back(d->worker);
    r.OnFinished(d->id);
  }
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      const auto d = r.Route({prompts[i], 64, {}, {}});
      EXPECT_EQ(d->worker, first[i]) << "prompt " << i << " round " << round;
      r.OnFinished(d->id);
    }
  }
}

}  // namespace
}  // namespace kvgate::routing
