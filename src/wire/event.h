// Typed KV-cache events as engines publish them (docs/design.md §3), decoded into one
// reusable batch whose events point into shared arenas, so steady-state decoding allocates
// nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvgate::wire {

// Where a block lives. Order matters: lower is better (the index credits device most).
enum class Tier : uint8_t { kDevice = 0, kHost = 1, kDisk = 2, kExternal = 3 };
inline constexpr int kNumTiers = 4;
std::string_view TierName(Tier tier);

enum class EventKind : uint8_t {
  kStored,
  kRemoved,
  kCleared,
  kDropped,  // valid, but describes KV that is not prefix-reusable (e.g. sliding window)
  kInvalid,  // could not be decoded; the rest of the batch is unaffected
};

// A half-open range into one of the DecodedBatch arenas.
struct Slice {
  uint32_t offset = 0;
  uint32_t size = 0;
};

struct Event {
  EventKind kind = EventKind::kInvalid;
  Tier medium = Tier::kDevice;
  bool is_eagle = false;    // token ids came as bigram pairs (EAGLE)
  bool has_parent = false;  // parent_block_hash was present and not nil
  bool has_lora_name = false;
  bool has_cache_salt = false;   // SGLang's metadata map or vLLM's first-block keys name a salt
  bool has_copy_counts = false;  // removal: remaining_copy_counts was sent
  bool unknown_medium = false;   // medium string not recognised (treated as device)
  uint32_t index = 0;            // position in the batch's event array
  uint32_t block_size = 0;
  uint32_t group_idx = 0;
  uint64_t parent_hash = 0;
  Slice block_hashes;           // into DecodedBatch::hashes
  Slice token_ids;              // into DecodedBatch::tokens
  Slice lora_name;              // into DecodedBatch::text
  Slice cache_salt;             // into DecodedBatch::text
  Slice extra_keys;             // into DecodedBatch::extra_keys: the first block's string leaves
  Slice remaining_copy_counts;  // into DecodedBatch::copy_counts: copies left per removed hash
  std::string message;          // kInvalid: the error; kDropped: the reason
};

// One decoded EventBatch. Reuse one object across Decode() calls: Clear() keeps capacity.
struct DecodedBatch {
  double ts = 0;
  std::optional<int64_t> dp_rank;
  std::vector<Event> events;
  std::vector<uint64_t> hashes;
  std::vector<uint32_t> tokens;
  std::string text;
  std::vector<Slice> extra_keys;  // each a slice of `text`
  std::vector<uint32_t> copy_counts;

  void Clear();
  std::span<const uint64_t> BlockHashes(const Event& e) const {
    return {hashes.data() + e.block_hashes.offset, e.block_hashes.size};
  }
  std::span<const uint32_t> TokenIds(const Event& e) const {
    return {tokens.data() + e.token_ids.offset, e.token_ids.size};
  }
  std::string_view Text(Slice s) const { return {text.data() + s.offset, s.size}; }
  std::optional<std::string_view> LoraName(const Event& e) const {
    if (!e.has_lora_name) return std::nullopt;
    return Text(e.lora_name);
  }
  std::span<const uint32_t> RemainingCopyCounts(const Event& e) const {
    if (!e.has_copy_counts) return {};
    return {copy_counts.data() + e.remaining_copy_counts.offset, e.remaining_copy_counts.size};
  }
  std::string_view CacheSalt(const Event& e) const {
    return e.has_cache_salt ? Text(e.cache_salt) : std::string_view{};
  }
};

// Folding of SGLang's wide image-pad ids into the u32 pad range (docs/design.md §3, §4).
inline constexpr uint32_t kMultimodalPadBase = 1'000'000;
inline constexpr uint32_t FoldWideTokenId(uint64_t id) {
  return kMultimodalPadBase + static_cast<uint32_t>(id & ((uint64_t{1} << 30) - 1));
}

}  // namespace kvgate::wire
