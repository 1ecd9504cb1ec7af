// The prompts of requests in flight, per worker. A request's blocks are in its worker's
// cache from its prefill until it ends (engines keep a running request's blocks), but they
// reach the prefix index only once the engine has computed and published them. Until then
// the index cannot say that a worker is about to hold a prefix a router just sent there,
// e.g. for the next turn of a conversation that arrives while the previous turn still waits
// in the engine's queue. This table says it, from routing decisions: this gateway's and, as
// their load deltas arrive, its peer replicas'. Thread-safe.
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

// A prompt kept as a few of its chained block hashes (kv::SequenceHashes): those at blocks
// 0, 1, 3, 7, ... (2^k - 1) and its last. A chained hash names its whole prefix, so sharing
// one of them means sharing every block up to it: a prompt that extends one in flight (the
// next turn) matches it in full; one that shares part of it matches at least half of that
// part. Small enough to send to peers with every routed request (about log2(blocks) hashes).
struct PrefixMarks {
  uint32_t blocks = 0;           // the prompt's full blocks
  std::vector<uint64_t> hashes;  // at ForEachPosition(blocks), in order

  static PrefixMarks Of(std::span<const uint64_t> sequence_hashes);
  // Calls `f(position)` for 0, 1, 3, 7, ... below blocks - 1, then blocks - 1.
  template <typename F>
  static void ForEachPosition(uint32_t blocks, F&& f) {
    if (blocks == 0) return;
    for (uint32_t p = 0; p + 1 < blocks; p = 2 * p + 1) f(p);
    f(blocks - 1);
  }
  // Whether `hashes` has one hash per position of `blocks` (what a peer sent may not).
  bool valid() const;
  bool operator==(const PrefixMarks&) const = default;
};

class InFlightPrefixes {
 public:
  void Add(uint64_t request, kv::WorkerKey worker, PrefixMarks marks);
  void Remove(uint64_t request);
  void RemoveWorker(kv::WorkerKey worker);

  // The workers with requests in flight that share a prefix with `sequence_hashes`, and how
  // many leading blocks they share (exactly when the request extends one in flight, at least
  // half otherwise), into `out` (cleared first).
  void Match(std::span<const uint64_t> sequence_hashes,
             std::vector<std::pair<kv::WorkerKey, uint32_t>>& out) const;

  size_t requests() const;

 private:
  struct Request {
    kv::WorkerKey worker;
    PrefixMarks marks;
  };
  void Release(uint64_t id, const Request& r);  // (mu_ held)

  mutable std::mutex mu_;
  absl::flat_hash_map<uint64_t, absl::InlinedVector<uint64_t, 2>> by_mark_;  // -> requests
  absl::flat_hash_map<uint64_t, Request> requests_;
};

}  // namespace kvgate::routing
