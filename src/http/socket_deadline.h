// A socket's read/write deadline that costs nothing per operation (src/http only). A timer
// per read or write (Beast's basic_stream) enqueues, cancels and completes a timer wait every
// time, which showed in the gateway's profile. Here Set() and Clear() only store a time; the
// one timer is armed when a deadline comes earlier than it, and when it fires it looks at
// the deadline again: past, the socket is closed (its pending operation fails and expired()
// says why); later, it waits again. Under steady traffic the timer fires about once per
// shortest timeout and is otherwise left alone. Loop thread only.
#pragma once

#include <algorithm>
#include <chrono>
#include <memory>

#include "http/event_loop_impl.h"

namespace kvgate::http {

class SocketDeadline {
 public:
  using Clock = std::chrono::steady_clock;

  explicit SocketDeadline(LoopSocket& socket) : state_(std::make_shared<State>(socket)) {}
  ~SocketDeadline() {
    state_->socket = nullptr;  // a wait already completed must not touch the socket
    state_->timer.cancel();
  }
  SocketDeadline(const SocketDeadline&) = delete;
  SocketDeadline& operator=(const SocketDeadline&) = delete;

  // The socket is closed if `timeout` passes before the next Set() or Clear().
  void Set(Clock::duration timeout) {
    State& s = *state_;
    const Clock::time_point now = Clock::now();
    s.deadline = now + timeout;
    s.shortest = std::min(s.shortest, timeout);
    // Armed no later than any deadline a Set() could give from now on: the next ones then
    // find the timer early enough, and leave it alone.
    if (!s.armed || s.deadline < s.armed_at) Arm(state_, now + s.shortest);
  }
  void Clear() { state_->deadline = Clock::time_point::max(); }
  // The deadline passed and closed the socket.
  bool expired() const { return state_->expired; }

 private:
  struct State {
    explicit State(LoopSocket& s) : socket(&s), timer(s.get_executor()) {}
    LoopSocket* socket;
    LoopTimer timer;
    Clock::time_point deadline = Clock::time_point::max();
    Clock::time_point armed_at{};
    Clock::duration shortest = Clock::duration::max();
    uint64_t generation = 0;  // of the current wait; older completions are stale
    bool armed = false;
    bool expired = false;
  };

  static void Arm(const std::shared_ptr<State>& state, Clock::time_point at) {
    State& s = *state;
    s.armed = true;
    s.armed_at = at;
    s.timer.expires_at(at);
    s.timer.async_wait([state, generation = ++s.generation](boost::system::error_code ec) {
      State& s = *state;
      if (ec || generation != s.generation || s.socket == nullptr) return;
      s.armed = false;
      const Clock::time_point now = Clock::now();
      if (s.deadline <= now) {
        s.expired = true;
        boost::system::error_code ignored;
        s.socket->close(ignored);  // the pending operation ends with an error
      } else if (s.deadline != Clock::time_point::max()) {
        Arm(state, std::min(s.deadline, now + s.shortest));
      }
    });
  }

  std::shared_ptr<State> state_;  // shared with the timer's pending wait
};

// A connection's socket and its deadline. Not movable: the deadline points at the socket.
struct TimedSocket {
  explicit TimedSocket(LoopSocket s) : socket(std::move(s)) {}
  explicit TimedSocket(LoopExecutor executor) : socket(executor) {}
  LoopSocket socket;
  SocketDeadline deadline{socket};
};

}  // namespace kvgate::http
