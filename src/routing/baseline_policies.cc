// The baselines reports compare `kv` against: round_robin, random, least_loaded, and
// approx (SGLang-router style: an approximate cache view built from its own decisions).
#include <limits>
#include <vector>

#include "kv/block_hash.h"
#include "routing/approx_tree.h"
#include "routing/policy.h"

namespace kvgate::routing {
namespace {

class RoundRobinPolicy final : public SelectionPolicy {
 public:
  size_t Pick(std::span<Candidate> candidates, const RouteRequest&) override {
    return next_++ % candidates.size();
  }

 private:
  size_t next_ = 0;
};

class RandomPolicy final : public SelectionPolicy {
 public:
  explicit RandomPolicy(uint64_t seed) : rng_(seed) {}
  size_t Pick(std::span<Candidate> candidates, const RouteRequest&) override {
    return RandomIndex(rng_, candidates.size());
  }

 private:
  std::mt19937_64 rng_;
};

// Fewest requests, then fewest prefill tokens; ties at random.
size_t LeastLoaded(std::span<const Candidate> candidates, std::mt19937_64& rng) {
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
  return best[RandomIndex(rng, best.size())];
}

class LeastLoadedPolicy final : public SelectionPolicy {
 public:
  explicit LeastLoadedPolicy(uint64_t seed) : rng_(seed) {}
  size_t Pick(std::span<Candidate> candidates, const RouteRequest&) override {
    return LeastLoaded(candidates, rng_);
  }

 private:
  std::mt19937_64 rng_;
};

class ApproxPolicy final : public SelectionPolicy {
 public:
  explicit ApproxPolicy(const RouterConfig& config)
      : config_(config.approx), tree_(config.approx.capacity_blocks), rng_(config.seed) {}

  size_t Pick(std::span<Candidate> candidates, const RouteRequest& request) override {
    sequence_hashes_.clear();  // (SequenceHashes appends)
    kv::SequenceHashes(request.local_hashes, sequence_hashes_);
    uint32_t min_requests = std::numeric_limits<uint32_t>::max();
    uint32_t max_requests = 0;
    for (const Candidate& c : candidates) {
      min_requests = std::min(min_requests, c.load.requests);
      max_requests = std::max(max_requests, c.load.requests);
    }
    const bool imbalanced = max_requests - min_requests > config_.balance_abs_threshold &&
                            max_requests > config_.balance_rel_threshold * min_requests;
    if (imbalanced) return LeastLoaded(candidates, rng_);

    size_t best = 0;
    uint32_t best_match = 0;
    size_t smallest = 0;
    size_t smallest_size = std::numeric_limits<size_t>::max();
    for (size_t i = 0; i < candidates.size(); ++i) {
      const uint32_t match = tree_.MatchLength(candidates[i].worker, sequence_hashes_);
      candidates[i].overlap = kv::Overlap{candidates[i].worker, {match, 0, 0, 0}};
      if (match > best_match) {
        best_match = match;
        best = i;
      }
      const size_t size = tree_.Size(candidates[i].worker);
      if (size < smallest_size) {
        smallest_size = size;
        smallest = i;
      }
    }
    const double rate =
        sequence_hashes_.empty() ? 0.0 : static_cast<double>(best_match) / sequence_hashes_.size();
    return rate > config_.cache_threshold ? best : smallest;
  }

  // Pick computed this request's sequence hashes; calls are serialized.
  void OnRouted(kv::WorkerKey worker, const RouteRequest&) override {
    tree_.Insert(worker, sequence_hashes_);
  }
  void OnWorkerRemoved(kv::WorkerKey worker) override { tree_.RemoveWorker(worker); }

 private:
  const ApproxConfig config_;
  ApproxTree tree_;
  std::mt19937_64 rng_;
  std::vector<uint64_t> sequence_hashes_;
};

}  // namespace

// Defined here, used by MakePolicy (policy.cc).
std::unique_ptr<SelectionPolicy> MakeBaselinePolicy(const RouterConfig& config) {
  switch (config.policy) {
    case Policy::kRoundRobin:
      return std::make_unique<RoundRobinPolicy>();
    case Policy::kRandom:
      return std::make_unique<RandomPolicy>(config.seed);
    case Policy::kLeastLoaded:
      return std::make_unique<LeastLoadedPolicy>(config.seed);
    case Policy::kApprox:
      return std::make_unique<ApproxPolicy>(config);
    case Policy::kKv:
      break;
  }
  return nullptr;
}

}  // namespace kvgate::routing
