// Feeds arbitrary bytes to the EventBatch decoder: it must never crash, and every event it
// returns must point inside its batch's arenas.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "wire/decode.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static kvgate::wire::DecodedBatch batch;
  const std::string_view payload(reinterpret_cast<const char*>(data), size);
  if (!kvgate::wire::DecodeEventBatch(payload, batch).ok()) return 0;
  for (const auto& e : batch.events) {
    if (e.block_hashes.offset + e.block_hashes.size > batch.hashes.size() ||
        e.token_ids.offset + e.token_ids.size > batch.tokens.size() ||
        e.lora_name.offset + e.lora_name.size > batch.text.size()) {
      std::abort();
    }
  }
  return 0;
}
