#include "mocker/block_pool.h"

#include <cassert>

namespace kvgate::mocker {

BlockPool::BlockPool(uint32_t num_blocks, uint32_t block_size, bool eagle)
    : block_size_(block_size), eagle_(eagle), blocks_(num_blocks) {
  free_.reserve(num_blocks);
  for (uint32_t i = num_blocks; i-- > 0;) free_.push_back(i);
}

uint32_t BlockPool::CachedPrefix(std::span<const uint64_t> sequence_hashes, uint32_t limit) const {
  uint32_t n = 0;
  while (n < limit && n < sequence_hashes.size() && by_hash_.contains(sequence_hashes[n])) ++n;
  return n;
}

uint32_t BlockPool::AcquireCached(uint64_t sequence_hash) {
  const uint32_t id = by_hash_.at(sequence_hash);
  Block& b = blocks_[id];
  if (b.refs++ == 0) {
    lru_.erase(b.lru);
    ++used_;
  }
  return id;
}

std::optional<uint32_t> BlockPool::Allocate() {
  uint32_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    id = lru_.front();
    Evict(id);
  } else {
    return std::nullopt;
  }
  blocks_[id].refs = 1;
  ++used_;
  return id;
}

void BlockPool::Evict(uint32_t id) {
  Block& b = blocks_[id];
  lru_.erase(b.lru);
  by_hash_.erase(b.hash);
  b.cached = false;
  if (!events_.empty()) {
    if (auto* removed = std::get_if<wire::RemovedBlocks>(&events_.back())) {
      removed->block_hashes.push_back(b.hash);
      return;
    }
  }
  events_.push_back(wire::RemovedBlocks{{b.hash}, wire::Tier::kDevice, {}});
}

void BlockPool::Commit(uint32_t id, uint64_t sequence_hash, std::optional<uint64_t> parent,
                       std::span<const uint32_t> tokens, std::string_view lora_name,
                       std::string_view cache_salt) {
  Block& b = blocks_[id];
  assert(b.refs > 0 && !b.cached);
  // Another sequence may have computed the same content meanwhile: keep the first copy
  // cached; this one stays private and is freed on release.
  if (!by_hash_.try_emplace(sequence_hash, id).second) return;
  b.cached = true;
  b.hash = sequence_hash;
  if (!events_.empty()) {
    auto* stored = std::get_if<wire::StoredBlocks>(&events_.back());
    if (stored != nullptr && parent && stored->block_hashes.back() == *parent &&
        stored->lora_name.value_or("") == lora_name &&
        stored->cache_salt.value_or("") == cache_salt) {
      stored->block_hashes.push_back(sequence_hash);
      // EAGLE windows overlap by one token: the event already ends with this block's first.
      stored->token_ids.insert(stored->token_ids.end(), tokens.begin() + (eagle_ ? 1 : 0),
                               tokens.end());
      return;
    }
  }
  wire::StoredBlocks s;
  s.block_hashes = {sequence_hash};
  s.parent_hash = parent;
  s.token_ids.assign(tokens.begin(), tokens.end());
  s.block_size = block_size_;
  s.bigram = eagle_;
  if (!lora_name.empty()) s.lora_name = std::string(lora_name);
  if (!cache_salt.empty()) s.cache_salt = std::string(cache_salt);
  events_.push_back(std::move(s));
}

void BlockPool::Release(uint32_t id) {
  Block& b = blocks_[id];
  assert(b.refs > 0);
  if (--b.refs > 0) return;
  --used_;
  if (b.cached) {
    b.lru = lru_.insert(lru_.end(), id);  // most recently used at the back
  } else {
    free_.push_back(id);
  }
}

void BlockPool::ClearCache() {
  for (uint32_t id : lru_) {
    blocks_[id].cached = false;
    free_.push_back(id);
  }
  lru_.clear();
  for (auto& [hash, id] : by_hash_) blocks_[id].cached = false;
  by_hash_.clear();
  events_.push_back(wire::AllCleared{});
}

std::vector<wire::OutEvent> BlockPool::TakeEvents() {
  std::vector<wire::OutEvent> out;
  out.swap(events_);
  return out;
}

}  // namespace kvgate::mocker
