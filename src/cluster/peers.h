// The peer replicas a gateway hears from, by request-id origin: which are alive (a peer
// silent for the timeout is gone) and whether a peer's message count jumped (messages were
// lost, so what it contributed can no longer be trusted). Pure logic, for exact tests.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace kvgate::cluster {

class Peers {
 public:
  using Clock = std::chrono::steady_clock;

  enum class Verdict : uint8_t {
    kApply,          // in order: apply the message
    kResetThenApply  // after a gap (or from a peer that had gone silent): forget the peer's
                     // contributions first, then apply
  };
  Verdict OnMessage(uint16_t origin, uint64_t seq, Clock::time_point now);
  // Removes and returns the peers last heard before `now - timeout`.
  std::vector<uint16_t> Expire(Clock::time_point now, Clock::duration timeout);
  size_t size() const { return last_.size(); }

 private:
  struct Last {
    uint64_t seq;
    Clock::time_point heard;
  };
  absl::flat_hash_map<uint16_t, Last> last_;
};

}  // namespace kvgate::cluster
