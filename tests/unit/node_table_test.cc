#include "kv/node_table.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace kvgate::kv {
namespace {

// Random attach/detach against a map of (key -> slot -> tiers), with enough keys to force
// growth, long probe runs and backward-shift deletions, and enough slots for overflow lists.
TEST(NodeTable, RandomizedAgainstMap) {
  std::mt19937_64 rng(3);
  NodeTable table;
  std::map<uint64_t, std::map<uint32_t, uint32_t>> model;
  std::vector<uint64_t> keys;
  for (int i = 0; i < 5000; ++i) keys.push_back(i == 0 ? 0 : rng());  // key 0 is valid too
  for (int op = 0; op < 300000; ++op) {
    const uint64_t key = keys[rng() % keys.size()];
    const uint32_t slot = static_cast<uint32_t>(rng() % 6);
    const uint32_t bit = 1u << (rng() % 4);
    if (rng() % 2) {
      table.Attach(key, slot, bit);
      model[key][slot] |= bit;
    } else {
      const uint32_t mask = rng() % 3 == 0 ? 0xF : bit;
      const uint32_t left = table.Detach(key, slot, mask);
      auto k = model.find(key);
      uint32_t want = 0;
      if (k != model.end() && k->second.contains(slot)) {
        want = k->second[slot] & ~mask;
        if (want == 0)
          k->second.erase(slot);
        else
          k->second[slot] = want;
        if (k->second.empty()) model.erase(k);
      }
      ASSERT_EQ(left, want) << "op " << op;
    }
    if (op % 997 == 0) {
      size_t holders = 0;
      for (uint64_t k : keys) {
        std::vector<uint32_t> want;
        auto it = model.find(k);
        if (it != model.end()) {
          for (auto [s, tiers] : it->second) want.push_back((s << NodeTable::kTierBits) | tiers);
        }
        holders += want.size();
        auto got = table.Find(k);
        ASSERT_EQ(std::vector<uint32_t>(got.begin(), got.end()), want) << "op " << op;
      }
      ASSERT_EQ(table.size(), model.size());
      ASSERT_EQ(table.holders(), holders);
    }
  }
}

}  // namespace
}  // namespace kvgate::kv
