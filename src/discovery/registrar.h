// `kvgate register`: the sidecar that keeps one engine's worker record in etcd while the
// engine is up (docs/design.md §11). Registers once the engine's /health answers 200, under
// a lease it keeps alive; withdraws the record after 3 failed health checks, or on Stop;
// registers again when the engine is back. If the sidecar dies, the lease expires after its
// TTL and etcd deletes the record by itself.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "discovery/worker_record.h"

namespace kvgate::discovery {

struct RegistrarOptions {
  std::string etcd_url;
  std::string prefix = "/kvgate";
  WorkerRecord record;
  int64_t ttl_seconds = 10;
  std::chrono::milliseconds health_interval{1000};
  uint32_t unhealthy_after = 3;  // consecutive failed health checks
};

// Runs until `stop` turns true; then withdraws the record. Errors only for bad options.
Status RunRegistrar(const RegistrarOptions& options, const std::atomic<bool>& stop);

}  // namespace kvgate::discovery
