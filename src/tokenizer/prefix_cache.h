// Long conversations at constant cost: remembers the ids of recent long texts at their
// resume points (Tokenizer::ResumePoint), so a text that extends one seen before (the next
// turn of a chat, rendered again whole) is tokenized only past their common prefix. The ids
// are those of Tokenizer::Encode(text, false), always. Memory is bounded by a byte budget
// (least recently used texts go first); what a client sends can only churn it. Thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "tokenizer/tokenizer.h"

namespace kvgate::tokenizer {

class PrefixCache {
 public:
  // Texts shorter than this are tokenized whole and not remembered: they are cheap.
  static constexpr size_t kMinBytes = 4096;

  PrefixCache(const Tokenizer& tokenizer, size_t byte_budget);

  struct Use {
    size_t reused_bytes = 0;  // of the text, not tokenized again
    size_t reused_ids = 0;
  };
  // Encode(text, /*add_special_tokens=*/false) into `ids`.
  Status Encode(std::string_view text, std::vector<uint32_t>* ids, Use* use = nullptr);

  size_t bytes() const;
  size_t entries() const;
  struct Totals {
    uint64_t texts = 0;            // long texts encoded
    uint64_t reused_bytes = 0;     // of those, bytes not tokenized again
    uint64_t tokenized_bytes = 0;  // bytes tokenized
  };
  Totals totals() const;

 private:
  struct Entry {
    std::string text;
    std::vector<uint32_t> ids;
    std::vector<Tokenizer::ResumePoint> points;
    std::vector<uint64_t> keys;  // where it is filed (prefix hashes)
    uint64_t serial = 0;
    size_t bytes() const {
      return text.size() + ids.size() * sizeof(uint32_t) +
             points.size() * sizeof(Tokenizer::ResumePoint) + 128;
    }
  };
  using Lru = std::list<Entry>;  // most recent first

  // Hashes of text's prefixes of kMinBytes * 2^k bytes, shortest first.
  static std::vector<uint64_t> PrefixKeys(std::string_view text);
  // The remembered text sharing the longest prefix with `text` (by whole resume points), and
  // the point to resume from; end() if none helps.
  Lru::iterator Find(std::string_view text, const std::vector<uint64_t>& keys,
                     Tokenizer::ResumePoint* resume);
  void Insert(Entry entry);
  void File(Lru::iterator it, uint64_t key);  // findable under `key`, most recent first
  void EvictOverBudget();
  void Erase(Lru::iterator it);

  const Tokenizer& tokenizer_;
  const size_t budget_;
  mutable std::mutex mu_;
  Lru lru_;
  // Prefix hash -> texts with that prefix, most recent first (a few at most).
  std::unordered_map<uint64_t, std::vector<Lru::iterator>> by_prefix_;
  size_t bytes_ = 0;
  Totals totals_;
  uint64_t next_serial_ = 1;
};

}  // namespace kvgate::tokenizer
