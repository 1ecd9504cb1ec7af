#include "routing/router.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kv/block_hash.h"

namespace kvgate::routing {

std::optional<Policy> ParsePolicy(std::string_view name) {
  if (name == "kv") return Policy::kKv;
  if (name == "round_robin") return Policy::kRoundRobin;
  if (name == "random") return Policy::kRandom;
  if (name == "least_loaded") return Policy::kLeastLoaded;
  if (name == "approx") return Policy::kApprox;
  return std::nullopt;
}

std::string_view PolicyName(Policy policy) {
  switch (policy) {
    case Policy::kKv:
      return "kv";
    case Policy::kRoundRobin:
      return "round_robin";
    case Policy::kRandom:
      return "random";
    case Policy::kLeastLoaded:
      return "least_loaded";
    case Policy::kApprox:
      return "approx";
  }
  return "kv";
}

Router::Router(RouterConfig config, const kv::PrefixIndex* index)
    : config_(config), index_(index), approx_(config.approx.capacity_blocks), rng_(config.seed) {}

void Router::AddWorker(kv::WorkerKey worker) {
  std::lock_guard lock(mu_);
  for (WorkerState& w : workers_) {
    if (w.key == worker) {
      w.draining = false;
      return;
    }
  }
  workers_.push_back({worker, false});
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
  loads_.RemoveWorker(worker);
  approx_.RemoveWorker(worker);
}

std::vector<kv::WorkerKey> Router::RoutableWorkers() const {
  std::lock_guard lock(mu_);
  std::vector<kv::WorkerKey> out;
  for (const WorkerState& w : workers_) {
    if (!w.draining) out.push_back(w.key);
  }
  return out;
}

std::optional<RouteDecision> Router::Route(const RouteRequest& request) {
  // Match outside the router lock: it only takes the index's shared lock.
  std::vector<kv::Overlap> overlaps;
  if (config_.policy == Policy::kKv && index_ != nullptr) {
    index_->Match(request.local_hashes, overlaps);
    if (!request.eagle_hashes.empty()) {
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
  }
  std::vector<uint64_t> sequence_hashes;
  if (config_.policy == Policy::kApprox) kv::SequenceHashes(request.local_hashes, sequence_hashes);

  std::lock_guard lock(mu_);
  std::vector<Candidate> candidates;
  candidates.reserve(workers_.size());
  for (const WorkerState& w : workers_) {
    if (w.draining) continue;
    if (std::find(request.exclude.begin(), request.exclude.end(), w.key) != request.exclude.end())
      continue;
    Candidate c{w.key, loads_.Load(w.key), kv::Overlap{w.key, {}}, 0};
    for (const kv::Overlap& o : overlaps) {
      if (o.worker == w.key) c.overlap = o;
    }
    candidates.push_back(c);
  }
  if (candidates.empty()) return std::nullopt;

  size_t pick = 0;
  switch (config_.policy) {
    case Policy::kKv:
      pick = PickKv(candidates, request.prompt_tokens);
      break;
    case Policy::kRoundRobin:
      pick = round_robin_next_++ % candidates.size();
      break;
    case Policy::kRandom:
      pick = RandomIndex(candidates.size());
      break;
    case Policy::kLeastLoaded:
      pick = PickLeastLoaded(candidates);
      break;
    case Policy::kApprox:
      pick = PickApprox(candidates, sequence_hashes);
      approx_.Insert(candidates[pick].worker, sequence_hashes);
      break;
  }
  const Candidate& chosen = candidates[pick];
  RouteDecision d{next_id_++, chosen.worker, chosen.overlap.total(), chosen.cost};
  const uint32_t bs = config_.block_size;
  const uint64_t cached_tokens = uint64_t{d.cached_blocks} * bs;
  const uint32_t prefill = request.prompt_tokens > cached_tokens
                               ? static_cast<uint32_t>(request.prompt_tokens - cached_tokens)
                               : 0;
  loads_.OnRouted(d.id, d.worker, prefill, (request.prompt_tokens + bs - 1) / bs);
  return d;
}

size_t Router::PickKv(std::vector<Candidate>& candidates, uint32_t prompt_tokens) {
  const KvWeights& w = config_.kv;
  const double bs = config_.block_size;
  double min_cost = std::numeric_limits<double>::infinity();
  double max_cost = -min_cost;
  for (Candidate& c : candidates) {
    const auto& b = c.overlap.blocks;
    const double credit = b[0] + 0.75 * b[1] + 0.25 * b[2];
    const double prefill_blocks =
        std::max(0.0, (static_cast<double>(c.load.prefill_tokens) + prompt_tokens) / bs - credit);
    c.cost = w.prefill_weight * prefill_blocks + static_cast<double>(c.load.decode_blocks) +
             w.request_weight * c.load.requests;
    min_cost = std::min(min_cost, c.cost);
    max_cost = std::max(max_cost, c.cost);
  }
  if (w.temperature <= 0 || max_cost == min_cost) {
    // Argmin; ties go to the worker with fewer cached blocks (keep hot caches free), then
    // to a random one.
    std::vector<size_t> best;
    uint32_t best_cached = std::numeric_limits<uint32_t>::max();
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (candidates[i].cost != min_cost) continue;
      const uint32_t cached = candidates[i].overlap.total();
      if (cached < best_cached) {
        best.clear();
        best_cached = cached;
      }
      if (cached == best_cached) best.push_back(i);
    }
    return best[RandomIndex(best.size())];
  }
  std::vector<double> weights;
  weights.reserve(candidates.size());
  for (const Candidate& c : candidates) {
    const double normalized = (c.cost - min_cost) / (max_cost - min_cost);
    weights.push_back(std::exp(-normalized / w.temperature));
  }
  std::discrete_distribution<size_t> dist(weights.begin(), weights.end());
  return dist(rng_);
}

size_t Router::PickLeastLoaded(const std::vector<Candidate>& candidates) {
  std::vector<size_t> best;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (best.empty()) {
      best.push_back(i);
      continue;
    }
    const WorkerLoad& a = candidates[i].load;
    const WorkerLoad& b = candidates[best[0]].load;
    if (a.requests < b.requests ||
        (a.requests == b.requests && a.prefill_tokens < b.prefill_tokens)) {
      best.assign(1, i);
    } else if (a.requests == b.requests && a.prefill_tokens == b.prefill_tokens) {
      best.push_back(i);
    }
  }
  return best[RandomIndex(best.size())];
}

