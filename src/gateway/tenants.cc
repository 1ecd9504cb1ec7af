#include "gateway/tenants.h"

#include <algorithm>
#include <cmath>

namespace kvgate::gateway {
namespace {

constexpr std::string_view kRejectionNames[] = {"requests_per_min", "tokens_per_min",
                                                "max_concurrent"};

// Compares every byte whatever the first difference.
bool SameKey(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

}  // namespace

bool HasBearerKey(const std::vector<std::string>& keys, std::string_view authorization) {
  constexpr std::string_view kBearer = "bearer ";
  if (authorization.size() < kBearer.size()) return false;
  for (size_t i = 0; i < kBearer.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != kBearer[i]) return false;
  }
  authorization.remove_prefix(kBearer.size());
  while (!authorization.empty() && authorization.front() == ' ') authorization.remove_prefix(1);
  bool found = false;
  for (const std::string& key : keys) found |= SameKey(authorization, key);  // no early exit
  return found;
}

std::string_view RejectionName(Rejection r) { return kRejectionNames[static_cast<size_t>(r)]; }

void Tenants::Bucket::Refill(Clock::time_point now) {
  if (updated != Clock::time_point{}) {
    const double minutes = std::chrono::duration<double>(now - updated).count() / 60;
    level = std::min(per_min, level + minutes * per_min);
  }
  updated = now;
}

uint32_t Tenants::Bucket::SecondsUntil(double amount) const {
  const double missing = std::max(0.0, amount - level);
  // (less a hair: the refill arithmetic must not turn 10 s into 11)
  return static_cast<uint32_t>(std::max(1.0, std::ceil(missing / per_min * 60 - 1e-6)));
}

Tenants::Tenants(std::vector<TenantConfig> tenants) {
  for (TenantConfig& c : tenants) {
    keyed_ |= !c.api_keys.empty();
    auto t = std::make_unique<Tenant>();
    t->config = std::move(c);
    t->requests.per_min = t->requests.level = t->config.limits.requests_per_min;
    t->tokens.per_min = t->tokens.level = static_cast<double>(t->config.limits.tokens_per_min);
    tenants_.push_back(std::move(t));
  }
  if (tenants_.empty()) {  // everyone, unlimited
    auto t = std::make_unique<Tenant>();
    t->config.name = kDefaultTenant;
    tenants_.push_back(std::move(t));
  }
  for (uint32_t i = 0; i < tenants_.size(); ++i) by_name_.emplace(tenants_[i]->config.name, i);
}

std::optional<uint32_t> Tenants::Find(std::string_view authorization) const {
  if (!keyed_) return 0;
  std::optional<uint32_t> found;
  for (uint32_t i = 0; i < tenants_.size(); ++i) {
    if (HasBearerKey(tenants_[i]->config.api_keys, authorization) && !found) found = i;
  }
  return found;
}

std::optional<Tenants::Refusal> Tenants::Begin(uint32_t tenant, Clock::time_point now) {
  Tenant& t = *tenants_[tenant];
  const TenantLimits& l = t.config.limits;
  std::lock_guard lock(t.mu);
  if (l.max_concurrent && t.counters.in_flight + t.peers_in_flight >= l.max_concurrent) {
    ++t.counters.rejected[static_cast<size_t>(Rejection::kConcurrency)];
    return Refusal{Rejection::kConcurrency, 1};
  }
  if (l.requests_per_min) {
    t.requests.Refill(now);
    if (t.requests.level < 1) {
      ++t.counters.rejected[static_cast<size_t>(Rejection::kRequests)];
      return Refusal{Rejection::kRequests, t.requests.SecondsUntil(1)};
    }
    t.requests.level -= 1;
  }
  ++t.unreported_requests;
  ++t.counters.in_flight;
  return std::nullopt;
}

std::optional<Tenants::Refusal> Tenants::Charge(uint32_t tenant, uint64_t tokens,
                                                Clock::time_point now) {
  Tenant& t = *tenants_[tenant];
  std::lock_guard lock(t.mu);
  if (t.config.limits.tokens_per_min) {
    t.tokens.Refill(now);
    // A request larger than the whole minute's budget could never pass: it may when the
    // bucket is full (it then goes into debt).
    const double need = std::min(static_cast<double>(tokens), t.tokens.per_min);
    if (t.tokens.level < need) {
      ++t.counters.rejected[static_cast<size_t>(Rejection::kTokens)];
      --t.counters.in_flight;
      return Refusal{Rejection::kTokens, t.tokens.SecondsUntil(need)};
    }
    t.tokens.level -= static_cast<double>(tokens);
  }
  t.unreported_tokens += static_cast<int64_t>(tokens);
  ++t.counters.admitted;
  return std::nullopt;
}

void Tenants::End(uint32_t tenant, uint64_t charged, uint64_t used) {
  Tenant& t = *tenants_[tenant];
  std::lock_guard lock(t.mu);
  if (t.counters.in_flight > 0) --t.counters.in_flight;
  if (charged > 0)
    t.unreported_tokens += static_cast<int64_t>(used) - static_cast<int64_t>(charged);
  if (t.config.limits.tokens_per_min && charged > 0) {
    // Settled to what it really used: the rest comes back (or more goes).
    t.tokens.level = std::min(t.tokens.per_min, t.tokens.level + static_cast<double>(charged) -
                                                    static_cast<double>(used));
  }
}

routing::FairShare Tenants::ShareOf(uint32_t tenant, uint64_t slots) const {
  uint64_t active = 0, held = 0;
  for (uint32_t i = 0; i < tenants_.size(); ++i) {
    const uint32_t in_flight = counters(i).in_flight;
    active += in_flight > 0;
    if (i == tenant) held = in_flight;  // (counting the request starting)
  }
  if (active < 2 || slots == 0) return routing::FairShare::kNotShared;
  if (held * active <= slots) return routing::FairShare::kWithin;
  // Past its share (with more tenants than slots, everyone is): a tenant's only request is
  // still never kept back for the others.
  return held >= 2 ? routing::FairShare::kOver : routing::FairShare::kNotShared;
}

Tenants::Counters Tenants::counters(uint32_t tenant) const {
  const Tenant& t = *tenants_[tenant];
  std::lock_guard lock(t.mu);
  return t.counters;
}

std::vector<cluster::TenantUsage> Tenants::TakeLocalUsage(bool full) {
  std::vector<cluster::TenantUsage> usage;
  for (const auto& t : tenants_) {
    std::lock_guard lock(t->mu);
    const uint32_t in_flight = t->counters.in_flight;
    if (t->unreported_requests == 0 && t->unreported_tokens == 0 &&
        in_flight == t->reported_in_flight && !(full && in_flight > 0)) {
      continue;
    }
    usage.push_back({t->config.name, t->unreported_requests, t->unreported_tokens, in_flight});
    t->unreported_requests = 0;
    t->unreported_tokens = 0;
    t->reported_in_flight = in_flight;
  }
  return usage;
}

void Tenants::ApplyPeerUsage(uint16_t origin, const std::vector<cluster::TenantUsage>& usage) {
  const Clock::time_point now = Clock::now();
  for (const cluster::TenantUsage& u : usage) {
    auto found = by_name_.find(u.tenant);
    if (found == by_name_.end()) continue;  // configured on the peer only
    Tenant& t = *tenants_[found->second];
    std::lock_guard lock(t.mu);
    if (t.config.limits.requests_per_min) {
      t.requests.Refill(now);
      t.requests.level -= u.requests;  // may go below zero: the fleet overdrew it
    }
    if (t.config.limits.tokens_per_min) {
      t.tokens.Refill(now);
      t.tokens.level = std::min(t.tokens.per_min, t.tokens.level - static_cast<double>(u.tokens));
    }
    uint32_t& held = t.peer_in_flight[origin];
    t.peers_in_flight = t.peers_in_flight - held + u.in_flight;
    held = u.in_flight;
  }
}

void Tenants::ForgetPeer(uint16_t origin) {
  for (const auto& t : tenants_) {
    std::lock_guard lock(t->mu);
    auto it = t->peer_in_flight.find(origin);
    if (it == t->peer_in_flight.end()) continue;
    t->peers_in_flight -= it->second;
    t->peer_in_flight.erase(it);
  }
}

}  // namespace kvgate::gateway
