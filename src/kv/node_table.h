// The prefix index's node table: prefix key (sequence hash) -> the workers holding it.
//
// Open addressing with linear probing over 16-byte entries that carry the key *and* up to
// two holders inline, so one prefetch of the home slot brings in everything a lookup reads.
// (absl::flat_hash_map keeps control bytes and slots apart and can only prefetch the start
// of a probe group, which left one serialized cache miss per block in Match.) Nodes held by
// more than two workers keep their holder list in an overflow pool. Deletion shifts entries
// back instead of leaving tombstones.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kv/huge_page_allocator.h"

namespace kvgate::kv {

class NodeTable {
 public:
  // A holder word: (slot << kTierBits) | tier mask. Never 0 (the mask is never empty).
  static constexpr uint32_t kTierBits = 4;

  NodeTable();

  size_t size() const { return size_; }
  // Holder words summed over all nodes: (block, worker) pairs.
  size_t holders() const { return holders_; }
  size_t memory_bytes() const;

  void Prefetch(uint64_t key) const { __builtin_prefetch(&entries_[Home(Normalize(key))]); }

  // Sorted holder words of node `key`; empty if the node does not exist.
  std::span<const uint32_t> Find(uint64_t key) const;

  // Sets `tier_bit` for `slot` on node `key`, creating the node if needed.
  void Attach(uint64_t key, uint32_t slot, uint32_t tier_bit);
  // Clears `tier_mask` for `slot` on node `key`; returns the tier bits `slot` still has there
  // (the node goes away with its last holder).
  uint32_t Detach(uint64_t key, uint32_t slot, uint32_t tier_mask);

 private:
  static constexpr uint32_t kOverflow = 0xFFFFFFFFu;
  struct Entry {
    uint64_t key = 0;        // 0: empty
    uint32_t h[2] = {0, 0};  // two holders, sorted (h[1] == 0: just one); or, when
                             // h[0] == kOverflow, h[1] indexes the overflow pool
  };

  static uint64_t Normalize(uint64_t key) { return key == 0 ? 1 : key; }
  size_t Home(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull) >> shift_; }
  size_t Locate(uint64_t key) const;  // index of key's entry, or of the empty slot ending its run
  void Grow();
  void Erase(size_t index);
  uint32_t NewOverflow();

  std::vector<Entry, HugePageAllocator<Entry>> entries_;
  unsigned shift_;
  size_t size_ = 0;
  size_t holders_ = 0;
  std::vector<std::vector<uint32_t>> overflow_;
  std::vector<uint32_t> free_overflow_;
};

}  // namespace kvgate::kv
