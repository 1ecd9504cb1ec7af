// Decodes one msgpack EventBatch payload (every variant in docs/design.md §3) in a single pass
// with msgpack-cxx's visitor API: no intermediate object tree, ids written straight into
// their final storage.
#pragma once

#include <string_view>

#include "common/status.h"
#include "wire/event.h"

namespace kvgate::wire {

// Fills `out` (cleared first) from `payload`. Returns a non-OK status only when the payload
// is not an EventBatch at all; a bad event becomes an EventKind::kInvalid entry with its
// index and reason while every other event of the batch is still decoded.
Status DecodeEventBatch(std::string_view payload, DecodedBatch& out);

}  // namespace kvgate::wire
