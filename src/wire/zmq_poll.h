// zmq::poll for the event subscriber's and publisher's loops: a signal arriving on the
// polling thread (SIGTERM to stop the process can land on any thread) wakes it like a
// timeout instead of throwing out of the thread and aborting the process.
#pragma once

#include <cerrno>
#include <chrono>
#include <zmq.hpp>

namespace kvgate::wire {

// Items not ready keep revents 0, as after a timeout.
inline void PollIgnoringSignals(zmq::pollitem_t* items, size_t count,
                                std::chrono::milliseconds timeout) {
  try {
    zmq::poll(items, count, timeout);
  } catch (const zmq::error_t& e) {
    if (e.num() != EINTR) throw;
  }
}

}  // namespace kvgate::wire
