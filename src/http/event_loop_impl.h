// EventLoops' Asio side, shared by the server and the client (src/http only).
#pragma once

#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/basic_stream_socket.hpp>
#include <boost/asio/basic_waitable_timer.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "http/event_loop.h"

namespace kvgate::http {

// Sockets, timers and coroutines are typed with the loops' own executor: Asio's default,
// the type-erased any_io_executor, is copied, queried and destroyed on every operation,
// which showed in the gateway's profile.
using LoopExecutor = boost::asio::io_context::executor_type;
using LoopSocket = boost::asio::basic_stream_socket<boost::asio::ip::tcp, LoopExecutor>;
using LoopTimer = boost::asio::basic_waitable_timer<
    std::chrono::steady_clock, boost::asio::wait_traits<std::chrono::steady_clock>, LoopExecutor>;
template <typename T>
using Task = boost::asio::awaitable<T, LoopExecutor>;
// Completion token: a coroutine awaits an operation's results as a tuple, errors included.
constexpr auto kAwaitNoThrow = boost::asio::as_tuple(boost::asio::use_awaitable_t<LoopExecutor>{});

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
