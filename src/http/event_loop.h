// Threads that each run one event loop. The server spreads connections over them, and a
// fetch the client starts from one of them runs on that same loop: a proxied request is
// read, routed, forwarded and answered on one thread, with no hand-off between threads.
#pragma once

#include <memory>

namespace kvgate::http {

class EventLoops {
 public:
  explicit EventLoops(int threads);
  ~EventLoops();  // stops and joins
  EventLoops(const EventLoops&) = delete;
  EventLoops& operator=(const EventLoops&) = delete;

  // Joins the threads. Work still queued is destroyed with the loops, not run.
  void Stop();

  struct Impl;  // Asio inside: see event_loop_impl.h (src/http only)
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvgate::http
