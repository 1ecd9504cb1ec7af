#include "kv/prefix_index.h"

#include <algorithm>
#include <bit>
#include <mutex>

#include "absl/container/inlined_vector.h"
#include "kv/block_hash.h"

namespace kvgate::kv {
namespace {

constexpr uint32_t kTierBits = NodeTable::kTierBits;
constexpr uint32_t kTierMask = (1u << wire::kNumTiers) - 1;

uint32_t TierBit(wire::Tier tier) { return 1u << static_cast<uint32_t>(tier); }

// Node keys: the root node's key is the first local hash, a child's key mixes its parent's
// key with its own local hash. The keys never leave the index, so they need not be the
// sequence hashes of docs/design.md §4 (XXH3 per block, ~5 ns of serial latency per block
// in Match); what they need, given local hashes that are themselves XXH3 outputs: a
// bijective mix of the parent (no short cycles along repeated blocks), no symmetry between
// (a, b) and (b, a), and a few cycles of latency.
uint64_t ChildKey(uint64_t parent_key, uint64_t local_hash) {
  uint64_t x = parent_key + 0x9E3779B97F4A7C15ull;  // so that parent 0 does not stay 0
  x ^= x >> 32;
  x *= 0xD6E8FEB86659FD93ull;
  return x ^ local_hash;
}

// Holder lists are nearly always one or two words: compared inline, not through memcmp.
bool SameHolders(std::span<const uint32_t> a, std::span<const uint32_t> b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return false;
  }
  return true;
}

}  // namespace

PrefixIndex::PrefixIndex(uint32_t block_size) : block_size_(block_size) {}

uint32_t PrefixIndex::SlotFor(WorkerKey worker) {
  auto [it, inserted] = slot_of_.try_emplace(worker, 0);
  if (!inserted) return it->second;
  uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  slots_[slot].key = worker;
  slots_[slot].live = true;
  it->second = slot;
  return slot;
}

void PrefixIndex::ApplyBatch(WorkerKey worker, const wire::DecodedBatch& batch, ApplyStats& stats) {
  uint32_t slot;
  {
    std::unique_lock lock(mu_);
    slot = SlotFor(worker);
  }
  for (const wire::Event& e : batch.events) {
    if (e.kind == wire::EventKind::kDropped || e.kind == wire::EventKind::kInvalid) continue;
    unmapped_.clear();
    // Only the node table is shared with readers: an event's hashing and its engine-hash
    // map updates (this thread's own) happen outside the lock, which covers just the node
    // updates. Locked per event, not per batch: readers wait for at most one event.
    if (e.kind == wire::EventKind::kStored) {
      if (!StoredKeys(slot, batch, e, stats)) continue;
      MapStored(slot, batch, e);
    } else if (e.kind == wire::EventKind::kRemoved) {
      MapRemoved(slot, batch, e, stats);
    }
    std::unique_lock lock(mu_);
    WorkerBlocks& wb = slots_[slot];
    switch (e.kind) {
      case wire::EventKind::kStored:
        AttachStored(slot, e);
        stats.stored_blocks += node_ops_.size();
        break;
      case wire::EventKind::kRemoved:
        DetachRemoved(slot, e, stats);
        break;
      case wire::EventKind::kCleared:
        ClearSlot(slot);
        ++stats.cleared;
        break;
      case wire::EventKind::kDropped:
      case wire::EventKind::kInvalid:
        break;
    }
    wb.map_capacity = wb.engine_to_seq.capacity();
    lock.unlock();
    // A removed block's map entry goes once the node no longer lists it.
    for (uint64_t engine_hash : unmapped_) {
      wb.engine_to_seq.erase(engine_hash);
      if (!wb.salt_of.empty()) wb.salt_of.erase(engine_hash);
    }
  }
}

