#include "routing/in_flight_prefixes.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace kvgate::routing {
namespace {

using Matches = std::vector<std::pair<kv::WorkerKey, uint32_t>>;

Matches Sorted(Matches m) {
  std::sort(m.begin(), m.end(),
            [](const auto& a, const auto& b) { return a.first.worker < b.first.worker; });
  return m;
}

TEST(InFlightPrefixes, EachWorkerMatchesItsLongestSharedPrefixUntilItsRequestsEnd) {
  InFlightPrefixes t;
  const kv::WorkerKey a{1, 0}, b{2, 0};
  t.Add(10, a, {1, 2, 3});
  t.Add(11, b, {1, 2, 7, 8});
  t.Add(12, a, {1, 2, 3, 4, 5});
  Matches m;
  t.Match(std::vector<uint64_t>{1, 2, 3, 4, 9}, m);
  EXPECT_EQ(Sorted(m), (Matches{{a, 4}, {b, 2}}));
  t.Match(std::vector<uint64_t>{9, 1, 2}, m);  // (chained hashes: 9 begins another prompt)
  EXPECT_TRUE(m.empty());
  t.Remove(12);  // a still has request 10's three blocks
  t.Match(std::vector<uint64_t>{1, 2, 3, 4, 9}, m);
  EXPECT_EQ(Sorted(m), (Matches{{a, 3}, {b, 2}}));
  t.Remove(10);
  t.Remove(10);  // (twice is harmless)
  t.Match(std::vector<uint64_t>{1, 2, 7, 8}, m);
  EXPECT_EQ(m, (Matches{{b, 4}}));
  t.RemoveWorker(b);
  t.Match(std::vector<uint64_t>{1, 2, 7, 8}, m);
  EXPECT_TRUE(m.empty());
  EXPECT_EQ(t.requests(), 0u);
}

}  // namespace
}  // namespace kvgate::routing
