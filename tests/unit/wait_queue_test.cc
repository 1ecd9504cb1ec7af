// gateway/wait_queue: who starts next when workers come free.
#include "gateway/wait_queue.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace kvgate::gateway {
namespace {

// A queue whose "workers" are `free` slots; each started request takes one. (The queue's
// sweeper pumps too, from its own thread: the harness locks.)
struct Harness {
  std::mutex mu;
  int free = 0;
  std::vector<std::string> started, left;
  WaitQueue queue{WaitQueue::Options{7, std::chrono::milliseconds(60'000), 100}};

  bool Push(uint32_t tenant, int priority, uint64_t tokens, std::string name) {
    return queue.Push({tenant, priority, tokens,
                       [this, name] {
                         std::lock_guard lock(mu);
                         if (free == 0) return false;
                         --free;
                         started.push_back(name);
                         return true;
                       },
                       [this, name](WaitQueue::Exit) {
                         std::lock_guard lock(mu);
                         left.push_back(name);
                       },
                       nullptr});
  }
  void Release(int n) {
    {
      std::lock_guard lock(mu);
      free += n;
    }
    queue.Pump();
  }
  std::vector<std::string> Started() {
    std::lock_guard lock(mu);
    return started;
  }
  std::vector<std::string> Left() {
    std::lock_guard lock(mu);
    return left;
  }
};

TEST(WaitQueue, PriorityFirstThenTenantsTakeTurnsByTokens) {
  Harness h;
  // Tenant 0 sends four 100-token requests, tenant 1 two of 200, tenant 2 (priority 1) one.
  for (char i : {'0', '1', '2', '3'}) ASSERT_TRUE(h.Push(0, 0, 100, std::string{'a', i}));
  ASSERT_TRUE(h.Push(1, 0, 200, "b0"));
  ASSERT_TRUE(h.Push(1, 0, 200, "b1"));
  ASSERT_TRUE(h.Push(2, 1, 50, "vip"));
  EXPECT_FALSE(h.Push(2, 1, 50, "over"));  // 7 at most
  EXPECT_EQ(h.queue.size(), 7u);
  EXPECT_EQ(h.queue.WaitingByTenant(), (std::map<uint32_t, size_t>{{0, 4}, {1, 2}, {2, 1}}));
  for (int i = 0; i < 7; ++i) h.Release(1);
  // 100 tokens a turn: a takes one a turn, b one every other turn (its requests cost two
  // turns' worth): tokens, not requests, are shared. b came last to an empty queue of its
  // own, so its turn came first.
  EXPECT_EQ(h.Started(), (std::vector<std::string>{"vip", "a0", "b0", "a1", "a2", "b1", "a3"}));
  EXPECT_EQ(h.queue.size(), 0u);
  EXPECT_TRUE(h.queue.WaitingByTenant().empty());
}

TEST(WaitQueue, ASparseTenantGoesNextAndTheTurnItCutResumesWithWhatWasLeft) {
  Harness h;
  // 50-token requests, 100 tokens a turn: two requests a turn.
  for (char i : {'0', '1', '2'}) ASSERT_TRUE(h.Push(0, 0, 50, std::string{'a', i}));
  for (char i : {'0', '1', '2'}) ASSERT_TRUE(h.Push(2, 0, 50, std::string{'c', i}));
  h.Release(1);  // c (last to arrive with an empty queue) starts its turn: c0, 50 left
  ASSERT_TRUE(h.Push(1, 0, 50, "b0"));  // b had nothing waiting: it goes next
  for (int i = 0; i < 6; ++i) h.Release(1);
  // c's interrupted turn resumes with its 50 left (c1), not a fresh quantum.
  EXPECT_EQ(h.Started(), (std::vector<std::string>{"c0", "b0", "c1", "a0", "a1", "c2", "a2"}));
}

TEST(WaitQueue, ClientsThatLeftAreDroppedAndCloseAnswersTheRest) {
  Harness h;
  auto gone = std::make_shared<std::atomic<bool>>(false);
  ASSERT_TRUE(h.queue.Push({0, 0, 10, [] { return true; },
                            [&h](WaitQueue::Exit why) {
                              std::lock_guard lock(h.mu);
                              h.left.push_back(why == WaitQueue::Exit::kClientLeft ? "left"
                                                                                   : "other");
                            },
                            gone}));
  ASSERT_TRUE(h.Push(0, 0, 10, "kept"));
  *gone = true;
  h.Release(0);  // nothing free: the one that left goes anyway
  EXPECT_EQ(h.Left(), std::vector<std::string>{"left"});
  h.queue.Close();
  EXPECT_EQ(h.Left(), (std::vector<std::string>{"left", "kept"}));
  EXPECT_FALSE(h.Push(0, 0, 10, "late"));
}

}  // namespace
}  // namespace kvgate::gateway
