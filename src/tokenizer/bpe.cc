#include "tokenizer/bpe.h"

#include <fmt/format.h>

#include <queue>

namespace kvgate::tokenizer {
namespace {

constexpr size_t kCacheLimit = 200000;

size_t Utf8Length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}

}  // namespace

Bpe::Bpe(StringMap<uint32_t> vocab, std::vector<std::pair<std::string, std::string>> merges,
         Options options)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  uint32_t max_id = 0;
  for (const auto& [token, id] : vocab_) max_id = std::max(max_id, id);
  by_id_.assign(vocab_.empty() ? 0 : max_id + 1, nullptr);
  for (const auto& [token, id] : vocab_) by_id_[id] = &token;
  merges_.reserve(merges.size());
  for (uint32_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    auto ia = vocab_.find(a), ib = vocab_.find(b);
    std::string joined = a + b;
    if (!options_.continuing_subword_prefix.empty() &&
        b.starts_with(options_.continuing_subword_prefix)) {
      joined = a + b.substr(options_.continuing_subword_prefix.size());
    }
    auto ij = vocab_.find(joined);
    if (ia == vocab_.end() || ib == vocab_.end() || ij == vocab_.end()) {
      load_error_ = fmt::format("merge '{} {}' uses a token missing from the vocabulary", a, b);
      return;
    }
    merges_.try_emplace(PairKey(ia->second, ib->second), Merge{rank, ij->second});
  }
  for (int b = 0; b < 256; ++b) {
    auto it = vocab_.find(fmt::format("<0x{:02X}>", b));
    byte_tokens_[b] = it == vocab_.end() ? UINT32_MAX : it->second;
  }
}

std::optional<uint32_t> Bpe::Id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* Bpe::Token(uint32_t id) const {
  return id < by_id_.size() ? by_id_[id] : nullptr;
}

void Bpe::EncodeWord(std::string_view word, std::vector<uint32_t>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (auto id = Id(word)) {
      out.push_back(*id);
      return;
    }
  }
  {
    std::lock_guard lock(cache_mu_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<uint32_t> ids;
  MergeWord(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard lock(cache_mu_);
  if (cache_.size() >= kCacheLimit) cache_.clear();
  cache_.emplace(word, std::move(ids));
}

void Bpe::MergeWord(std::string_view word, std::vector<uint32_t>& out) const {
  struct Symbol {
    uint32_t id;
    int prev, next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (size_t i = 0; i < word.size();) {
    const size_t len = std::min(Utf8Length(static_cast<unsigned char>(word[i])), word.size() - i);
    std::string piece(word.substr(i, len));
    if (!options_.end_of_word_suffix.empty() && i + len == word.size()) {
      piece += options_.end_of_word_suffix;
    }
    if (!options_.continuing_subword_prefix.empty() && i > 0) {
      piece = options_.continuing_subword_prefix + piece;
    }
    auto it = vocab_.find(piece);
    if (it != vocab_.end()) {
      symbols.push_back({it->second, 0, 0, true});
    } else if (options_.byte_fallback) {
      bool all = true;
      for (size_t b = 0; b < len; ++b)
        all &= byte_tokens_[static_cast<uint8_t>(word[i + b])] != UINT32_MAX;
      if (all) {
        for (size_t b = 0; b < len; ++b) {
          symbols.push_back({byte_tokens_[static_cast<uint8_t>(word[i + b])], 0, 0, true});
        }
      } else if (options_.unk) {
        symbols.push_back({*options_.unk, 0, 0, true});
      }
    } else if (options_.unk) {
      // Consecutive unknown chars collapse into one unk, as HF does.
      if (symbols.empty() || symbols.back().id != *options_.unk) {
        symbols.push_back({*options_.unk, 0, 0, true});
      }
    }
    i += len;
  }
  const int n = static_cast<int>(symbols.size());
  for (int i = 0; i < n; ++i) {
    symbols[i].prev = i - 1;
    symbols[i].next = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    uint32_t rank;
    int pos;
    uint32_t left, right, merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](int pos) {
    if (pos < 0) return;
    const int next = symbols[pos].next;
    if (next < 0) return;
    auto it = merges_.find(PairKey(symbols[pos].id, symbols[next].id));
    if (it != merges_.end()) {
      queue.push({it->second.rank, pos, symbols[pos].id, symbols[next].id, it->second.id});
    }
  };
  for (int i = 0; i < n; ++i) consider(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.pos];
    if (!left.alive || left.id != c.left || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    if (right.id != c.right) continue;
    left.id = c.merged;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.pos;
    consider(left.prev);
    consider(c.pos);
  }
  for (const Symbol& s : symbols) {
    if (s.alive) out.push_back(s.id);
  }
}

}  // namespace kvgate::tokenizer
