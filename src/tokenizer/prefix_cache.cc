#include "tokenizer/prefix_cache.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include "tokenizer/bytes.h"

namespace kvgate::tokenizer {
namespace {

constexpr size_t kPerPrefix = 4;  // texts filed under one prefix hash

size_t CommonPrefix(std::string_view a, std::string_view b) {
  const size_t n = std::min(a.size(), b.size());
  constexpr size_t kChunk = 256;
  size_t i = 0;
  while (i + kChunk <= n && std::memcmp(a.data() + i, b.data() + i, kChunk) == 0) i += kChunk;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

PrefixCache::PrefixCache(const Tokenizer& tokenizer, size_t byte_budget)
    : tokenizer_(tokenizer), budget_(byte_budget) {}

std::vector<uint64_t> PrefixCache::PrefixKeys(std::string_view text) {
  std::vector<uint64_t> keys;
  XXH3_state_t* state = XXH3_createState();  // (opaque in Debian's header)
  XXH3_64bits_reset(state);
  size_t hashed = 0;
  for (size_t level = kMinBytes; level <= text.size(); level *= 2) {
    XXH3_64bits_update(state, text.data() + hashed, level - hashed);
    hashed = level;
    keys.push_back(XXH3_64bits_digest(state) ^ level);
  }
  XXH3_freeState(state);
  return keys;
}

PrefixCache::Lru::iterator PrefixCache::Find(std::string_view text,
                                             const std::vector<uint64_t>& keys,
                                             Tokenizer::ResumePoint* resume) {
  for (auto key = keys.rbegin(); key != keys.rend(); ++key) {
    auto bucket = by_prefix_.find(*key);
    if (bucket == by_prefix_.end()) continue;
    Lru::iterator best = lru_.end();
    for (Lru::iterator candidate : bucket->second) {
      const size_t common = CommonPrefix(text, candidate->text);
      if (common == text.size() && common == candidate->text.size()) {
        *resume = {static_cast<uint32_t>(common), static_cast<uint32_t>(candidate->ids.size()),
                   static_cast<uint32_t>(common)};
        return candidate;  // the very same text
      }
      // The last point whose ids cannot depend on where the texts differ (`agree` grows
      // with `byte`, so points holding are a prefix of the list).
      auto point =
          std::partition_point(candidate->points.begin(), candidate->points.end(),
                               [&](const Tokenizer::ResumePoint& p) { return p.agree <= common; });
      if (point == candidate->points.begin()) continue;
      --point;
      if (best == lru_.end() || point->byte > resume->byte) {
        best = candidate;
        *resume = *point;
      }
    }
    if (best != lru_.end()) return best;
  }
  return lru_.end();
}

Status PrefixCache::Encode(std::string_view text, std::vector<uint32_t>* ids, Use* use) {
  if (text.size() < kMinBytes) return tokenizer_.Encode(text, false, ids);
  std::vector<uint64_t> keys = PrefixKeys(text);
  Tokenizer::ResumePoint resume{0, 0, 0};
  Entry entry;
  uint64_t extended = 0;  // the serial of a text the new one holds whole
  {
    std::lock_guard lock(mu_);
    Lru::iterator found = Find(text, keys, &resume);
    ++totals_.texts;
    totals_.reused_bytes += resume.byte;
    totals_.tokenized_bytes += text.size() - resume.byte;
    if (found != lru_.end()) {
      lru_.splice(lru_.begin(), lru_, found);  // (iterators stay valid)
      // (room for the rest too: about one id per 2 bytes at most, in practice)
      ids->reserve(resume.ids + (text.size() - resume.byte) / 2 + 16);
      ids->assign(found->ids.begin(), found->ids.begin() + resume.ids);
      if (use) *use = {resume.byte, resume.ids};
      if (resume.byte == text.size() && found->text.size() == text.size()) return Status::Ok();
      entry.points.assign(
          found->points.begin(),
          std::upper_bound(found->points.begin(), found->points.end(), resume.byte,
                           [](size_t b, const Tokenizer::ResumePoint& p) { return b < p.byte; }));
      // The new text holds all of the old one: it serves whatever the old one would.
      if (text.starts_with(found->text)) extended = found->serial;
    } else {
      ids->clear();
      if (use) *use = {};
    }
  }
  if (!IsValidUtf8(text.substr(resume.byte))) {
    ids->clear();
    return Status::Error("input is not valid UTF-8");
  }
  tokenizer_.EncodeFrom(text, resume.byte, ids, &entry.points);
  const size_t new_bytes = text.size() + ids->size() * sizeof(uint32_t);
  if (new_bytes > budget_ / 4) return Status::Ok();  // would crowd out everything else
  std::lock_guard lock(mu_);
  if (extended != 0) {
    // The old text grows into the new one in place: only what is new is copied. (Unless
    // it was evicted meanwhile.)
    auto it = std::find_if(lru_.begin(), lru_.end(),
                           [&](const Entry& e) { return e.serial == extended; });
    if (it != lru_.end()) {
      bytes_ -= it->bytes();
      it->text.append(text.substr(it->text.size()));
      it->ids.resize(resume.ids);
      it->ids.insert(it->ids.end(), ids->begin() + resume.ids, ids->end());
      it->points = std::move(entry.points);
      bytes_ += it->bytes();
      for (size_t level = it->keys.size(); level < keys.size(); ++level) File(it, keys[level]);
      it->keys = std::move(keys);  // (the shorter prefixes' keys are the same)
      lru_.splice(lru_.begin(), lru_, it);
      EvictOverBudget();
      return Status::Ok();
    }
  }
  entry.text.assign(text);
  entry.ids = *ids;
  entry.keys = std::move(keys);
  Insert(std::move(entry));
  return Status::Ok();
}

void PrefixCache::File(Lru::iterator it, uint64_t key) {
  std::vector<Lru::iterator>& bucket = by_prefix_[key];
  bucket.insert(bucket.begin(), it);
  if (bucket.size() > kPerPrefix) bucket.pop_back();  // still cached, no longer found here
}

void PrefixCache::EvictOverBudget() {
  while (bytes_ > budget_ && !lru_.empty()) Erase(std::prev(lru_.end()));
}

void PrefixCache::Insert(Entry entry) {
  bytes_ += entry.bytes();
  entry.serial = next_serial_++;
  lru_.push_front(std::move(entry));
  const Lru::iterator it = lru_.begin();
  for (uint64_t key : it->keys) File(it, key);
  EvictOverBudget();
}

void PrefixCache::Erase(Lru::iterator it) {
  for (uint64_t key : it->keys) {
    auto bucket = by_prefix_.find(key);
    if (bucket == by_prefix_.end()) continue;
    std::erase(bucket->second, it);
    if (bucket->second.empty()) by_prefix_.erase(bucket);
  }
  bytes_ -= it->bytes();
  lru_.erase(it);
}

size_t PrefixCache::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

PrefixCache::Totals PrefixCache::totals() const {
  std::lock_guard lock(mu_);
  return totals_;
}

size_t PrefixCache::entries() const {
  std::lock_guard lock(mu_);
  return lru_.size();
}

}  // namespace kvgate::tokenizer
