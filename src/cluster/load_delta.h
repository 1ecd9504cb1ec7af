// The messages gateway replicas exchange on NATS subject `kvgate.<cluster>.load` (docs/
// design.md §11): each replica's own load changes (a request routed, its first token, its
// end), a heartbeat every second, and its tenants' usage (§13) as it changes. One compact JSON
// object per message, so `nats sub` shows them as they are.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kvgate::cluster {

// The first three in routing::LoadChange::Kind's order (load_sync.cc converts by value).
enum class DeltaKind : uint8_t { kRouted, kFirstToken, kFinished, kHeartbeat, kUsage };

// One tenant's use of one replica (docs/design.md §13), shared so that limits hold fleet-wide.
struct TenantUsage {
  std::string tenant;      // the tenant's configured name (the same on every replica)
  uint32_t requests = 0;   // requests it started since the replica's last report
  int64_t tokens = 0;      // tokens charged since then, less what settling gave back
  uint32_t in_flight = 0;  // its requests in the replica now
  bool operator==(const TenantUsage&) const = default;
};

struct LoadDelta {
  DeltaKind kind = DeltaKind::kHeartbeat;
  uint64_t instance = 0;  // random per process: a replica knows its own messages by it
  uint16_t origin = 0;    // the replica's request-id origin (top 16 bits of its ids)
  uint64_t seq = 0;       // the replica's message count: a gap means messages were lost
  // kRouted, kFirstToken, kFinished:
  uint64_t request = 0;
  // kRouted: where, and the load it adds there (routing::LoadView::OnRouted's terms).
  std::string worker;  // the worker record's id (slots differ between replicas)
  uint32_t dp_rank = 0;
  uint32_t prefill_tokens = 0;  // prompt tokens not predicted cached
  uint32_t decode_blocks = 0;
  // The prompt's marks (routing::PrefixMarks: its full blocks and a few chained block hashes),
  // so that peers count it as soon-cached there too; optional.
  uint32_t prefix_blocks = 0;
  std::vector<uint64_t> prefix_hashes;
  // kHeartbeat:
  std::string replica;  // a name for people (host:port of the replica)
  uint64_t in_flight = 0;
  // kUsage:
  std::vector<TenantUsage> usage;
};

std::string EncodeDelta(const LoadDelta& delta);
Status DecodeDelta(std::string_view text, LoadDelta* delta);

}  // namespace kvgate::cluster
