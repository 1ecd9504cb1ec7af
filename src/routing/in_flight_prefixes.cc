#include "routing/in_flight_prefixes.h"

#include <algorithm>

namespace kvgate::routing {

PrefixMarks PrefixMarks::Of(std::span<const uint64_t> sequence_hashes) {
  PrefixMarks m;
  m.blocks = static_cast<uint32_t>(sequence_hashes.size());
  ForEachPosition(m.blocks, [&](uint32_t p) { m.hashes.push_back(sequence_hashes[p]); });
  return m;
}

bool PrefixMarks::valid() const {
  size_t positions = 0;
  ForEachPosition(blocks, [&](uint32_t) { ++positions; });
  return positions == hashes.size();
}

void InFlightPrefixes::Add(uint64_t request, kv::WorkerKey worker, PrefixMarks marks) {
  if (marks.blocks == 0 || !marks.valid()) return;
  std::lock_guard lock(mu_);
  auto [it, added] = requests_.try_emplace(request, Request{worker, {}});
  if (!added) Release(request, it->second);  // (an id is never reused; if it were, the last wins)
  for (uint64_t h : marks.hashes) by_mark_[h].push_back(request);
  it->second = Request{worker, std::move(marks)};
}

void InFlightPrefixes::Release(uint64_t id, const Request& r) {
  for (uint64_t h : r.marks.hashes) {
    auto found = by_mark_.find(h);
    if (found == by_mark_.end()) continue;
    auto& ids = found->second;
    if (auto it = std::find(ids.begin(), ids.end(), id); it != ids.end()) ids.erase(it);
    if (ids.empty()) by_mark_.erase(found);
  }
}

void InFlightPrefixes::Remove(uint64_t request) {
  std::lock_guard lock(mu_);
  auto it = requests_.find(request);
  if (it == requests_.end()) return;
  Release(request, it->second);
  requests_.erase(it);
}

void InFlightPrefixes::RemoveWorker(kv::WorkerKey worker) {
  std::lock_guard lock(mu_);
  for (auto it = requests_.begin(); it != requests_.end();) {
    if (it->second.worker == worker) {
      Release(it->first, it->second);
      requests_.erase(it++);
    } else {
      ++it;
    }
  }
}

void InFlightPrefixes::Match(std::span<const uint64_t> sequence_hashes,
                             std::vector<std::pair<kv::WorkerKey, uint32_t>>& out) const {
  out.clear();
  const auto blocks = static_cast<uint32_t>(sequence_hashes.size());
  std::lock_guard lock(mu_);
  if (requests_.empty()) return;
  // Requests sharing a mark with this prompt, and the blocks that shows they share. A request
  // that shares block p shares every mark before it, so the first position with no match
  // ends the search (usually at block 0).
  absl::InlinedVector<std::pair<uint64_t, uint32_t>, 4> shared;
  bool searching = true;
  PrefixMarks::ForEachPosition(blocks, [&](uint32_t p) {
    if (!searching) return;
    auto found = by_mark_.find(sequence_hashes[p]);
    if (found == by_mark_.end()) {
      searching = false;
      return;
    }
    for (uint64_t id : found->second) {
      auto it =
          std::find_if(shared.begin(), shared.end(), [&](const auto& s) { return s.first == id; });
      if (it == shared.end()) {
        shared.emplace_back(id, p + 1);
      } else {
        it->second = p + 1;
      }
    }
  });
  for (auto [id, blocks_shared] : shared) {
    const Request& r = requests_.at(id);
    // This prompt holds that one whole (it extends it): its last mark says so.
    const uint32_t all = r.marks.blocks;
    if (all > blocks_shared && all <= blocks && sequence_hashes[all - 1] == r.marks.hashes.back()) {
      blocks_shared = all;
    }
    auto it =
        std::find_if(out.begin(), out.end(), [&](const auto& o) { return o.first == r.worker; });
    if (it == out.end()) {
      out.emplace_back(r.worker, blocks_shared);
    } else {
      it->second = std::max(it->second, blocks_shared);
    }
  }
}

size_t InFlightPrefixes::requests() const {
  std::lock_guard lock(mu_);
  return requests_.size();
}

}  // namespace kvgate::routing
