// Encodes EventBatches the way engines do (vLLM map form, vLLM positional form, SGLang),
// for the mocker and for round-trip tests of the decoder.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "wire/event.h"

namespace kvgate::wire {

enum class EventFormat : uint8_t { kVllmMap, kVllmPositional, kSglang };
enum class HashFormat : uint8_t { kInt, kBytes };  // kBytes: 32-byte digests, like vLLM sha256

struct StoredBlocks {
  std::vector<uint64_t> block_hashes;
  std::optional<uint64_t> parent_hash;
  std::vector<uint64_t> token_ids;  // u64: SGLang writes image pads wider than u32
  uint32_t block_size = 16;
  Tier medium = Tier::kDevice;
  std::optional<std::string> lora_name;
  // The request's salt, as engines write it: SGLang in its metadata map where lora_name
  // goes (every store); vLLM in the first block's extra_keys (stores without a parent).
  std::optional<std::string> cache_salt;
  bool bigram = false;  // write token_ids as EAGLE bigram pairs
};
struct RemovedBlocks {
  std::vector<uint64_t> block_hashes;
  Tier medium = Tier::kDevice;
  std::vector<uint32_t> remaining_copy_counts;  // vLLM's, per hash; empty: not sent
};
struct AllCleared {};
// An event of a type no engine sends, for fault injection (subscribers must skip it alone).
struct UnknownEvent {
  std::string tag = "BlockCorrupted";
};
using OutEvent = std::variant<StoredBlocks, RemovedBlocks, AllCleared, UnknownEvent>;

struct EncodeOptions {
  EventFormat format = EventFormat::kVllmMap;
  HashFormat hash_format = HashFormat::kInt;
};

// Returns the msgpack payload of one batch `[ts, events, dp_rank]`.
std::string EncodeEventBatch(double ts, std::optional<int64_t> dp_rank,
                             std::span<const OutEvent> events, const EncodeOptions& options);

// The msgpack `medium` string engines use for a tier.
std::string_view MediumName(Tier tier);

}  // namespace kvgate::wire
