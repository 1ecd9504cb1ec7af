// gateway/tenants: keys to tenants, per-minute buckets, concurrency, settling.
#include "gateway/tenants.h"

#include <gtest/gtest.h>

namespace kvgate::gateway {
namespace {

using namespace std::chrono_literals;
using routing::FairShare;

// a: 2 requests a minute; b: 600 tokens a minute, one request at a time.
std::vector<TenantConfig> Two() {
  return {TenantConfig{"a", {"sk-a1", "sk-a2"}, "", 0, TenantLimits{2, 0, 0}},
          TenantConfig{"b", {"sk-b"}, "", 0, TenantLimits{0, 600, 1}}};
}

TEST(Tenants, KeysNameTheirTenant) {
  Tenants t(Two());
  EXPECT_TRUE(t.keyed());
  EXPECT_EQ(t.Find("Bearer sk-a2"), 0u);
  EXPECT_EQ(t.Find("bearer  sk-b"), 1u);
  EXPECT_EQ(t.Find("Bearer sk-b "), std::nullopt);
  EXPECT_EQ(t.Find("Bearer sk-"), std::nullopt);
  EXPECT_EQ(t.Find(""), std::nullopt);
  Tenants open({});
  EXPECT_FALSE(open.keyed());
  EXPECT_EQ(open.Find(""), 0u);
  EXPECT_EQ(open.config(0).name, "default");
  for (int i = 0; i < 1000; ++i) EXPECT_FALSE(open.Begin(0));  // no limits
}

TEST(Tenants, RequestsPerMinuteRefillContinuously) {
  Tenants t(Two());
  const auto t0 = Tenants::Clock::now();
  EXPECT_FALSE(t.Begin(0, t0));
  EXPECT_FALSE(t.Begin(0, t0));
  auto refusal = t.Begin(0, t0);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->why, Rejection::kRequests);
  EXPECT_EQ(refusal->retry_after_s, 30u);  // 2 a minute: one more in 30 s
  refusal = t.Begin(0, t0 + 20s);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->retry_after_s, 10u);
  EXPECT_FALSE(t.Begin(0, t0 + 31s));
  EXPECT_EQ(t.counters(0).rejected[static_cast<size_t>(Rejection::kRequests)], 2u);
}

TEST(Tenants, TokensAreChargedUpFrontAndSettledToWhatWasUsed) {
  Tenants t(Two());
  const auto t0 = Tenants::Clock::now();
  ASSERT_FALSE(t.Begin(1, t0));
  ASSERT_FALSE(t.Charge(1, 500, t0));  // 100 left
  auto busy = t.Begin(1, t0);          // one at a time
  ASSERT_TRUE(busy);
  EXPECT_EQ(busy->why, Rejection::kConcurrency);
  t.End(1, 500, 200);  // it used 200: 300 come back, 400 left
  ASSERT_FALSE(t.Begin(1, t0));
  auto refusal = t.Charge(1, 500, t0);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->why, Rejection::kTokens);
  EXPECT_EQ(refusal->retry_after_s, 10u);  // 100 missing at 600 a minute
  EXPECT_EQ(t.counters(1).in_flight, 0u);  // a refused charge ends the request
  ASSERT_FALSE(t.Begin(1, t0 + 10s));
  EXPECT_FALSE(t.Charge(1, 500, t0 + 10s));
  // Larger than a whole minute's budget: allowed once the bucket is full.
  t.End(1, 500, 500);
  ASSERT_FALSE(t.Begin(1, t0 + 70s));
  EXPECT_FALSE(t.Charge(1, 5000, t0 + 70s));
  EXPECT_EQ(t.counters(1).admitted, 3u);
}

