// The simulated engine's KV block pool: fixed-size blocks with prefix caching by sequence
// hash, reference counts, and LRU eviction of cached blocks nobody references. Every
// cache change becomes a KV event, exactly as an engine would publish it.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "wire/encode.h"

namespace kvgate::mocker {

class BlockPool {
 public:
  // `eagle`: stored events carry each block's tokens plus the next one, as bigram pairs.
  BlockPool(uint32_t num_blocks, uint32_t block_size, bool eagle = false);

  uint32_t num_blocks() const { return static_cast<uint32_t>(blocks_.size()); }
  uint32_t block_size() const { return block_size_; }
  // Blocks referenced by running sequences.
  uint32_t used() const { return used_; }
  // Blocks that Allocate() can still hand out (free, or cached and unreferenced).
  uint32_t available() const { return num_blocks() - used_; }
  size_t cached() const { return by_hash_.size(); }

  // Leading blocks of `sequence_hashes` that are cached, at most `limit`.
  uint32_t CachedPrefix(std::span<const uint64_t> sequence_hashes, uint32_t limit) const;
  // References the cached block with this hash (it must be cached); returns its id.
  uint32_t AcquireCached(uint64_t sequence_hash);
  // A block for new content, evicting the least recently used unreferenced cached block
  // if nothing is free. nullopt when every block is referenced.
  std::optional<uint32_t> Allocate();
  // Block `id` now holds full content `tokens` (one more with `eagle`) with this hash: cache it and
  // record a BlockStored event (parent: the previous block's hash; nullopt at a sequence's start;
  // `lora_name` and `cache_salt`, when not empty, are the request's, as engines report them).
  void Commit(uint32_t id, uint64_t sequence_hash, std::optional<uint64_t> parent,
              std::span<const uint32_t> tokens, std::string_view lora_name = {},
              std::string_view cache_salt = {});
  void Release(uint32_t id);
  // Drops every cached block (referenced blocks stay allocated) and records AllBlocksCleared.
  void ClearCache();

  // Events since the last call, in order, with consecutive stores of one chain merged.
  std::vector<wire::OutEvent> TakeEvents();

 private:
  struct Block {
    uint32_t refs = 0;
    bool cached = false;
    uint64_t hash = 0;
    std::list<uint32_t>::iterator lru;  // valid when cached && refs == 0
  };
  void Evict(uint32_t id);

  const uint32_t block_size_;
  const bool eagle_;
  std::vector<Block> blocks_;
  std::vector<uint32_t> free_;  // neither referenced nor cached
  std::list<uint32_t> lru_;     // cached, unreferenced; front = least recently used
  absl::flat_hash_map<uint64_t, uint32_t> by_hash_;
  uint32_t used_ = 0;
  std::vector<wire::OutEvent> events_;
};

}  // namespace kvgate::mocker
