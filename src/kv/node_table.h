// The prefix index's node table: prefix key (sequence hash) -> the workers holding it.
//
// Open addressing with linear probing over 16-byte entries that carry the key *and* up to
// two holders inline, so one prefetch of the home slot brings in everything a lookup reads.
// (absl::flat_hash_map keeps control bytes and slots apart and can only prefetch the start
// of a probe group, which left one serialized cache miss per block in Match.) Nodes held by
// more than two workers keep their holder list in an overflow pool. Deletion shifts entries
// back instead of leaving tombstones.
#pragma once

#include <bit>
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

  void Prefetch(uint64_t key) const {
    const size_t home = Home(Normalize(key));
    __builtin_prefetch(&entries_[home]);
    __builtin_prefetch(&entries_[(home + kLineEntries) & (entries_.size() - 1)]);
  }

  // Node `key`'s holders packed in one word, for telling cheaply whether two nodes have
  // the same holders: equal words mean equal holder lists (for a node of more than two
  // holders the word names its list, so equal lists can differ in word). 0: no such node.
  uint64_t HoldersWord(uint64_t key) const {
    const Entry& e = entries_[Locate(Normalize(key))];
    return e.key == 0 ? 0 : (uint64_t{e.h[1]} << 32 | e.h[0]);
  }

  // Sorted holder words of node `key`; empty if the node does not exist. Inline: Match
  // calls it once per block.
  std::span<const uint32_t> Find(uint64_t key) const {
    const Entry& e = entries_[Locate(Normalize(key))];
    if (e.key == 0) return {};
    if (e.h[0] == kOverflow) return overflow_[e.h[1]];
    return {e.h, e.h[1] == 0 ? size_t{1} : size_t{2}};
  }

  // Calls `fn(holder_word)` for every holder of every node (a full scan: for reports).
  template <typename Fn>
  void ForEachHolder(Fn&& fn) const {
    for (const Entry& e : entries_) {
      if (e.key == 0) continue;
      for (uint32_t word : e.h[0] == kOverflow ? std::span<const uint32_t>(overflow_[e.h[1]])
                                               : std::span<const uint32_t>(e.h, e.h[1] ? 2 : 1)) {
        fn(word);
      }
    }
  }

  // Sets `tier_bit` for `slot` on node `key`, creating the node if needed.
  void Attach(uint64_t key, uint32_t slot, uint32_t tier_bit);
  // Clears `tier_mask` for `slot` on node `key`; returns the tier bits `slot` still has there
  // (the node goes away with its last holder).
  uint32_t Detach(uint64_t key, uint32_t slot, uint32_t tier_mask);

 private:
  static constexpr uint32_t kOverflow = 0xFFFFFFFFu;
  struct Entry {             // 16 bytes
    uint64_t key = 0;        // 0: empty
    uint32_t h[2] = {0, 0};  // two holders, sorted (h[1] == 0: just one); or, when
                             // h[0] == kOverflow, h[1] indexes the overflow pool
  };

  // Four entries share a 64-byte line; a key's home is the first entry of its line, so a
  // lookup reads the one line its prefetch fetched unless that line has overflowed.
  static constexpr size_t kLineEntries = 4;

  static uint64_t Normalize(uint64_t key) { return key == 0 ? 1 : key; }
  size_t Home(uint64_t key) const {
    return ((key * 0x9E3779B97F4A7C15ull) >> shift_) & ~(kLineEntries - 1);
  }
  // Index of key's entry, or of the empty slot ending its run. A key present is nearly
  // always in its home line: the four keys there are compared without a branch per entry
  // (where in the line it sits is unpredictable); only a key that is absent or has spilled
  // to a later line walks the probe run.
  size_t Locate(uint64_t key) const {
    const size_t home = Home(key);
    const Entry* line = &entries_[home];
    const unsigned hit = static_cast<unsigned>(line[0].key == key) |
                         static_cast<unsigned>(line[1].key == key) << 1 |
                         static_cast<unsigned>(line[2].key == key) << 2 |
                         static_cast<unsigned>(line[3].key == key) << 3;
    if (hit != 0) return home + std::countr_zero(hit);
    const size_t mask = entries_.size() - 1;
    size_t i = home;
    while (entries_[i].key != 0 && entries_[i].key != key) i = (i + 1) & mask;
    return i;
  }
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
