// The prefix index: which worker holds which prefix of KV blocks, on which tier, learned
// from KV events (docs/design.md §5). It answers, for a request's local block hashes, how many
// leading blocks each (worker, dp_rank) holds.
//
// Shape: a radix tree over local block hashes whose nodes are keyed by a chained key (a
// node *is* a prefix; its parent edge is implicit in the chain), stored in one NodeTable. Each node
// lists its holders as packed (slot, tier mask) words. Per worker, a map from the engine's own
// block hash to the node resolves removals and parent links; kvgate never matches on engine hashes.
//
// Concurrency: one writer applies events under an exclusive lock taken per event (hashing a
// store's tokens happens before it); readers match under a shared lock and never block
// each other, and waiting readers go before the writer's next event. An event is a few
// blocks (well under a microsecond locked), so a reader waits at most that long;
// bench/index_bench measures match latency with a writer running.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <shared_mutex>
#include <span>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/spin_shared_mutex.h"
#include "kv/node_table.h"
#include "wire/event.h"

namespace kvgate::kv {

struct WorkerKey {
  uint32_t worker = 0;
  uint32_t dp_rank = 0;
  friend bool operator==(const WorkerKey&, const WorkerKey&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const WorkerKey& k) {
    return H::combine(std::move(h), k.worker, k.dp_rank);
  }
};

// Leading blocks a worker holds for one request, each counted on its best tier.
struct Overlap {
  WorkerKey worker;
  std::array<uint32_t, wire::kNumTiers> blocks{};  // indexed by wire::Tier
  uint32_t total() const { return blocks[0] + blocks[1] + blocks[2] + blocks[3]; }
};

// What applying events did; the stream layer adds these to its per-worker counters.
struct ApplyStats {
  uint64_t stored_blocks = 0;
  uint64_t removed_blocks = 0;
  uint64_t cleared = 0;
  uint64_t unknown_parent = 0;        // stores skipped whole: parent never stored here
  uint64_t block_size_mismatch = 0;   // stores skipped: engine block size != index block size
  uint64_t token_count_mismatch = 0;  // stores skipped: token ids do not fill the blocks
  uint64_t unknown_removal = 0;       // removed hashes this worker never stored (ignored)
  uint64_t copies_removed = 0;        // removals of one copy of a block still held in another
};

struct IndexStats {
  size_t nodes = 0;    // distinct prefixes (blocks) held by at least one worker
  size_t entries = 0;  // (block, worker) pairs
  size_t workers = 0;
  size_t approx_bytes = 0;  // heap memory of the index's tables
};

class PrefixIndex {
 public:
  explicit PrefixIndex(uint32_t block_size);
  PrefixIndex(const PrefixIndex&) = delete;
  PrefixIndex& operator=(const PrefixIndex&) = delete;

  uint32_t block_size() const { return block_size_; }

  // --- writer side (one thread) ---
  // Applies every stored/removed/cleared event of `batch` for `worker` (invalid and dropped
  // events are the decoder's business and are skipped here).
  void ApplyBatch(WorkerKey worker, const wire::DecodedBatch& batch, ApplyStats& stats);
  // Drops every block of one (worker, dp_rank): AllBlocksCleared.
  void ClearWorker(WorkerKey worker);
  // Drops every block of every dp rank of `worker`: engine restart, worker removed.
  void RemoveWorker(uint32_t worker);

  // --- reader side (any thread) ---
  // Per worker holding at least the first block: leading blocks held, by tier. Order is
  // unspecified. `out` is cleared first.
  void Match(std::span<const uint64_t> local_hashes, std::vector<Overlap>& out) const;
  // Whether any worker has stored EAGLE blocks (each hashed over one token more than the
  // block: docs/design.md §4). Their blocks match only a request's hashes computed the same way.
  bool has_eagle_blocks() const { return has_eagle_blocks_.load(std::memory_order_relaxed); }

  IndexStats Stats() const;
  // Blocks each (worker, dp rank) holds, by tier (a block on two tiers counts on both).
  // Scans the whole index: for reports, not for routing.
  std::vector<std::pair<WorkerKey, std::array<uint64_t, wire::kNumTiers>>> BlocksByTier() const;

 private:
  struct WorkerBlocks {
    WorkerKey key;
    bool live = false;
    // Engine block hash -> node key. Written by the writer thread outside the lock (readers
    // never look at it); map_capacity is what Stats reads, updated under the lock.
    absl::flat_hash_map<uint64_t, uint64_t> engine_to_seq;
    size_t map_capacity = 0;
    // Engine hash -> its chain's cache-salt term of the seed, for salted chains only: vLLM
    // names the salt in a chain's first block, and the blocks stored later under it are
    // seeded by it all the same.
    absl::flat_hash_map<uint64_t, uint64_t> salt_of;
    // (engine hash, tier) -> copies held beyond the first. Engines can hold two physical
    // copies of one block (two requests computed it at once), storing and removing each.
    absl::flat_hash_map<std::pair<uint64_t, uint8_t>, uint32_t> extra_copies;
  };

  uint32_t SlotFor(WorkerKey worker);
  // An event in steps: what needs no lock (hashing, this worker's engine-hash map) into
  // the scratch below, then the node updates under the writer lock.
  // A store's node keys into local_scratch_; false: the store is skipped, counted in `stats`.
  bool StoredKeys(uint32_t slot, const wire::DecodedBatch& batch, const wire::Event& e,
                  ApplyStats& stats);
  void MapStored(uint32_t slot, const wire::DecodedBatch& batch, const wire::Event& e);
  void AttachStored(uint32_t slot, const wire::Event& e);  // locked
  void MapRemoved(uint32_t slot, const wire::DecodedBatch& batch, const wire::Event& e,
                  ApplyStats& stats);
  void DetachRemoved(uint32_t slot, const wire::Event& e, ApplyStats& stats);  // locked
  void ClearSlot(uint32_t slot);
  uint32_t TiersHeld(uint64_t key, uint32_t slot) const;  // slot's tier bits on node key

  const uint32_t block_size_;
  std::atomic<bool> has_eagle_blocks_{false};  // set by the writer, never cleared
  mutable SpinSharedMutex mu_;
  NodeTable nodes_;
  std::vector<WorkerBlocks> slots_;
  absl::flat_hash_map<WorkerKey, uint32_t> slot_of_;
  std::vector<uint32_t> free_slots_;
  // Writer scratch, reused across events.
  struct NodeOp {
    uint64_t key;              // node to attach (store) or detach (removal)
    uint64_t displaced = 0;    // store: the node an engine hash named before, now gone
    uint64_t engine_hash = 0;  // removal: the engine hash that named `key`
  };
  std::vector<uint64_t> local_scratch_;  // a store's node keys
  uint64_t salt_scratch_ = 0;            // a store's cache-salt seed term (0: unsalted)
  std::vector<NodeOp> node_ops_;
  std::vector<uint64_t> unmapped_;  // engine hashes whose last tier went
};

}  // namespace kvgate::kv
