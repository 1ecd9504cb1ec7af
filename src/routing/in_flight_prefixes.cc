#include "routing/in_flight_prefixes.h"

#include <algorithm>

namespace kvgate::routing {

void InFlightPrefixes::Add(uint64_t request, kv::WorkerKey worker,
                           std::vector<uint64_t> sequence_hashes) {
  std::lock_guard lock(mu_);
  for (uint64_t h : sequence_hashes) {
    auto& holders = blocks_[h];
    auto it = std::find_if(holders.begin(), holders.end(),
                           [&](const Holder& x) { return x.worker == worker; });
    if (it == holders.end()) {
      holders.push_back({worker, 1});
    } else {
      ++it->requests;
    }
  }
  auto [it, added] = requests_.try_emplace(request, Request{worker, {}});
  if (!added) Release(it->second);  // (an id is never reused; if it were, the last wins)
  it->second = Request{worker, std::move(sequence_hashes)};
}

void InFlightPrefixes::Release(const Request& r) {
  for (uint64_t h : r.blocks) {
    auto found = blocks_.find(h);
    if (found == blocks_.end()) continue;
    auto& holders = found->second;
    auto it = std::find_if(holders.begin(), holders.end(),
                           [&](const Holder& x) { return x.worker == r.worker; });
    if (it != holders.end() && --it->requests == 0) holders.erase(it);
    if (holders.empty()) blocks_.erase(found);
  }
}

void InFlightPrefixes::Remove(uint64_t request) {
  std::lock_guard lock(mu_);
  auto it = requests_.find(request);
  if (it == requests_.end()) return;
  Release(it->second);
  requests_.erase(it);
}

void InFlightPrefixes::RemoveWorker(kv::WorkerKey worker) {
  std::lock_guard lock(mu_);
  for (auto it = requests_.begin(); it != requests_.end();) {
    if (it->second.worker == worker) {
      Release(it->second);
      requests_.erase(it++);
    } else {
      ++it;
    }
  }
}

void InFlightPrefixes::Match(std::span<const uint64_t> sequence_hashes,
                             std::vector<std::pair<kv::WorkerKey, uint32_t>>& out) const {
  out.clear();
  if (sequence_hashes.empty()) return;
  std::lock_guard lock(mu_);
  auto first = blocks_.find(sequence_hashes[0]);
  if (first == blocks_.end()) return;
  std::vector<kv::WorkerKey> alive;  // workers matching every block so far
  for (const Holder& h : first->second) alive.push_back(h.worker);
  for (size_t i = 1; i < sequence_hashes.size() && !alive.empty(); ++i) {
    auto found = blocks_.find(sequence_hashes[i]);
    std::erase_if(alive, [&](kv::WorkerKey w) {
      const bool holds =
          found != blocks_.end() && std::any_of(found->second.begin(), found->second.end(),
                                                [&](const Holder& x) { return x.worker == w; });
      if (!holds) out.emplace_back(w, static_cast<uint32_t>(i));
      return !holds;
    });
  }
  for (kv::WorkerKey w : alive) {
    out.emplace_back(w, static_cast<uint32_t>(sequence_hashes.size()));
  }
}

size_t InFlightPrefixes::requests() const {
  std::lock_guard lock(mu_);
  return requests_.size();
}

}  // namespace kvgate::routing
