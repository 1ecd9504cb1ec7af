// The `seq` frame of KV-event messages (docs/design.md §3): exactly 8 bytes, big-endian u64;
// the replay end marker is seq -1 (all ones).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvgate::wire {

inline constexpr uint64_t kReplayEndSeq = ~uint64_t{0};

inline std::string SeqFrame(uint64_t seq) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((seq >> (56 - 8 * i)) & 0xff);
  return out;
}

// False unless `frame` is exactly 8 bytes.
inline bool ParseSeqFrame(std::string_view frame, uint64_t* seq) {
  if (frame.size() != 8) return false;
  uint64_t v = 0;
  for (unsigned char c : frame) v = (v << 8) | c;
  *seq = v;
  return true;
}

}  // namespace kvgate::wire
