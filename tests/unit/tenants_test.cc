// gateway/tenants: keys to tenants, per-minute buckets, concurrency, settling.
#include "gateway/tenants.h"

#include <gtest/gtest.h>

namespace kvgate::gateway {
namespace {

using namespace std::chrono_literals;

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

}  // namespace
}  // namespace kvgate::gateway
