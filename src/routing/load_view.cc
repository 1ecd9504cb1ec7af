#include "routing/load_view.h"

#include <vector>

namespace kvgate::routing {
namespace {

WorkerLoad Get(const absl::flat_hash_map<kv::WorkerKey, WorkerLoad>& loads, kv::WorkerKey worker) {
  auto it = loads.find(worker);
  return it == loads.end() ? WorkerLoad{} : it->second;
}

}  // namespace

void LoadView::OnRouted(RequestId id, kv::WorkerKey worker, uint32_t prefill_tokens,
                        uint32_t decode_blocks, PrefixMarks prefix) {
  {
    std::lock_guard lock(mu_);
    auto [it, inserted] =
        requests_.try_emplace(id, InFlightRequest{worker, prefill_tokens, decode_blocks});
    if (!inserted) return;
    WorkerLoad& load = LoadsOf(id)[worker];
    load.prefill_tokens += prefill_tokens;
    load.decode_blocks += decode_blocks;
    ++load.requests;
    // Under the view's lock, so that a finish applied right after cannot come first.
    if (prefix.blocks > 0) prompts_.Add(id, worker, prefix);
  }
  Notify({LoadChange::Kind::kRouted, id, worker, prefill_tokens, decode_blocks, std::move(prefix)});
}

void LoadView::OnFirstToken(RequestId id) {
  {
    std::lock_guard lock(mu_);
    auto it = requests_.find(id);
    if (it == requests_.end() || it->second.prefill_tokens == 0) return;
    LoadsOf(id)[it->second.worker].prefill_tokens -= it->second.prefill_tokens;
    it->second.prefill_tokens = 0;
  }
  Notify({LoadChange::Kind::kFirstToken, id, {}, 0, 0, {}});
}

void LoadView::Forget(RequestId id, const InFlightRequest& r) {
  Loads& loads = LoadsOf(id);
  auto it = loads.find(r.worker);
  if (it == loads.end()) return;
  it->second.prefill_tokens -= r.prefill_tokens;
  it->second.decode_blocks -= r.decode_blocks;
  --it->second.requests;
}

void LoadView::OnFinished(RequestId id) {
  {
    std::lock_guard lock(mu_);
    auto it = requests_.find(id);
    if (it == requests_.end()) return;
    Forget(id, it->second);
    requests_.erase(it);
    prompts_.Remove(id);
  }
  Notify({LoadChange::Kind::kFinished, id, {}, 0, 0, {}});
}

void LoadView::Apply(const LoadChange& c) {
  switch (c.kind) {
    case LoadChange::Kind::kRouted:
      return OnRouted(c.id, c.worker, c.prefill_tokens, c.decode_blocks, c.prefix);
    case LoadChange::Kind::kFirstToken:
      return OnFirstToken(c.id);
    case LoadChange::Kind::kFinished:
      return OnFinished(c.id);
  }
}

void LoadView::RemoveWorker(kv::WorkerKey worker) {
  std::lock_guard lock(mu_);
  local_.erase(worker);
  peers_.erase(worker);
  absl::erase_if(requests_, [&](const auto& entry) { return entry.second.worker == worker; });
  prompts_.RemoveWorker(worker);
}

void LoadView::RemoveOrigin(uint16_t origin) {
  std::lock_guard lock(mu_);
  std::vector<RequestId> gone;
  for (const auto& [id, r] : requests_) {
    if (RequestOrigin(id) == origin) {
      Forget(id, r);
      gone.push_back(id);
    }
  }
  for (RequestId id : gone) {
    requests_.erase(id);
    prompts_.Remove(id);
  }
}

WorkerLoad LoadView::Load(kv::WorkerKey worker) const {
  std::lock_guard lock(mu_);
  WorkerLoad total = Get(local_, worker);
  const WorkerLoad peers = Get(peers_, worker);
  total.prefill_tokens += peers.prefill_tokens;
  total.decode_blocks += peers.decode_blocks;
  total.requests += peers.requests;
  return total;
}

WorkerLoad LoadView::LocalLoad(kv::WorkerKey worker) const {
  std::lock_guard lock(mu_);
  return Get(local_, worker);
}

WorkerLoad LoadView::PeersLoad(kv::WorkerKey worker) const {
  std::lock_guard lock(mu_);
  return Get(peers_, worker);
}

size_t LoadView::InFlight() const {
  std::lock_guard lock(mu_);
  return requests_.size();
}

}  // namespace kvgate::routing
