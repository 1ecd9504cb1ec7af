// Picks the worker for each request: gathers the candidates (routable workers, their load
// from the LoadView and, for the kv policy, their cached prefix from the prefix index),
// lets the SelectionPolicy choose, and records the decision as load.
// Thread-safe: matching runs under the index's shared lock, decisions under one mutex.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "kv/prefix_index.h"
#include "routing/load_view.h"
#include "routing/policy.h"

namespace kvgate::routing {

struct RouteDecision {
  RequestId id = 0;
  kv::WorkerKey worker;
  uint32_t cached_blocks = 0;  // predicted leading blocks on the chosen worker (any tier)
  double cost = 0;             // kv policy only
  // The chosen worker's terms when it was chosen (for the decision log).
  WorkerLoad load;
  kv::Overlap overlap;
};

// Why a request would go where it goes (POST /admin/route/explain, docs/design.md §15):
// every worker that could take it with the policy's terms for it, and the choice.
struct RouteExplanation {
  std::vector<Candidate> candidates;  // not busy, with `cost` filled by the policy
  std::vector<Candidate> busy;        // full (docs/design.md §13): not considered
  std::optional<size_t> chosen;       // into `candidates`
};

class Router {
 public:
  // `index` may be null for policies that do not read it (all but kv). `loads` may be
  // shared with whoever else feeds it (peers); without, the router keeps its own.
  Router(RouterConfig config, const kv::PrefixIndex* index,
         std::shared_ptr<LoadView> loads = nullptr);
  ~Router();

  // `prefill_only`: the worker serves prefill phases only (docs/design.md §12).
  void AddWorker(kv::WorkerKey worker, bool prefill_only = false);
  // Stops routing new requests to `worker`; in-flight ones finish normally.
  void DrainWorker(kv::WorkerKey worker);
  void RemoveWorker(kv::WorkerKey worker);
  std::vector<kv::WorkerKey> RoutableWorkers() const;
  // Request slots of the workers that take whole requests: their number times
  // `worker_max_requests` (0 without that cap).
  uint64_t RequestSlots() const;
  // Whether some worker could take a prefill phase (or, with false, anything else).
  bool HasRoutable(bool prefill_phase) const;

  // Chooses a worker and records the request as in flight there. nullopt: no worker; then
  // `*all_busy` (when given) says whether there were workers, all of them busy.
  std::optional<RouteDecision> Route(const RouteRequest& request, bool* all_busy = nullptr);
  // What Route would decide for `request` now, and why, recording nothing. (A policy that
  // breaks ties at random, or keeps its own history, may then decide otherwise.)
  RouteExplanation Explain(const RouteRequest& request);
  // Whether requests should carry eagle_hashes: some worker publishes EAGLE blocks and the
  // policy reads the index.
  bool wants_eagle_hashes() const {
    return policy_->reads_index() && index_ != nullptr && index_->has_eagle_blocks();
  }
  void OnFirstToken(RequestId id) { loads_->OnFirstToken(id); }
  void OnFinished(RequestId id);
  void OnFailed(RequestId id) { OnFinished(id); }

  WorkerLoad Load(kv::WorkerKey worker) const { return loads_->Load(worker); }
  LoadView& loads() { return *loads_; }
  const LoadView& loads() const { return *loads_; }
  const RouterConfig& config() const { return config_; }

 private:
  // Each worker's overlap with the request (the longer of the plain and EAGLE matches).
  void MatchOverlaps(const RouteRequest& request, std::vector<kv::Overlap>& overlaps) const;
  using InFlight = std::vector<std::pair<kv::WorkerKey, uint32_t>>;  // InFlightPrefixes::Match
  // What a policy that reads the index needs, found outside the router lock (the index and
  // the in-flight table have their own): the overlaps, the request's chained hashes (to
  // record it in flight) and the workers sharing a prefix with requests in flight there.
  void LookUp(const RouteRequest& request, std::vector<kv::Overlap>& overlaps,
              std::vector<uint64_t>& sequence_hashes, InFlight& in_flight) const;
  // The workers that could take `request`, split into free and busy (mu_ held).
  void Gather(const RouteRequest& request, const std::vector<kv::Overlap>& overlaps,
              const InFlight& in_flight, std::vector<Candidate>& candidates,
              std::vector<Candidate>* busy) const;
  // The policy reads the index, so it is also told what requests in flight will cache.
  bool tracks_in_flight() const { return policy_->reads_index() && index_ != nullptr; }

  const RouterConfig config_;
  const kv::PrefixIndex* index_;
  std::shared_ptr<LoadView> loads_;
  mutable std::mutex mu_;
  std::unique_ptr<SelectionPolicy> policy_;
  struct WorkerState {
    kv::WorkerKey key;
    bool draining = false;
    bool prefill_only = false;
  };
  std::vector<WorkerState> workers_;
  uint64_t next_sequence_ = 1;
};

}  // namespace kvgate::routing