size_t Router::PickApprox(std::vector<Candidate>& candidates,
                          std::span<const uint64_t> sequence_hashes) {
  const ApproxConfig& cfg = config_.approx;
  uint32_t min_requests = std::numeric_limits<uint32_t>::max();
  uint32_t max_requests = 0;
  for (const Candidate& c : candidates) {
    min_requests = std::min(min_requests, c.load.requests);
    max_requests = std::max(max_requests, c.load.requests);
  }
  const bool imbalanced = max_requests - min_requests > cfg.balance_abs_threshold &&
                          max_requests > cfg.balance_rel_threshold * min_requests;
  if (imbalanced) return PickLeastLoaded(candidates);

  size_t best = 0;
  uint32_t best_match = 0;
  size_t smallest = 0;
  size_t smallest_size = std::numeric_limits<size_t>::max();
  for (size_t i = 0; i < candidates.size(); ++i) {
    const uint32_t match = approx_.MatchLength(candidates[i].worker, sequence_hashes);
    candidates[i].overlap = kv::Overlap{candidates[i].worker, {match, 0, 0, 0}};
    if (match > best_match) {
      best_match = match;
      best = i;
    }
    const size_t size = approx_.Size(candidates[i].worker);
    if (size < smallest_size) {
      smallest_size = size;
      smallest = i;
    }
  }
  const double rate =
      sequence_hashes.empty() ? 0.0 : static_cast<double>(best_match) / sequence_hashes.size();
  return rate > cfg.cache_threshold ? best : smallest;
}

size_t Router::RandomIndex(size_t n) {
  return n <= 1 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(rng_);
}

void Router::OnFirstToken(RequestId id) {
  std::lock_guard lock(mu_);
  loads_.OnFirstToken(id);
}

void Router::OnFinished(RequestId id) {
  std::lock_guard lock(mu_);
  loads_.OnFinished(id);
}

void Router::OnFailed(RequestId id) {
  std::lock_guard lock(mu_);
  loads_.OnFailed(id);
}

WorkerLoad Router::Load(kv::WorkerKey worker) const {
  std::lock_guard lock(mu_);
  return loads_.Load(worker);
}

}  // namespace kvgate::routing
