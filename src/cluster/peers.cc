#include "cluster/peers.h"

namespace kvgate::cluster {

Peers::Verdict Peers::OnMessage(uint16_t origin, uint64_t seq, Clock::time_point now) {
  auto [it, first] = last_.try_emplace(origin, Last{seq, now});
  if (first) return Verdict::kApply;  // a new peer (or one back after expiring)
  Last& last = it->second;
  // Anything but the next seq: messages were lost, or the peer restarted (seq back to 0).
  const bool in_order = seq == last.seq + 1;
  last = {seq, now};
  return in_order ? Verdict::kApply : Verdict::kResetThenApply;
}

std::vector<uint16_t> Peers::Expire(Clock::time_point now, Clock::duration timeout) {
  std::vector<uint16_t> gone;
  for (const auto& [origin, last] : last_) {
    if (now - last.heard > timeout) gone.push_back(origin);
  }
  for (uint16_t origin : gone) last_.erase(origin);
  return gone;
}

}  // namespace kvgate::cluster
