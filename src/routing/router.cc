#include "routing/router.h"

#include <algorithm>

#include "kv/block_hash.h"

namespace kvgate::routing {

Router::Router(RouterConfig config, const kv::PrefixIndex* index, std::shared_ptr<LoadView> loads)
    : config_(config),
      index_(index),
      loads_(loads ? std::move(loads) : std::make_shared<LoadView>(config.request_origin)),
      policy_(MakePolicy(config)) {}

Router::~Router() = default;

void Router::AddWorker(kv::WorkerKey worker, bool prefill_only) {
  std::lock_guard lock(mu_);
  for (WorkerState& w : workers_) {
    if (w.key == worker) {
      w.draining = false;
      w.prefill_only = prefill_only;
      return;
    }
  }
  workers_.push_back({worker, false, prefill_only});
}

uint64_t Router::RequestSlots() const {
  std::lock_guard lock(mu_);
  const auto whole = std::count_if(workers_.begin(), workers_.end(), [](const WorkerState& w) {
    return !w.draining && !w.prefill_only;
  });
  return static_cast<uint64_t>(whole) * config_.worker_max_requests;
}

bool Router::HasRoutable(bool prefill_phase) const {
  std::lock_guard lock(mu_);
  return std::any_of(workers_.begin(), workers_.end(), [&](const WorkerState& w) {
    return !w.draining && w.prefill_only == prefill_phase;
  });
}

void Router::DrainWorker(kv::WorkerKey worker) {
  std::lock_guard lock(mu_);
  for (WorkerState& w : workers_) {
    if (w.key == worker) w.draining = true;
  }
}

void Router::RemoveWorker(kv::WorkerKey worker) {
  std::lock_guard lock(mu_);
  std::erase_if(workers_, [&](const WorkerState& w) { return w.key == worker; });
  loads_->RemoveWorker(worker);
  policy_->OnWorkerRemoved(worker);
}

std::vector<kv::WorkerKey> Router::RoutableWorkers() const {
  std::lock_guard lock(mu_);
  std::vector<kv::WorkerKey> out;
  for (const WorkerState& w : workers_) {
    if (!w.draining) out.push_back(w.key);
  }
  return out;
}

void Router::MatchOverlaps(const RouteRequest& request, std::vector<kv::Overlap>& overlaps) const {
  index_->Match(request.local_hashes, overlaps);
  if (request.eagle_hashes.empty()) return;
  std::vector<kv::Overlap> eagle;
  index_->Match(request.eagle_hashes, eagle);
  for (const kv::Overlap& e : eagle) {
    auto same = std::find_if(overlaps.begin(), overlaps.end(),
                             [&](const kv::Overlap& o) { return o.worker == e.worker; });
    if (same == overlaps.end()) {
      overlaps.push_back(e);
    } else if (e.total() > same->total()) {
      *same = e;
    }
  }
}

void Router::LookUp(const RouteRequest& request, std::vector<kv::Overlap>& overlaps,
                    std::vector<uint64_t>& sequence_hashes, InFlight& in_flight) const {
  if (!tracks_in_flight()) return;
  MatchOverlaps(request, overlaps);
  kv::SequenceHashes(request.local_hashes, sequence_hashes);
  loads_->MatchInFlight(sequence_hashes, in_flight);
}

void Router::Gather(const RouteRequest& request, const std::vector<kv::Overlap>& overlaps,
                    const InFlight& in_flight, std::vector<Candidate>& candidates,
                    std::vector<Candidate>* busy) const {
  candidates.reserve(workers_.size());
  for (const WorkerState& w : workers_) {
    if (w.draining || w.prefill_only != request.prefill_phase) continue;
    if (std::find(request.exclude.begin(), request.exclude.end(), w.key) != request.exclude.end())
      continue;
    Candidate c{w.key, loads_->Load(w.key), kv::Overlap{w.key, {}}, 0};
    for (const kv::Overlap& o : overlaps) {
      if (o.worker == w.key) c.overlap = o;
    }
    for (auto [worker, blocks] : in_flight) {
      if (worker == w.key) c.in_flight_blocks = blocks;
    }
    if ((config_.worker_max_requests && c.load.requests >= config_.worker_max_requests &&
         request.fair_share != FairShare::kWithin) ||
        (config_.worker_max_prefill_tokens &&
         c.load.prefill_tokens >= config_.worker_max_prefill_tokens)) {
      if (busy) busy->push_back(c);  // full: the request goes elsewhere, or waits
      continue;
    }
    candidates.push_back(c);
  }
  if (request.fair_share == FairShare::kOver) {
    // The last worker with no prefill pending is kept for tenants within their share.
    auto idle = [](const Candidate& c) { return c.load.prefill_tokens == 0; };
    if (std::count_if(candidates.begin(), candidates.end(), idle) == 1) {
      auto it = std::find_if(candidates.begin(), candidates.end(), idle);
      if (busy) busy->push_back(*it);
      candidates.erase(it);
    }
  }
}

RouteExplanation Router::Explain(const RouteRequest& request) {
  std::vector<kv::Overlap> overlaps;
  std::vector<uint64_t> sequence_hashes;
  InFlight in_flight;
  LookUp(request, overlaps, sequence_hashes, in_flight);
  std::lock_guard lock(mu_);
  RouteExplanation e;
  Gather(request, overlaps, in_flight, e.candidates, &e.busy);
  if (!e.candidates.empty()) e.chosen = policy_->Pick(e.candidates, request);
  return e;
}

std::optional<RouteDecision> Router::Route(const RouteRequest& request, bool* all_busy) {
  std::vector<kv::Overlap> overlaps;
  std::vector<uint64_t> sequence_hashes;
  InFlight in_flight;
  LookUp(request, overlaps, sequence_hashes, in_flight);

  std::lock_guard lock(mu_);
  std::vector<Candidate> candidates, busy;
  Gather(request, overlaps, in_flight, candidates, all_busy ? &busy : nullptr);
  if (all_busy) *all_busy = candidates.empty() && !busy.empty();
  if (candidates.empty()) return std::nullopt;

  const Candidate& chosen = candidates[policy_->Pick(candidates, request)];
  policy_->OnRouted(chosen.worker, request);
  RouteDecision d{MakeRequestId(config_.request_origin, next_sequence_++),
                  chosen.worker,
                  chosen.overlap.total(),
                  chosen.cost,
                  chosen.load,
                  chosen.overlap};
  const uint32_t bs = config_.block_size;
  const uint64_t cached_tokens = uint64_t{std::max(d.cached_blocks, chosen.in_flight_blocks)} * bs;
  const uint32_t prefill = request.prompt_tokens > cached_tokens
                               ? static_cast<uint32_t>(request.prompt_tokens - cached_tokens)
                               : 0;
  loads_->OnRouted(d.id, d.worker, prefill, (request.prompt_tokens + bs - 1) / bs,
                   tracks_in_flight() ? PrefixMarks::Of(sequence_hashes) : PrefixMarks{});
  return d;
}

void Router::OnFinished(RequestId id) { loads_->OnFinished(id); }

}  // namespace kvgate::routing
