// The prompts of requests in flight, per worker. A request's blocks are in its worker's
// cache from its prefill until it ends (engines keep a running request's blocks), but they
// reach the prefix index only once the engine has computed and published them. Until then
// the index cannot say that a worker is about to hold a prefix this router just sent there,
// e.g. for the next turn of a conversation that arrives while the previous turn still waits
// in the engine's queue. This table says it, from the router's own decisions. Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "kv/prefix_index.h"

namespace kvgate::routing {

class InFlightPrefixes {
 public:
  // `sequence_hashes`: the request's blocks, chained (kv::SequenceHashes).
  void Add(uint64_t request, kv::WorkerKey worker, std::vector<uint64_t> sequence_hashes);
  void Remove(uint64_t request);
  void RemoveWorker(kv::WorkerKey worker);

  // The workers with requests in flight that share a prefix with `sequence_hashes`, and how
  // many leading blocks they share, into `out` (cleared first).
  void Match(std::span<const uint64_t> sequence_hashes,
             std::vector<std::pair<kv::WorkerKey, uint32_t>>& out) const;

  size_t requests() const;

 private:
  struct Holder {
    kv::WorkerKey worker;
    uint32_t requests;  // in flight there with this block
  };
  struct Request {
    kv::WorkerKey worker;
    std::vector<uint64_t> blocks;
  };
  void Release(const Request& r);  // (mu_ held)

  mutable std::mutex mu_;
  absl::flat_hash_map<uint64_t, absl::InlinedVector<Holder, 2>> blocks_;
  absl::flat_hash_map<uint64_t, Request> requests_;
};

}  // namespace kvgate::routing
