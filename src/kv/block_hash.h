// Block hashing exactly as docs/design.md §4: XXH3-64 local hashes over little-endian u32 token
// ids per full block, the LoRA / cache-salt seed, and chained sequence hashes.
#pragma once

#define XXH_INLINE_ALL  // header-only XXH3: no call through the shared library
#include <xxhash.h>

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace kvgate::kv {

inline constexpr uint64_t kDefaultSeed = 1337;

// Seed for a request or event: 1337 + XXH3(lora_name, 0) + XXH3(cache_salt, 1), where an
// absent or empty string contributes 0 (u64 wrap-around).
uint64_t BlockHashSeed(std::string_view lora_name = {}, std::string_view cache_salt = {});

// Appends one hash per full block of `block_size` tokens (a trailing partial block is not
// hashed). With `eagle`, block i covers tokens [i*bs, i*bs + bs + 1): a window one token
// wider than the stride, as EAGLE's bigram KV needs.
void AppendLocalBlockHashes(std::span<const uint32_t> tokens, uint32_t block_size, uint64_t seed,
                            bool eagle, std::vector<uint64_t>& out);

// Number of local hashes AppendLocalBlockHashes produces for `num_tokens`.
inline size_t NumHashedBlocks(size_t num_tokens, uint32_t block_size, bool eagle) {
  if (block_size == 0) return 0;
  if (eagle) return num_tokens == 0 ? 0 : (num_tokens - 1) / block_size;
  return num_tokens / block_size;
}

// seq[i] = XXH3(LE64(seq[i-1]) || LE64(local[i]), 1337), seq[0] = local[0]. Inline: the
// index computes one per block of every request it matches.
inline uint64_t ChainSequenceHash(uint64_t previous, uint64_t local) {
  const uint64_t pair[2] = {previous, local};  // little-endian in memory (checked in .cc)
  return XXH3_64bits_withSeed(pair, sizeof pair, kDefaultSeed);
}
void SequenceHashes(std::span<const uint64_t> local, std::vector<uint64_t>& out);

}  // namespace kvgate::kv
