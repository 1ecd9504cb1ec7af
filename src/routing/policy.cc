#include "routing/policy.h"

namespace kvgate::routing {

// Each defined beside its policies.
std::unique_ptr<SelectionPolicy> MakeKvPolicy(const RouterConfig& config);
std::unique_ptr<SelectionPolicy> MakeBaselinePolicy(const RouterConfig& config);

std::optional<Policy> ParsePolicy(std::string_view name) {
  for (Policy p :
       {Policy::kKv, Policy::kRoundRobin, Policy::kRandom, Policy::kLeastLoaded, Policy::kApprox}) {
    if (PolicyName(p) == name) return p;
  }
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

std::unique_ptr<SelectionPolicy> MakePolicy(const RouterConfig& config) {
  if (config.policy == Policy::kKv) return MakeKvPolicy(config);
  return MakeBaselinePolicy(config);
}

size_t RandomIndex(std::mt19937_64& rng, size_t n) {
  return n <= 1 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(rng);
}

}  // namespace kvgate::routing