bool PrefixIndex::StoredKeys(uint32_t slot, const wire::DecodedBatch& batch, const wire::Event& e,
                             ApplyStats& stats) {
  const auto engine_hashes = batch.BlockHashes(e);
  const auto tokens = batch.TokenIds(e);
  if (e.block_size != block_size_) {
    ++stats.block_size_mismatch;
    return false;
  }
  if (tokens.size() != engine_hashes.size() * block_size_ + (e.is_eagle ? 1 : 0)) {
    ++stats.token_count_mismatch;
    return false;
  }
  const WorkerBlocks& wb = slots_[slot];
  uint64_t key = 0;
  bool chained = false;
  // The seed is additive (docs/design.md §4): the salt's term is kept apart so that a
  // chain's later stores, which do not name the salt, inherit it from their parent.
  salt_scratch_ = BlockHashSeed({}, batch.CacheSalt(e)) - kDefaultSeed;
  if (e.has_parent) {
    auto parent = wb.engine_to_seq.find(e.parent_hash);
    if (parent == wb.engine_to_seq.end()) {
      ++stats.unknown_parent;
      return false;
    }
    key = parent->second;
    chained = true;
    if (!e.has_cache_salt && !wb.salt_of.empty()) {
      auto salt = wb.salt_of.find(e.parent_hash);
      if (salt != wb.salt_of.end()) salt_scratch_ = salt->second;
    }
  }
  const auto name = batch.LoraName(e);
  const uint64_t seed = BlockHashSeed(name ? *name : std::string_view{}) + salt_scratch_;
  local_scratch_.clear();
  AppendLocalBlockHashes(tokens, block_size_, seed, e.is_eagle, local_scratch_);
  if (e.is_eagle && !has_eagle_blocks()) has_eagle_blocks_.store(true, std::memory_order_relaxed);
  for (uint64_t& h : local_scratch_) {  // local hashes -> node keys, in place
    key = chained ? ChildKey(key, h) : h;
    chained = true;
    h = key;
    nodes_.Prefetch(key);  // for AttachStored (only this thread changes the table's layout)
  }
  return true;
}

void PrefixIndex::MapStored(uint32_t slot, const wire::DecodedBatch& batch, const wire::Event& e) {
  const auto engine_hashes = batch.BlockHashes(e);
  WorkerBlocks& wb = slots_[slot];
  for (uint64_t engine_hash : engine_hashes) wb.engine_to_seq.prefetch(engine_hash);
  node_ops_.clear();
  for (size_t i = 0; i < engine_hashes.size(); ++i) {
    const uint64_t key = local_scratch_[i];
    auto [it, inserted] = wb.engine_to_seq.try_emplace(engine_hashes[i], key);
    uint64_t displaced = 0;
    if (!inserted && it->second != key) {
      // The engine reused a hash for other content: the old block is gone.
      displaced = it->second;
      it->second = key;
      wb.extra_copies.erase({engine_hashes[i], static_cast<uint8_t>(e.medium)});
    } else if (!inserted && (TiersHeld(key, slot) & TierBit(e.medium)) != 0) {
      ++wb.extra_copies[{engine_hashes[i], static_cast<uint8_t>(e.medium)}];  // another copy
    }
    if (salt_scratch_ != 0) {
      wb.salt_of[engine_hashes[i]] = salt_scratch_;
    } else if (!wb.salt_of.empty()) {
      wb.salt_of.erase(engine_hashes[i]);
    }
    node_ops_.push_back({key, displaced});
  }
}

uint32_t PrefixIndex::TiersHeld(uint64_t key, uint32_t slot) const {
  for (uint32_t word : nodes_.Find(key)) {
    if ((word >> kTierBits) == slot) return word & kTierMask;
  }
  return 0;
}

void PrefixIndex::AttachStored(uint32_t slot, const wire::Event& e) {
  const uint32_t bit = TierBit(e.medium);
  for (const NodeOp& op : node_ops_) {
    if (op.displaced != 0) nodes_.Detach(op.displaced, slot, kTierMask);
    nodes_.Attach(op.key, slot, bit);
  }
}

