// How the router chooses among the workers that may take a request: one SelectionPolicy
// per routing policy (`kv`, and the baselines `round_robin`, `random`, `least_loaded`,
// `approx`). The router gathers the candidates (load, and the index's overlap when the
// policy reads it) and records the decision; a policy only picks.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string_view>

#include "kv/prefix_index.h"
#include "routing/load_view.h"

namespace kvgate::routing {

enum class Policy : uint8_t { kKv, kRoundRobin, kRandom, kLeastLoaded, kApprox };
std::optional<Policy> ParsePolicy(std::string_view name);
std::string_view PolicyName(Policy policy);

struct KvWeights {
  // A prefill block costs far more engine time than holding a block while decoding: 8 was
  // best on both the Mooncake and the synthetic trace, from light load to saturation
  // (docs/benchmarks.md); 1 let active decode blocks outweigh a cached prefix.
  double prefill_weight = 8.0;
  // A block held by a decoding request delays a new request's first token by far less than
  // a block it must prefill: with vLLM's fitted step times (the mocker's), a full cache adds
  // ~54 ms to a step and 64 prompt tokens ~1 ms. 1/32 kept the most capacity on both traces
  // (`replay --capacity`, docs/benchmarks.md); 1 made loaded caches look full and spread
  // conversations away from their prefixes.
  double decode_weight = 1.0 / 32;
  double request_weight = 1.0;
  // Taken off the cost per block of credit, beyond the prefill that block saves this request:
  // a hit also saves the fleet that compute and the memory of a second copy, and keeps the
  // prefix where the next request sharing it will look. 8 (one prefill block) raised the kv
  // policy's capacity 1.08-1.2x on the Mooncake and conversation traces and its reuse at half
  // capacity from 88% to 95% of the pooled-LRU bound; 16 and more herded requests onto
  // memory-starved workers, 120 a single hot prefix onto one (docs/benchmarks.md).
  double reuse_weight = 8.0;
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
  // Names this process in its request ids (see RequestId); gateway replicas differ here.
  uint16_t request_origin = 0;
  // A worker this loaded is busy: it takes no new request (docs/design.md §13). 0: no limit.
  uint32_t worker_max_requests = 0;
  uint64_t worker_max_prefill_tokens = 0;
};

enum class FairShare { kNotShared, kWithin, kOver };

struct RouteRequest {
  std::span<const uint64_t> local_hashes;  // of the request's full blocks
  uint32_t prompt_tokens = 0;
  std::span<const kv::WorkerKey> exclude;  // e.g. a worker that just failed this request
  // The same blocks hashed as EAGLE workers store them (one token more per block); empty
  // unless the router wants them. A worker's overlap is the longer of the two matches.
  std::span<const uint64_t> eagle_hashes;
  // Disaggregation (docs/design.md §12): a prefill phase goes to prefill workers only;
  // anything else (whole requests, decode phases) to the others.
  bool prefill_phase = false;
  // Overload (docs/design.md §13), with several tenants in the gateway. kWithin: the
  // request's tenant, with this request, holds no more than its fair share of the fleet's
  // request slots, so a worker full by request count still takes it (a worker full by
  // prefill tokens does not): a flooding tenant cannot take a light one's turn, and nobody
  // goes past the cap by more than that share. kOver: the tenant holds more, so it does not
  // get the last worker with no prefill pending: that one stays for the others, whose next
  // request then need not wait behind a prefill step.
  FairShare fair_share = FairShare::kNotShared;
};

// One worker the policy may pick, with what the policy decides on. Policies fill `cost`
// (and `overlap`, when they keep their own view of the caches) for explanations.
struct Candidate {
  kv::WorkerKey worker;
  WorkerLoad load;
  kv::Overlap overlap;
  double cost = 0;
  // Leading blocks of the prompt that requests in flight to this worker will have cached
  // (routing/in_flight_prefixes.h): not in the index yet, but soon in the engine.
  uint32_t in_flight_blocks = 0;
};

class SelectionPolicy {
 public:
  virtual ~SelectionPolicy() = default;
  // Whether candidates need the prefix index's overlaps.
  virtual bool reads_index() const { return false; }
  // The index of the chosen candidate; `candidates` is never empty. Calls are serialized.
  virtual size_t Pick(std::span<Candidate> candidates, const RouteRequest& request) = 0;
  // The request was sent to `worker`.
  virtual void OnRouted(kv::WorkerKey /*worker*/, const RouteRequest& /*request*/) {}
  virtual void OnWorkerRemoved(kv::WorkerKey /*worker*/) {}
};

std::unique_ptr<SelectionPolicy> MakePolicy(const RouterConfig& config);

// The kv policy's cost (docs/design.md §5): prefill blocks not covered by the cached prefix,
// weighted, plus decode blocks and weighted requests in flight, less a bonus per cached block.
double KvCost(const KvWeights& weights, uint32_t block_size, const Candidate& candidate,
              uint32_t prompt_tokens);

// Uniform in [0, n); 0 when n <= 1 (no draw, so single candidates do not move the stream).
size_t RandomIndex(std::mt19937_64& rng, size_t n);

}  // namespace kvgate::routing
