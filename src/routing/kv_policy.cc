// The `kv` policy: the lowest cost wins, where a worker's cached prefix (device, then host
// and disk at a discount) is credit against the prefill it would have to do.
#include <cmath>
#include <limits>
#include <vector>

#include "routing/policy.h"

namespace kvgate::routing {
namespace {

class KvPolicy final : public SelectionPolicy {
 public:
  explicit KvPolicy(const RouterConfig& config)
      : weights_(config.kv), block_size_(config.block_size), rng_(config.seed) {}

  bool reads_index() const override { return true; }

  size_t Pick(std::span<Candidate> candidates, const RouteRequest& request) override {
    double min_cost = std::numeric_limits<double>::infinity();
    double max_cost = -min_cost;
    for (Candidate& c : candidates) {
      c.cost = KvCost(weights_, block_size_, c, request.prompt_tokens);
      min_cost = std::min(min_cost, c.cost);
      max_cost = std::max(max_cost, c.cost);
    }
    if (weights_.temperature <= 0 || max_cost == min_cost) return Argmin(candidates, min_cost);
    std::vector<double> weights;
    weights.reserve(candidates.size());
    for (const Candidate& c : candidates) {
      const double normalized = (c.cost - min_cost) / (max_cost - min_cost);
      weights.push_back(std::exp(-normalized / weights_.temperature));
    }
    std::discrete_distribution<size_t> dist(weights.begin(), weights.end());
    return dist(rng_);
  }

 private:
  // Ties go to the worker with fewer cached blocks (keep hot caches free), then to a
  // random one.
  size_t Argmin(std::span<const Candidate> candidates, double min_cost) {
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
    return best[RandomIndex(rng_, best.size())];
  }

  const KvWeights weights_;
  const uint32_t block_size_;
  std::mt19937_64 rng_;
};

}  // namespace

double KvCost(const KvWeights& w, uint32_t block_size, const Candidate& c, uint32_t prompt_tokens) {
  const auto& b = c.overlap.blocks;
  const double credit = std::max<double>(b[0] + 0.75 * b[1] + 0.25 * b[2], c.in_flight_blocks);
  const double prefill_blocks = std::max(
      0.0, (static_cast<double>(c.load.prefill_tokens) + prompt_tokens) / block_size - credit);
  return w.prefill_weight * prefill_blocks + w.decode_weight * c.load.decode_blocks +
         w.request_weight * c.load.requests - w.reuse_weight * credit;
}

std::unique_ptr<SelectionPolicy> MakeKvPolicy(const RouterConfig& config) {
  return std::make_unique<KvPolicy>(config);
}

}  // namespace kvgate::routing
