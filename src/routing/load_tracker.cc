#include "routing/load_tracker.h"

#include <vector>

namespace kvgate::routing {

void LoadTracker::OnRouted(RequestId id, kv::WorkerKey worker, uint32_t prefill_tokens,
                           uint32_t decode_blocks) {
  auto [it, inserted] =
      requests_.try_emplace(id, InFlightRequest{worker, prefill_tokens, decode_blocks});
  if (!inserted) return;
  WorkerLoad& load = loads_[worker];
  load.prefill_tokens += prefill_tokens;
  load.decode_blocks += decode_blocks;
  ++load.requests;
}

void LoadTracker::OnFirstToken(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end() || it->second.prefill_tokens == 0) return;
  loads_[it->second.worker].prefill_tokens -= it->second.prefill_tokens;
  it->second.prefill_tokens = 0;
}

void LoadTracker::OnFinished(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  WorkerLoad& load = loads_[it->second.worker];
  load.prefill_tokens -= it->second.prefill_tokens;
  load.decode_blocks -= it->second.decode_blocks;
  --load.requests;
  requests_.erase(it);
}

void LoadTracker::RemoveWorker(kv::WorkerKey worker) {
  loads_.erase(worker);
  std::vector<RequestId> gone;
  for (const auto& [id, r] : requests_) {
    if (r.worker == worker) gone.push_back(id);
  }
  for (RequestId id : gone) requests_.erase(id);
}

WorkerLoad LoadTracker::Load(kv::WorkerKey worker) const {
  auto it = loads_.find(worker);
  return it == loads_.end() ? WorkerLoad{} : it->second;
}

}  // namespace kvgate::routing