void PrefixIndex::MapRemoved(uint32_t slot, const wire::DecodedBatch& batch, const wire::Event& e,
                             ApplyStats& stats) {
  WorkerBlocks& wb = slots_[slot];
  node_ops_.clear();
  const auto engine_hashes = batch.BlockHashes(e);
  const auto copies_left = batch.RemainingCopyCounts(e);  // empty unless the engine sent them
  for (size_t i = 0; i < engine_hashes.size(); ++i) {
    const uint64_t engine_hash = engine_hashes[i];
    auto it = wb.engine_to_seq.find(engine_hash);
    if (it == wb.engine_to_seq.end()) {
      ++stats.unknown_removal;
      continue;
    }
    // Copies still held once this one goes: the engine's own count wins over ours. While
    // any is left, the block stays.
    const std::pair<uint64_t, uint8_t> copy_key{engine_hash, static_cast<uint8_t>(e.medium)};
    uint32_t left = 0;
    if (!copies_left.empty()) {
      left = copies_left[i];
    } else if (!wb.extra_copies.empty()) {
      auto copies = wb.extra_copies.find(copy_key);
      if (copies != wb.extra_copies.end()) left = copies->second;
    }
    if (left > 1) {
      wb.extra_copies[copy_key] = left - 1;
    } else if (!wb.extra_copies.empty()) {
      wb.extra_copies.erase(copy_key);
    }
    if (left > 0) {
      ++stats.copies_removed;
      continue;
    }
    node_ops_.push_back({it->second, 0, engine_hash});
  }
}

void PrefixIndex::DetachRemoved(uint32_t slot, const wire::Event& e, ApplyStats& stats) {
  const uint32_t bit = TierBit(e.medium);
  for (const NodeOp& op : node_ops_) {
    if (nodes_.Detach(op.key, slot, bit) == 0) unmapped_.push_back(op.engine_hash);
    ++stats.removed_blocks;
  }
}

void PrefixIndex::ClearSlot(uint32_t slot) {
  WorkerBlocks& wb = slots_[slot];
  for (const auto& [engine_hash, seq] : wb.engine_to_seq) nodes_.Detach(seq, slot, kTierMask);
  // Erase entry by entry rather than clear(): clear() frees a large table, and a cleared
  // worker (AllBlocksCleared, restart) fills up again at once.
  for (auto it = wb.engine_to_seq.begin(); it != wb.engine_to_seq.end();) {
    wb.engine_to_seq.erase(it++);
  }
  wb.salt_of.clear();
  wb.extra_copies.clear();
}

void PrefixIndex::ClearWorker(WorkerKey worker) {
  std::unique_lock lock(mu_);
  auto it = slot_of_.find(worker);
  if (it != slot_of_.end()) ClearSlot(it->second);
}

void PrefixIndex::RemoveWorker(uint32_t worker) {
  std::unique_lock lock(mu_);
  for (uint32_t slot = 0; slot < slots_.size(); ++slot) {
    WorkerBlocks& wb = slots_[slot];
    if (!wb.live || wb.key.worker != worker) continue;
    ClearSlot(slot);
    absl::flat_hash_map<uint64_t, uint64_t>().swap(wb.engine_to_seq);  // release memory
    slot_of_.erase(wb.key);
    wb.live = false;
    free_slots_.push_back(slot);
  }
}

