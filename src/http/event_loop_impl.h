// EventLoops' Asio side, shared by the server and the client (src/http only).
#pragma once

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <memory>
#include <thread>
#include <vector>

#include "http/event_loop.h"

namespace kvgate::http {

struct EventLoops::Impl {
  struct Loop {
    size_t index = 0;
    boost::asio::io_context ioc{1};  // one thread: no locking inside Asio
    boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work{
        ioc.get_executor()};
  };
  std::vector<std::unique_ptr<Loop>> loops;
  std::vector<std::thread> threads;
  std::atomic<size_t> next{0};

  // The loop running on this thread, or null off the loops.
  static Loop*& Current() {
    thread_local Loop* current = nullptr;
    return current;
  }
  // The current loop when called on one, else the next in turn.
  Loop& Pick() {
    if (Loop* c = Current();
        c != nullptr && c->index < loops.size() && loops[c->index].get() == c) {
      return *c;
    }
    return *loops[next.fetch_add(1, std::memory_order_relaxed) % loops.size()];
  }
};

}  // namespace kvgate::http
