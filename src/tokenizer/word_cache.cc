#include "tokenizer/word_cache.h"

namespace kvgate::tokenizer {

WordCache& WordCache::ForThread(uint64_t tokenizer_serial) {
  thread_local WordCache cache;
  if (cache.owner_ != tokenizer_serial) {
    cache.words_.clear();
    cache.ids_.clear();
    cache.owner_ = tokenizer_serial;
  }
  return cache;
}

void WordCache::Insert(std::string_view word, std::span<const uint32_t> word_ids) {
  if (words_.size() >= kMaxWords || ids_.size() + word_ids.size() > kMaxIds) {
    words_.clear();
    ids_.clear();
  }
  const auto offset = static_cast<uint32_t>(ids_.size());
  ids_.insert(ids_.end(), word_ids.begin(), word_ids.end());
  words_.try_emplace(word, Run{offset, static_cast<uint32_t>(word_ids.size())});
}

}  // namespace kvgate::tokenizer