void PrefixIndex::Match(std::span<const uint64_t> local_hashes, std::vector<Overlap>& out) const {
  out.clear();
  const size_t n = local_hashes.size();
  if (n == 0) return;
  absl::InlinedVector<uint64_t, 256> keys(n);  // node keys, computed before taking the lock
  keys[0] = local_hashes[0];
  for (size_t i = 1; i < n; ++i) keys[i] = ChildKey(keys[i - 1], local_hashes[i]);

  struct Candidate {
    uint32_t slot;
    uint32_t tier;  // the tier it holds the current run's blocks on
    std::array<uint32_t, wire::kNumTiers> blocks;
  };
  absl::InlinedVector<Candidate, 16> active;
  // Lookups are independent cache misses in a large table: each node is prefetched kAhead
  // lookups before it is read.
  constexpr size_t kAhead = 16;
  std::shared_lock lock(mu_);
  for (size_t i = 0; i < std::min(kAhead, n); ++i) nodes_.Prefetch(keys[i]);
  // Along a prefix, consecutive nodes nearly always have the very same holders with the
  // same tiers: such a run [run_start, i) is counted once, and the candidates are merged
  // with a node's holders only where they change.
  std::span<const uint32_t> run_holders = nodes_.Find(keys[0]);
  for (uint32_t word : run_holders) {
    active.push_back(Candidate{
        word >> kTierBits, static_cast<uint32_t>(std::countr_zero(word & kTierMask)), {}});
  }
  uint64_t run_word = nodes_.HoldersWord(keys[0]);
  size_t run_start = 0;
  size_t i = 1;
  for (; i < n && !active.empty(); ++i) {
    for (; i < n; ++i) {  // the common case, kept tight
      if (i + kAhead < n) nodes_.Prefetch(keys[i + kAhead]);
      if (nodes_.HoldersWord(keys[i]) != run_word) break;
    }
    if (i == n) break;
    const std::span<const uint32_t> holders = nodes_.Find(keys[i]);
    if (SameHolders(holders, run_holders)) continue;  // a node of more than two holders
    for (Candidate& c : active) c.blocks[c.tier] += static_cast<uint32_t>(i - run_start);
    run_start = i;
    if (holders.empty()) break;
    // Merge the sorted candidates with the node's sorted holders: a candidate missing here
    // has reached the end of its prefix.
    size_t kept = 0;
    auto h = holders.begin();
    for (size_t j = 0; j < active.size(); ++j) {
      Candidate& c = active[j];
      while (h != holders.end() && (*h >> kTierBits) < c.slot) ++h;
      if (h != holders.end() && (*h >> kTierBits) == c.slot) {
        c.tier = static_cast<uint32_t>(std::countr_zero(*h & kTierMask));
        if (kept != j) active[kept] = c;  // compact only once someone has dropped out
        ++kept;
      } else {
        out.push_back(Overlap{slots_[c.slot].key, c.blocks});
      }
    }
    active.resize(kept);
    run_holders = holders;
    run_word = nodes_.HoldersWord(keys[i]);
  }
  for (Candidate& c : active) {
    c.blocks[c.tier] += static_cast<uint32_t>(i - run_start);
    out.push_back(Overlap{slots_[c.slot].key, c.blocks});
  }
}

std::vector<std::pair<WorkerKey, std::array<uint64_t, wire::kNumTiers>>> PrefixIndex::BlocksByTier()
    const {
  std::shared_lock lock(mu_);
  std::vector<std::array<uint64_t, wire::kNumTiers>> by_slot(slots_.size());
  nodes_.ForEachHolder([&](uint32_t word) {
    const uint32_t slot = word >> kTierBits;
    if (slot >= by_slot.size()) return;
    for (int t = 0; t < wire::kNumTiers; ++t) by_slot[slot][t] += (word >> t) & 1;
  });
  std::vector<std::pair<WorkerKey, std::array<uint64_t, wire::kNumTiers>>> out;
  for (uint32_t slot = 0; slot < slots_.size(); ++slot) {
    if (slots_[slot].live) out.emplace_back(slots_[slot].key, by_slot[slot]);
  }
  return out;
}

IndexStats PrefixIndex::Stats() const {
  std::shared_lock lock(mu_);
  IndexStats s;
  s.nodes = nodes_.size();
  s.entries = nodes_.holders();
  s.approx_bytes = nodes_.memory_bytes();
  for (const WorkerBlocks& wb : slots_) {
    if (!wb.live) continue;
    ++s.workers;
    s.approx_bytes += wb.map_capacity * (sizeof(std::pair<uint64_t, uint64_t>) + 1);
  }
  return s;
}

}  // namespace kvgate::kv