TEST(Tenants, FairShareOfRequestSlotsCountsTenantsWithRequestsInTheGateway) {
  Tenants t(Two());
  ASSERT_FALSE(t.Begin(0));
  EXPECT_EQ(t.ShareOf(0, 8), FairShare::kNotShared);  // alone: nothing to share
  ASSERT_FALSE(t.Begin(1));
  EXPECT_EQ(t.ShareOf(1, 8), FairShare::kWithin);     // 1 of 8 slots, 2 tenants: share 4
  EXPECT_EQ(t.ShareOf(1, 0), FairShare::kNotShared);  // no slots: no request cap to share
  ASSERT_FALSE(t.Begin(0));
  EXPECT_EQ(t.ShareOf(0, 4), FairShare::kWithin);  // 2 (with the one starting) of 4: its share
  EXPECT_EQ(t.ShareOf(0, 3), FairShare::kOver);
  EXPECT_EQ(t.ShareOf(1, 1), FairShare::kNotShared);  // past 1 of 1, but its only request
}

// Two replicas of one gateway, each reporting to the other (as cluster::LoadSync does).
struct Replicas {
  std::vector<TenantConfig> config = {TenantConfig{"t", {"sk-t"}, "", 0, TenantLimits{5, 1000, 2}}};
  Tenants a{config}, b{config};
  void Sync() {
    b.ApplyPeerUsage(1, a.TakeLocalUsage(false));
    a.ApplyPeerUsage(2, b.TakeLocalUsage(false));
  }
};

TEST(TenantsAcrossReplicas, RequestsPerMinuteHoldFleetWide) {
  Replicas r;
  for (int i = 0; i < 4; ++i) {
    ASSERT_FALSE(r.a.Begin(0));
    r.a.End(0, 0, 0);
  }
  r.Sync();
  ASSERT_FALSE(r.b.Begin(0));  // the fifth of the minute
  r.b.End(0, 0, 0);
  auto refusal = r.b.Begin(0);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->why, Rejection::kRequests);
  r.Sync();
  refusal = r.a.Begin(0);
  ASSERT_TRUE(refusal);  // and at A, once B's use reached it
  EXPECT_EQ(refusal->why, Rejection::kRequests);
}

TEST(TenantsAcrossReplicas, TokensCountWhereverTheyWereChargedAndSettled) {
  Replicas r;
  ASSERT_FALSE(r.a.Begin(0));
  ASSERT_FALSE(r.a.Charge(0, 800));
  r.Sync();
  ASSERT_FALSE(r.b.Begin(0));
  auto refusal = r.b.Charge(0, 300);  // 200 left of the fleet's 1000
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->why, Rejection::kTokens);
  r.a.End(0, 800, 100);  // it used 100: 700 come back, at B too
  r.Sync();
  ASSERT_FALSE(r.b.Begin(0));
  EXPECT_FALSE(r.b.Charge(0, 300));
}

TEST(TenantsAcrossReplicas, ConcurrencyCountsPeersUntilTheyEndOrAreForgotten) {
  Replicas r;
  ASSERT_FALSE(r.a.Begin(0));
  ASSERT_FALSE(r.a.Begin(0));
  r.Sync();
  auto refusal = r.b.Begin(0);  // 2 at once, both at A
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->why, Rejection::kConcurrency);
  r.a.End(0, 0, 0);
  r.Sync();
  EXPECT_FALSE(r.b.Begin(0));  // one ended at A: room for one
  r.b.End(0, 0, 0);
  // A full report repeats what is in flight even when nothing changed (a late peer learns it).
  EXPECT_TRUE(r.a.TakeLocalUsage(false).empty());
  EXPECT_EQ(r.a.TakeLocalUsage(true), (std::vector<cluster::TenantUsage>{{"t", 0, 0, 1}}));
  ASSERT_FALSE(r.a.Begin(0));
  r.Sync();
  ASSERT_TRUE(r.b.Begin(0));
  r.b.ForgetPeer(1);  // A fell silent: its requests no longer count here
  EXPECT_FALSE(r.b.Begin(0));
}

}  // namespace
}  // namespace kvgate::gateway
