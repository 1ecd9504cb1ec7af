#include "kv/node_table.h"

#include <algorithm>

namespace kvgate::kv {
namespace {

constexpr size_t kInitialCapacity = 1024;
constexpr uint32_t kTierMask = (1u << NodeTable::kTierBits) - 1;

uint32_t SlotOf(uint32_t word) { return word >> NodeTable::kTierBits; }

}  // namespace

NodeTable::NodeTable() : entries_(kInitialCapacity), shift_(64 - 10) {}

size_t NodeTable::memory_bytes() const {
  size_t bytes = entries_.capacity() * sizeof(Entry);
  for (const auto& list : overflow_) bytes += list.capacity() * sizeof(uint32_t);
  return bytes + overflow_.capacity() * sizeof(overflow_[0]);
}

void NodeTable::Attach(uint64_t key, uint32_t slot, uint32_t tier_bit) {
  key = Normalize(key);
  if ((size_ + 1) * 4 > entries_.size() * 3) Grow();
  Entry& e = entries_[Locate(key)];
  const uint32_t word = (slot << kTierBits) | tier_bit;
  if (e.key == 0) {
    e = Entry{key, {word, 0}};
    ++size_;
    ++holders_;
    return;
  }
  if (e.h[0] != kOverflow) {
    if (SlotOf(e.h[0]) == slot) {
      e.h[0] |= tier_bit;
      return;
    }
    if (e.h[1] != 0 && SlotOf(e.h[1]) == slot) {
      e.h[1] |= tier_bit;
      return;
    }
    ++holders_;
    if (e.h[1] == 0) {  // keep the two inline holders sorted by slot
      if (word < e.h[0]) {
        e.h[1] = e.h[0];
        e.h[0] = word;
      } else {
        e.h[1] = word;
      }
      return;
    }
    const uint32_t index = NewOverflow();
    std::vector<uint32_t>& list = overflow_[index];
    list = {e.h[0], e.h[1]};
    list.insert(std::lower_bound(list.begin(), list.end(), word), word);
    e.h[0] = kOverflow;
    e.h[1] = index;
    return;
  }
  std::vector<uint32_t>& list = overflow_[e.h[1]];
  auto it = std::lower_bound(list.begin(), list.end(), slot << kTierBits);
  if (it != list.end() && SlotOf(*it) == slot) {
    *it |= tier_bit;
    return;
  }
  list.insert(it, word);
  ++holders_;
}

uint32_t NodeTable::Detach(uint64_t key, uint32_t slot, uint32_t tier_mask) {
  key = Normalize(key);
  const size_t index = Locate(key);
  Entry& e = entries_[index];
  if (e.key == 0) return 0;
  if (e.h[0] == kOverflow) {
    std::vector<uint32_t>& list = overflow_[e.h[1]];
    auto it = std::lower_bound(list.begin(), list.end(), slot << kTierBits);
    if (it == list.end() || SlotOf(*it) != slot) return 0;
    *it &= ~tier_mask;
    const uint32_t left = *it & kTierMask;
    if (left != 0) return left;
    list.erase(it);
    --holders_;
    if (list.size() == 2) {  // back inline
      const uint32_t pool = e.h[1];
      e.h[0] = list[0];
      e.h[1] = list[1];
      list.clear();
      free_overflow_.push_back(pool);
    }
    return 0;
  }
  uint32_t* word = SlotOf(e.h[0]) == slot                  ? &e.h[0]
                   : e.h[1] != 0 && SlotOf(e.h[1]) == slot ? &e.h[1]
                                                           : nullptr;
  if (word == nullptr) return 0;
  *word &= ~tier_mask;
  const uint32_t left = *word & kTierMask;
  if (left != 0) return left;
  --holders_;
  if (word == &e.h[0]) {
    e.h[0] = e.h[1];
    e.h[1] = 0;
  } else {
    e.h[1] = 0;
  }
  if (e.h[0] == 0) Erase(index);
  return 0;
}

void NodeTable::Erase(size_t index) {
  // Backward-shift deletion: pull later entries of the probe run into the hole when their
  // home position allows it, so lookups never need tombstones.
  const size_t mask = entries_.size() - 1;
  size_t hole = index;
  size_t i = index;
  while (true) {
    i = (i + 1) & mask;
    if (entries_[i].key == 0) break;
    const size_t home = Home(entries_[i].key);
    // Move entry i into the hole if its home is not within (hole, i] cyclically.
    const bool home_in_range = hole <= i ? (hole < home && home <= i) : (hole < home || home <= i);
    if (!home_in_range) {
      entries_[hole] = entries_[i];
      hole = i;
    }
  }
  entries_[hole] = Entry{};
  --size_;
}

void NodeTable::Grow() {
  std::vector<Entry, HugePageAllocator<Entry>> old(entries_.size() * 2);
  old.swap(entries_);  // `old` now holds the current entries, `entries_` the bigger table
  --shift_;
  const size_t mask = entries_.size() - 1;
  for (const Entry& e : old) {
    if (e.key == 0) continue;
    size_t i = Home(e.key);
    while (entries_[i].key != 0) i = (i + 1) & mask;
    entries_[i] = e;
  }
}

uint32_t NodeTable::NewOverflow() {
  if (!free_overflow_.empty()) {
    const uint32_t index = free_overflow_.back();
    free_overflow_.pop_back();
    return index;
  }
  overflow_.emplace_back();
  return static_cast<uint32_t>(overflow_.size() - 1);
}

}  // namespace kvgate::kv
