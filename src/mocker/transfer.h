// A worker's part in disaggregated serving (docs/design.md §12) and the simulated cost of
// moving KV between workers: shared by the mocker's server and the offline replay.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string_view>

#include "discovery/worker_role.h"

namespace kvgate::mocker {

// The worker roles of the records (one enum for both).
using Role = discovery::WorkerRole;

// A bootstrap port of "any free one" (the in-process fleet's), read back from the server.
inline constexpr uint16_t kAnyPort = 65535;

struct TransferConfig {
  Role role = Role::kBoth;
  uint16_t bootstrap_port = 0;  // SGLang, prefill: where decode workers ask for rooms
  double gbps = 100;            // KV transfer bandwidth between workers (RDMA-class)
  uint32_t kv_bytes_per_token = 128 << 10;
};

// How long moving `blocks` blocks of KV takes, in simulated ms (divided by `speedup`).
inline double TransferMs(const TransferConfig& config, uint32_t blocks, uint32_t block_size,
                         double speedup) {
  if (blocks == 0 || config.gbps <= 0) return 0;
  const double bytes = static_cast<double>(blocks) * block_size * config.kv_bytes_per_token;
  return bytes * 8 / (config.gbps * 1e9) * 1000 / std::max(speedup, 1e-9);
}

}  // namespace kvgate::mocker
