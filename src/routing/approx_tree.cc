#include "routing/approx_tree.h"

namespace kvgate::routing {

uint32_t ApproxTree::MatchLength(kv::WorkerKey worker,
                                 std::span<const uint64_t> sequence_hashes) const {
  auto it = trees_.find(worker);
  if (it == trees_.end()) return 0;
  uint32_t n = 0;
  for (uint64_t h : sequence_hashes) {
    if (!it->second.where.contains(h)) break;
    ++n;
  }
  return n;
}

void ApproxTree::Insert(kv::WorkerKey worker, std::span<const uint64_t> sequence_hashes) {
  Tree& tree = trees_[worker];
  // Leaves first, so a prefix's root ends up most recent and is evicted last.
  for (auto rit = sequence_hashes.rbegin(); rit != sequence_hashes.rend(); ++rit) {
    const uint64_t h = *rit;
    auto it = tree.where.find(h);
    if (it != tree.where.end()) {
      tree.lru.splice(tree.lru.begin(), tree.lru, it->second);
      continue;
    }
    tree.lru.push_front(h);
    tree.where.emplace(h, tree.lru.begin());
  }
  while (tree.lru.size() > capacity_) {
    tree.where.erase(tree.lru.back());
    tree.lru.pop_back();
  }
}

size_t ApproxTree::Size(kv::WorkerKey worker) const {
  auto it = trees_.find(worker);
  return it == trees_.end() ? 0 : it->second.lru.size();
}

}  // namespace kvgate::routing
