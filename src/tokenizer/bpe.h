// The BPE model of a HF tokenizer: vocabulary, merge ranks, and the merge loop over one
// pre-token, with a per-word cache (the same words recur across prompts).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace kvgate::tokenizer {

// Lets string-keyed maps be probed with std::string_view (absl's own string_view is a
// different type in Debian's build).
struct StringViewHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
struct StringViewEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const { return a == b; }
};
template <typename V>
using StringMap = absl::flat_hash_map<std::string, V, StringViewHash, StringViewEq>;

class Bpe {
 public:
  struct Options {
    bool byte_fallback = false;   // unknown chars become <0xXX> byte tokens
    bool ignore_merges = false;   // a word found whole in the vocab is one token
    std::optional<uint32_t> unk;  // id for unknown chars (without byte fallback)
    std::string continuing_subword_prefix;
    std::string end_of_word_suffix;
  };

  Bpe(StringMap<uint32_t> vocab, std::vector<std::pair<std::string, std::string>> merges,
      Options options);

  // Appends the ids of one pre-token (already in the model's alphabet, e.g. byte-level).
  void EncodeWord(std::string_view word, std::vector<uint32_t>& out) const;

  std::optional<uint32_t> Id(std::string_view token) const;
  const std::string* Token(uint32_t id) const;
  size_t size() const { return vocab_.size(); }
  // A merge references a token missing from the vocabulary (set while loading).
  const std::string& load_error() const { return load_error_; }

 private:
  struct Merge {
    uint32_t rank;
    uint32_t id;
  };
  static uint64_t PairKey(uint32_t a, uint32_t b) { return (uint64_t{a} << 32) | b; }
  void MergeWord(std::string_view word, std::vector<uint32_t>& out) const;

  StringMap<uint32_t> vocab_;
  std::vector<const std::string*> by_id_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  Options options_;
  std::string load_error_;
  uint32_t byte_tokens_[256];  // <0xXX> ids, when byte fallback is on
  mutable std::mutex cache_mu_;
  mutable StringMap<std::vector<uint32_t>> cache_;
};

}  // namespace kvgate::tokenizer
