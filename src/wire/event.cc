#include "wire/event.h"

namespace kvgate::wire {

std::string_view TierName(Tier tier) {
  switch (tier) {
    case Tier::kDevice:
      return "device";
    case Tier::kHost:
      return "host";
    case Tier::kDisk:
      return "disk";
    case Tier::kExternal:
      return "external";
  }
  return "device";
}

void DecodedBatch::Clear() {
  ts = 0;
  dp_rank.reset();
  events.clear();
  hashes.clear();
  tokens.clear();
  text.clear();
  extra_keys.clear();
  copy_counts.clear();
}

}  // namespace kvgate::wire
