// Active load per worker as the router's own decisions imply it: prefill tokens until a
// request's first token, decode blocks and the request itself until it finishes.
#pragma once

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "kv/prefix_index.h"

namespace kvgate::routing {

using RequestId = uint64_t;

struct WorkerLoad {
  uint64_t prefill_tokens = 0;
  uint64_t decode_blocks = 0;
  uint32_t requests = 0;
};

// Not thread-safe: the Router serialises access.
class LoadTracker {
 public:
  void OnRouted(RequestId id, kv::WorkerKey worker, uint32_t prefill_tokens,
                uint32_t decode_blocks);
  void OnFirstToken(RequestId id);
  void OnFinished(RequestId id);
  void OnFailed(RequestId id) { OnFinished(id); }
  // Forgets a worker's load and its in-flight requests.
  void RemoveWorker(kv::WorkerKey worker);

  WorkerLoad Load(kv::WorkerKey worker) const;
  size_t InFlight() const { return requests_.size(); }

 private:
  struct InFlightRequest {
    kv::WorkerKey worker;
    uint32_t prefill_tokens;  // 0 once the first token arrived
    uint32_t decode_blocks;
  };
  absl::flat_hash_map<RequestId, InFlightRequest> requests_;
  absl::flat_hash_map<kv::WorkerKey, WorkerLoad> loads_;
};

}  // namespace kvgate::routing
