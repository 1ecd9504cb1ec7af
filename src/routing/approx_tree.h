// The `approx` baseline's view of the caches (SGLang-router style): what each worker
// probably holds, built only from the router's own past decisions, with LRU eviction at a
// fixed capacity. It never sees KV events, which is the point of comparing against it.
#pragma once

#include <cstdint>
#include <list>
#include <span>

#include "absl/container/flat_hash_map.h"
#include "kv/prefix_index.h"

namespace kvgate::routing {

class ApproxTree {
 public:
  explicit ApproxTree(size_t capacity_blocks_per_worker) : capacity_(capacity_blocks_per_worker) {}

  // Leading sequence hashes `worker` is believed to hold.
  uint32_t MatchLength(kv::WorkerKey worker, std::span<const uint64_t> sequence_hashes) const;
  // Records that `worker` now holds these prefixes (most recently used).
  void Insert(kv::WorkerKey worker, std::span<const uint64_t> sequence_hashes);
  size_t Size(kv::WorkerKey worker) const;
  void RemoveWorker(kv::WorkerKey worker) { trees_.erase(worker); }

 private:
  struct Tree {
    std::list<uint64_t> lru;  // front = most recent
    absl::flat_hash_map<uint64_t, std::list<uint64_t>::iterator> where;
  };
  size_t capacity_;
  absl::flat_hash_map<kv::WorkerKey, Tree> trees_;
};

}  // namespace kvgate::routing
