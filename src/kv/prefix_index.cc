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
    // Locked per event, not per batch: readers wait for at most one event.
    std::unique_lock lock(mu_);
    switch (e.kind) {
      case wire::EventKind::kStored:
        ApplyStored(slot, batch, e, stats);
        break;
      case wire::EventKind::kRemoved:
        ApplyRemoved(slot, batch, e, stats);
        break;
      case wire::EventKind::kCleared:
        ClearSlot(slot);
        ++stats.cleared;
        break;
      case wire::EventKind::kDropped:
      case wire::EventKind::kInvalid:
        break;
    }
  }
}

void PrefixIndex::ApplyStored(uint32_t slot, const wire::DecodedBatch& batch, const wire::Event& e,
                              ApplyStats& stats) {
  const auto engine_hashes = batch.BlockHashes(e);
  const auto tokens = batch.TokenIds(e);
  if (e.block_size != block_size_) {
    ++stats.block_size_mismatch;
    return;
  }
  if (tokens.size() != engine_hashes.size() * block_size_ + (e.is_eagle ? 1 : 0)) {
    ++stats.token_count_mismatch;
    return;
  }
  WorkerBlocks& wb = slots_[slot];
  uint64_t seq = 0;
  bool chained = false;
  if (e.has_parent) {
    auto parent = wb.engine_to_seq.find(e.parent_hash);
    if (parent == wb.engine_to_seq.end()) {
      ++stats.unknown_parent;
      return;
    }
    seq = parent->second;
    chained = true;
  }
  const auto name = batch.LoraName(e);
  const uint64_t seed = BlockHashSeed(name ? *name : std::string_view{});
  local_scratch_.clear();
  AppendLocalBlockHashes(tokens, block_size_, seed, e.is_eagle, local_scratch_);
  // Chain into node keys in place, then prefetch every slot this event touches: the
  // inserts below are independent cache misses.
  for (uint64_t& h : local_scratch_) {
    seq = chained ? ChainSequenceHash(seq, h) : h;
    chained = true;
    h = seq;
    nodes_.Prefetch(seq);
  }
  for (uint64_t engine_hash : engine_hashes) wb.engine_to_seq.prefetch(engine_hash);
  const uint32_t bit = TierBit(e.medium);
  for (size_t i = 0; i < engine_hashes.size(); ++i) {
    seq = local_scratch_[i];
    auto [it, inserted] = wb.engine_to_seq.try_emplace(engine_hashes[i], seq);
    if (!inserted && it->second != seq) {
      // The engine reused a hash for other content: the old block is gone.
      nodes_.Detach(it->second, slot, kTierMask);
      it->second = seq;
    }
    nodes_.Attach(seq, slot, bit);
  }
  stats.stored_blocks += engine_hashes.size();
}

void PrefixIndex::ApplyRemoved(uint32_t slot, const wire::DecodedBatch& batch, const wire::Event& e,
                               ApplyStats& stats) {
  WorkerBlocks& wb = slots_[slot];
  const uint32_t bit = TierBit(e.medium);
  for (uint64_t engine_hash : batch.BlockHashes(e)) {
    auto it = wb.engine_to_seq.find(engine_hash);
    if (it == wb.engine_to_seq.end()) {
      ++stats.unknown_removal;
      continue;
    }
    if (nodes_.Detach(it->second, slot, bit) == 0) wb.engine_to_seq.erase(it);
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
  if (local_hashes.empty()) return;
  struct Candidate {
    uint32_t slot;
    std::array<uint32_t, wire::kNumTiers> blocks;
  };
  absl::InlinedVector<Candidate, 16> active;
  // Node keys first (pure hashing, no lock), so the lookups can be prefetched ahead: each
  // is an independent cache miss in a large table.
  absl::InlinedVector<uint64_t, 256> seq(local_hashes.size());
  seq[0] = local_hashes[0];
  for (size_t i = 1; i < seq.size(); ++i) seq[i] = ChainSequenceHash(seq[i - 1], local_hashes[i]);
  constexpr size_t kPrefetchAhead = 16;
  std::shared_lock lock(mu_);
  for (size_t i = 0; i < std::min(kPrefetchAhead, seq.size()); ++i) nodes_.Prefetch(seq[i]);
  for (uint32_t word : nodes_.Find(seq[0])) {
    Candidate c{word >> kTierBits, {}};
    c.blocks[std::countr_zero(word & kTierMask)] = 1;
    active.push_back(c);
  }
  for (size_t i = 1; i < seq.size() && !active.empty(); ++i) {
    if (i + kPrefetchAhead < seq.size()) nodes_.Prefetch(seq[i + kPrefetchAhead]);
    const std::span<const uint32_t> holders = nodes_.Find(seq[i]);
    if (holders.empty()) break;
    // Merge the sorted candidate list with the node's sorted holders: a candidate missing
    // here has reached the end of its prefix.
    size_t kept = 0;
    auto h = holders.begin();
    for (size_t j = 0; j < active.size(); ++j) {
      Candidate& c = active[j];
      while (h != holders.end() && (*h >> kTierBits) < c.slot) ++h;
      if (h != holders.end() && (*h >> kTierBits) == c.slot) {
        ++c.blocks[std::countr_zero(*h & kTierMask)];
        if (kept != j) active[kept] = c;  // compact only once someone has dropped out
        ++kept;
      } else {
        out.push_back(Overlap{slots_[c.slot].key, c.blocks});
      }
    }
    active.resize(kept);
  }
  for (const Candidate& c : active) out.push_back(Overlap{slots_[c.slot].key, c.blocks});
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
    s.approx_bytes += wb.engine_to_seq.capacity() * (sizeof(std::pair<uint64_t, uint64_t>) + 1);
  }
  return s;
}

}  // namespace kvgate::kv
