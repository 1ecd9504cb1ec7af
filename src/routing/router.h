// Picks the worker for each request (DESIGN.md §5): the `kv` cost policy over the prefix
// index and active load, and the baselines round_robin, random, least_loaded and approx.
// Thread-safe: matching runs under the index's shared lock, decisions under one mutex.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string_view>
#include <vector>

#include "kv/prefix_index.h"
#include "routing/approx_tree.h"
#include "routing/load_tracker.h"

namespace kvgate::routing {

enum class Policy : uint8_t { kKv, kRoundRobin, kRandom, kLeastLoaded, kApprox };
std::optional<Policy> ParsePolicy(std::string_view name);
std::string_view PolicyName(Policy policy);

struct KvWeights {
  // A prefill block costs far more engine time than holding a block while decoding: 8 was
  // best on both the Mooncake and the synthetic trace, from light load to saturation
  // (docs/benchmarks.md); 1 let active decode blocks outweigh a cached prefix.
  double prefill_weight = 8.0;
  double request_weight = 1.0;
  double temperature = 0.0;  // 0: argmin; > 0: sample p ~ exp(-normalized_cost / T)
};

// SGLang-router defaults.
struct ApproxConfig {
  uint32_t balance_abs_threshold = 32;
  double balance_rel_threshold = 1.1;
  double cache_threshold = 0.5;
  size_t capacity_blocks = 1 << 20;  // per worker
};

struct RouterConfig {
  Policy policy = Policy::kKv;
  uint32_t block_size = 16;
  KvWeights kv;
  ApproxConfig approx;
  uint64_t seed = 0;
};

struct RouteRequest {
  std::span<const uint64_t> local_hashes;  // of the request's full blocks
  uint32_t prompt_tokens = 0;
  std::span<const kv::WorkerKey> exclude;  // e.g. a worker that just failed this request
  // The same blocks hashed as EAGLE workers store them (one token more per block); empty
  // unless wants_eagle_hashes(). A worker's overlap is the longer of the two matches.
  std::span<const uint64_t> eagle_hashes;
};

struct RouteDecision {
  RequestId id = 0;
  kv::WorkerKey worker;
  uint32_t cached_blocks = 0;  // predicted leading blocks on the chosen worker (any tier)
  double cost = 0;             // kv policy only
};

class Router {
 public:
  // `index` may be null for policies that do not read it (all but kv).
  Router(RouterConfig config, const kv::PrefixIndex* index);

  void AddWorker(kv::WorkerKey worker);
  // Stops routing new requests to `worker`; in-flight ones finish normally.
  void DrainWorker(kv::WorkerKey worker);
  void RemoveWorker(kv::WorkerKey worker);
  std::vector<kv::WorkerKey> RoutableWorkers() const;

  // Chooses a worker and records the request as in flight there. nullopt: no worker.
  std::optional<RouteDecision> Route(const RouteRequest& request);
  // Whether requests should carry eagle_hashes: some worker publishes EAGLE blocks and the
  // policy reads the index.
  bool wants_eagle_hashes() const {
    return config_.policy == Policy::kKv && index_ != nullptr && index_->has_eagle_blocks();
  }
  void OnFirstToken(RequestId id);
  void OnFinished(RequestId id);
  void OnFailed(RequestId id);

  WorkerLoad Load(kv::WorkerKey worker) const;
  const RouterConfig& config() const { return config_; }

 private:
  struct Candidate {
    kv::WorkerKey worker;
    WorkerLoad load;
    kv::Overlap overlap;
    double cost = 0;
  };
  size_t PickKv(std::vector<Candidate>& candidates, uint32_t prompt_tokens);
  size_t PickLeastLoaded(const std::vector<Candidate>& candidates);
  size_t PickApprox(std::vector<Candidate>& candidates, std::span<const uint64_t> sequence_hashes);
  size_t RandomIndex(size_t n);

  const RouterConfig config_;
  const kv::PrefixIndex* index_;
  mutable std::mutex mu_;
  struct WorkerState {
    kv::WorkerKey key;
    bool draining = false;
  };
  std::vector<WorkerState> workers_;
  LoadTracker loads_;
  ApproxTree approx_;
  std::mt19937_64 rng_;
  size_t round_robin_next_ = 0;
  RequestId next_id_ = 1;
};

}  // namespace kvgate::routing
