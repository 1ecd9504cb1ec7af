// Ordering logic for one engine's KV-event stream, free of sockets so it can be tested
// exactly: applies batches in sequence order, detects gaps (and asks for a replay), buffers
// live batches while a replay runs, drops duplicates, and recognises engine restarts.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace kvgate::events {

// What the state machine asks its owner to do. Calls happen in order.
class StreamActions {
 public:
  virtual ~StreamActions() = default;
  virtual void Apply(uint64_t seq, std::string_view payload) = 0;
  virtual void Restart() = 0;                     // drop everything the worker had
  virtual void RequestReplay(uint64_t from) = 0;  // ask the engine for seq >= from
};

struct StreamCounters {
  uint64_t batches = 0;           // applied
  uint64_t gaps = 0;              // live seq jumped ahead
  uint64_t replays = 0;           // replay requests sent
  uint64_t replayed_batches = 0;  // applied from a replay
  uint64_t lost_batches = 0;      // never recovered (no replay, or the engine no longer had them)
  uint64_t duplicates = 0;
  uint64_t restarts = 0;
};

class StreamState {
 public:
  StreamState(StreamActions& actions, bool replay_available)
      : actions_(actions), replay_available_(replay_available) {}

  void OnLive(uint64_t seq, std::string_view payload);
  void OnReplay(uint64_t seq, std::string_view payload);
  // The end marker arrived, or the replay timed out: continue with the buffered batches.
  void OnReplayEnd();
  // On (re)subscribing: ask for what the engine published before the subscription took
  // effect. A ZMQ subscriber misses everything sent before it joined, and with no later
  // batch to reveal the gap, an idle engine's cache would stay unknown.
  void CatchUp();

  bool replaying() const { return replaying_; }
  std::optional<uint64_t> last_applied() const { return last_; }
  const StreamCounters& counters() const { return counters_; }

 private:
  void ApplyInOrder(uint64_t seq, std::string_view payload, bool replayed);
  // Asks for [from, until): the gap before the live batch `until`.
  void StartReplay(uint64_t from, uint64_t until);

  StreamActions& actions_;
  const bool replay_available_;
  std::optional<uint64_t> last_;
  bool replaying_ = false;
  uint64_t replay_until_ = 0;                 // replayed batches must come before this seq
  std::map<uint64_t, std::string> buffered_;  // live batches held during a replay
  StreamCounters counters_;
};

}  // namespace kvgate::events
