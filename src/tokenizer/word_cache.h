// The ids of recently seen pre-tokens, keyed by their bytes as cut from the text (before
// any byte-level mapping), so a known word costs one hash lookup: no copy, no conversion,
// no lock. One cache per thread, serving one tokenizer at a time (the last one used there).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "tokenizer/bpe.h"

namespace kvgate::tokenizer {

class WordCache {
 public:
  // This thread's cache, emptied first if it held another tokenizer's words.
  static WordCache& ForThread(uint64_t tokenizer_serial);

  // Appends the ids of `word` to `ids` when it is known.
  bool Append(std::string_view word, std::vector<uint32_t>& ids) const {
    auto it = words_.find(word);
    if (it == words_.end()) return false;
    ids.insert(ids.end(), ids_.begin() + it->second.offset,
               ids_.begin() + it->second.offset + it->second.count);
    return true;
  }
  void Insert(std::string_view word, std::span<const uint32_t> word_ids);

 private:
  // Bounds: the cache starts over when either is reached.
  static constexpr size_t kMaxWords = 1 << 16;
  static constexpr size_t kMaxIds = 1 << 20;
  struct Run {
    uint32_t offset, count;  // in ids_
  };
  StringMap<Run> words_;
  std::vector<uint32_t> ids_;
  uint64_t owner_ = 0;
};

}  // namespace kvgate::tokenizer
