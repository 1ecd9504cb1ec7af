#include "events/stream_state.h"

#include <limits>

namespace kvgate::events {
namespace {

// Counters that must not wrap: one absurd seq jump would otherwise reset the sum.
void SaturatingAdd(uint64_t& counter, uint64_t n) {
  counter = n > std::numeric_limits<uint64_t>::max() - counter
                ? std::numeric_limits<uint64_t>::max()
                : counter + n;
}

}  // namespace

void StreamState::OnLive(uint64_t seq, std::string_view payload) {
  if (last_ && seq <= *last_) {
    // A live stream never repeats itself: the engine started over.
    ++counters_.restarts;
    replaying_ = false;
    buffered_.clear();
    last_.reset();
    actions_.Restart();
  }
  if (replaying_) {
    buffered_.emplace(seq, std::string(payload));
    return;
  }
  const uint64_t expected = last_ ? *last_ + 1 : 0;
  if (seq > expected && replay_available_) {
    // Missed batches (or joined late): fetch them, hold this one until they are in.
    if (last_) ++counters_.gaps;
    buffered_.emplace(seq, std::string(payload));
    StartReplay(expected, /*until=*/seq);
    return;
  }
  if (seq > expected && last_) ++counters_.gaps;
  ApplyInOrder(seq, payload, /*replayed=*/false);
}

void StreamState::OnReplay(uint64_t seq, std::string_view payload) {
  if (!replaying_) return;  // a late answer to a replay we already finished
  if ((last_ && seq <= *last_) || seq >= replay_until_) {
    // Already applied, or past the gap the replay fills: a bogus seq there would make the
    // next live batch look like an engine restart.
    ++counters_.duplicates;
    return;
  }
  ApplyInOrder(seq, payload, /*replayed=*/true);
}

void StreamState::OnReplayEnd() {
  if (!replaying_) return;
  replaying_ = false;
  auto buffered = std::move(buffered_);
  buffered_.clear();
  for (auto& [seq, payload] : buffered) {
    if (last_ && seq <= *last_) {
      ++counters_.duplicates;
      continue;
    }
    ApplyInOrder(seq, payload, /*replayed=*/false);
  }
}

void StreamState::CatchUp() {
  if (!replay_available_ || replaying_) return;
  replaying_ = true;  // not counted as a replay: nothing is known to be missing
  replay_until_ = std::numeric_limits<uint64_t>::max();
  actions_.RequestReplay(last_ ? *last_ + 1 : 0);
}

void StreamState::ApplyInOrder(uint64_t seq, std::string_view payload, bool replayed) {
  const uint64_t expected = last_ ? *last_ + 1 : 0;
  if (seq > expected && last_) SaturatingAdd(counters_.lost_batches, seq - expected);
  actions_.Apply(seq, payload);
  last_ = seq;
  ++counters_.batches;
  if (replayed) ++counters_.replayed_batches;
}

void StreamState::StartReplay(uint64_t from, uint64_t until) {
  replaying_ = true;
  replay_until_ = until;
  ++counters_.replays;
  actions_.RequestReplay(from);
}

}  // namespace kvgate::events
