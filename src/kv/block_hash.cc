#include "kv/block_hash.h"

#include <bit>
#include <cstring>

namespace kvgate::kv {

static_assert(std::endian::native == std::endian::little,
              "token ids and chained hashes are hashed as their in-memory little-endian bytes");

uint64_t BlockHashSeed(std::string_view lora_name, std::string_view cache_salt) {
  uint64_t seed = kDefaultSeed;
  if (!lora_name.empty()) seed += XXH3_64bits_withSeed(lora_name.data(), lora_name.size(), 0);
  if (!cache_salt.empty()) seed += XXH3_64bits_withSeed(cache_salt.data(), cache_salt.size(), 1);
  return seed;
}

void AppendLocalBlockHashes(std::span<const uint32_t> tokens, uint32_t block_size, uint64_t seed,
                            bool eagle, std::vector<uint64_t>& out) {
  const size_t blocks = NumHashedBlocks(tokens.size(), block_size, eagle);
  const size_t window = (block_size + (eagle ? 1 : 0)) * sizeof(uint32_t);
  out.reserve(out.size() + blocks);
  for (size_t i = 0; i < blocks; ++i) {
    out.push_back(XXH3_64bits_withSeed(tokens.data() + i * block_size, window, seed));
  }
}

void SequenceHashes(std::span<const uint64_t> local, std::vector<uint64_t>& out) {
  out.reserve(out.size() + local.size());
  uint64_t seq = 0;
  for (size_t i = 0; i < local.size(); ++i) {
    seq = i == 0 ? local[0] : ChainSequenceHash(seq, local[i]);
    out.push_back(seq);
  }
}

}  // namespace kvgate::kv
