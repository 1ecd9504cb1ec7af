// What a gateway's tenants share with peer replicas over NATS (docs/design.md §13): each
// replica reports the usage it saw and applies its peers', so request, token and
// concurrency limits hold across the fleet within one report interval.
#pragma once

#include <cstdint>
#include <vector>

#include "cluster/load_delta.h"

namespace kvgate::cluster {

class UsageLedger {
 public:
  virtual ~UsageLedger() = default;
  // This replica's usage since the last call, one entry per tenant that changed; with
  // `full`, also every tenant with requests in flight (so a peer that joined late or lost
  // a message catches up).
  virtual std::vector<TenantUsage> TakeLocalUsage(bool full) = 0;
  // A peer's report: its requests and tokens count against the limits here too; its
  // in-flight counts replace what it reported before.
  virtual void ApplyPeerUsage(uint16_t origin, const std::vector<TenantUsage>& usage) = 0;
  // The peer is gone (silent, or its messages were lost): its requests in flight no longer
  // count.
  virtual void ForgetPeer(uint16_t origin) = 0;
};

}  // namespace kvgate::cluster
