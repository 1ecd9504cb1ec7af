// Tenants (docs/design.md §13): who a request's API key belongs to, and the limits each
// tenant buys: requests and tokens per minute (token buckets that refill continuously) and
// requests at once. A request's tokens are charged up front (prompt + max tokens, 256 when
// unset) and settled to the real count when it ends. Over a limit the answer says how many
// seconds until there is room. With gateway replicas (fleet mode) each one's usage counts
// at the others too (cluster::UsageLedger), so the limits hold fleet-wide. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cluster/usage_ledger.h"
#include "common/status.h"
#include "routing/policy.h"

namespace kvgate::gateway {

struct TenantLimits {
  uint32_t requests_per_min = 0;  // 0: no limit
  uint64_t tokens_per_min = 0;
  uint32_t max_concurrent = 0;
};

struct TenantConfig {
  std::string name;  // metrics label: from the config, never from a request
  std::vector<std::string> api_keys;
  std::string api_keys_file;  // one key per line
  int priority = 0;           // higher first when requests wait (§13)
  TenantLimits limits;
};

// Why a request was turned away, as the metrics label it.
enum class Rejection : uint8_t { kRequests, kTokens, kConcurrency };
std::string_view RejectionName(Rejection r);

class Tenants : public cluster::UsageLedger {
 public:
  using Clock = std::chrono::steady_clock;

  // `tenants` with their keys read (FinishConfig). The gateway's plain `api_keys` become a
  // tenant named "default" without limits.
  explicit Tenants(std::vector<TenantConfig> tenants);

  // Whether any key is required at all.
  bool keyed() const { return keyed_; }
  // The tenant whose key the `Authorization: Bearer` value is (every key compared in full,
  // so the time says nothing of how much of a key was right); nullopt: none. Without keys
  // every request is the unlimited tenant 0.
  std::optional<uint32_t> Find(std::string_view authorization) const;
  const TenantConfig& config(uint32_t tenant) const { return tenants_[tenant]->config; }
  size_t size() const { return tenants_.size(); }

  struct Refusal {
    Rejection why;
    uint32_t retry_after_s;  // until the budget allows it
  };
  // A request starts: one request of the per-minute budget and one concurrency slot.
  std::optional<Refusal> Begin(uint32_t tenant, Clock::time_point now = Clock::now());
  // Its tokens, once they are known (before it is routed). On refusal the request counts
  // as ended (End need not be called).
  std::optional<Refusal> Charge(uint32_t tenant, uint64_t tokens,
                                Clock::time_point now = Clock::now());
  // It ended: the concurrency slot comes back, and the tokens charged are settled to
  // `used` (0 when not charged).
  void End(uint32_t tenant, uint64_t charged, uint64_t used);

  // Whether the tenant, with the request it is starting, holds no more than its fair share
  // of `slots` request slots (kWithin) or more (kOver): an equal part for each tenant with
  // requests in the gateway (in flight or waiting). A tenant alone has no share to protect,
  // nor has anyone without slots, and a tenant's only request is never over: kNotShared.
  routing::FairShare ShareOf(uint32_t tenant, uint64_t slots) const;

  struct Counters {
    uint64_t admitted = 0;
    uint64_t rejected[3] = {};  // by Rejection
    uint32_t in_flight = 0;
  };
  Counters counters(uint32_t tenant) const;

  // cluster::UsageLedger: usage shared with peer replicas (tenants matched by name).
  std::vector<cluster::TenantUsage> TakeLocalUsage(bool full) override;
  void ApplyPeerUsage(uint16_t origin, const std::vector<cluster::TenantUsage>& usage) override;
  void ForgetPeer(uint16_t origin) override;

 private:
  // A per-minute budget: holds up to `per_min`, refilled continuously.
  struct Bucket {
    double per_min = 0;
    double level = 0;
    Clock::time_point updated{};
    void Refill(Clock::time_point now);
    // Seconds until it holds `amount` (rounded up, at least 1).
    uint32_t SecondsUntil(double amount) const;
  };
  struct Tenant {
    TenantConfig config;
    mutable std::mutex mu;
    Bucket requests, tokens;
    Counters counters;
    // Not yet reported to peers: requests started, tokens charged (net of settling).
    uint32_t unreported_requests = 0;
    int64_t unreported_tokens = 0;
    uint32_t reported_in_flight = 0;
    std::unordered_map<uint16_t, uint32_t> peer_in_flight;  // by peer origin
    uint32_t peers_in_flight = 0;                           // their sum
  };
  std::vector<std::unique_ptr<Tenant>> tenants_;
  std::unordered_map<std::string, uint32_t> by_name_;
  bool keyed_ = false;
};

// Whether the `Authorization: Bearer` value carries one of `keys` (the scheme is
// case-insensitive; every key is compared in full whatever the first difference, so the
// time taken says nothing of how much of a key was right).
bool HasBearerKey(const std::vector<std::string>& keys, std::string_view authorization);

// The default tenant's name (the plain `api_keys`, or everyone without keys).
inline constexpr std::string_view kDefaultTenant = "default";
// Tokens charged for a request that names no max tokens.
inline constexpr uint32_t kDefaultMaxTokens = 256;

}  // namespace kvgate::gateway
