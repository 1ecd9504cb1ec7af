#include "replay/capacity.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvgate::replay {
namespace {

// A workload that meets its objective up to `limit` exactly.
struct Threshold {
  double limit;
  std::vector<double> tried;
  bool operator()(double speed) {
    tried.push_back(speed);
    return speed <= limit;
  }
};

TEST(Capacity, BracketsUpwardThenBisectsToThePrecision) {
  Threshold w{13.7, {}};
  CapacitySearch search;
  search.start = 1;
  const Capacity c = FindCapacity(std::ref(w), search);
  EXPECT_LE(c.speed, 13.7);
  EXPECT_GT(c.exceeded_at, 13.7);
  EXPECT_LE(c.exceeded_at, c.speed * (1 + search.precision));
  EXPECT_EQ(c.runs, static_cast<int>(w.tried.size()));
  // 1, 2, 4, 8, 16 bracket it; bisection on a log scale then needs about log2(ln 2 / 0.02).
  EXPECT_EQ(std::vector<double>(w.tried.begin(), w.tried.begin() + 5),
            (std::vector<double>{1, 2, 4, 8, 16}));
  EXPECT_LE(c.runs, 5 + 6);
}

TEST(Capacity, BracketsDownwardWhenTheStartIsTooFast) {
  Threshold w{0.3, {}};
  CapacitySearch search;
  search.start = 4;
  const Capacity c = FindCapacity(std::ref(w), search);
  EXPECT_LE(c.speed, 0.3);
  EXPECT_GT(c.exceeded_at, 0.3);
  EXPECT_LE(c.exceeded_at, c.speed * (1 + search.precision));
}

TEST(Capacity, ReportsTheLimitsWhenNothingOrEverythingMeetsTheObjective) {
  CapacitySearch search;
  search.min_speed = 0.25;
  search.max_speed = 8;
  Threshold never{0.1, {}};
  Capacity c = FindCapacity(std::ref(never), search);
  EXPECT_EQ(c.speed, 0);
  EXPECT_EQ(c.exceeded_at, 0.25);
  Threshold always{100, {}};
  c = FindCapacity(std::ref(always), search);
  EXPECT_EQ(c.speed, 8);
  EXPECT_EQ(c.exceeded_at, 0);
}

}  // namespace
}  // namespace kvgate::replay
