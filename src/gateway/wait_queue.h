// Requests waiting for a worker (docs/design.md §13): when every worker that could serve a
// request is busy, it waits here, bounded in number and time. Who goes next: the highest
// tenant priority; within it, deficit round robin between tenants by tokens (a tenant
// sending ten times the tokens does not get ten times the turns; a tenant with nothing
// waiting goes first when a request of its arrives); within a tenant, arrival order. A request
// whose client left is dropped. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace kvgate::gateway {

class WaitQueue {
 public:
  using Clock = std::chrono::steady_clock;
  // Routes and starts the request; false: still no worker free (it keeps waiting).
  using TryStart = std::function<bool()>;
  // It leaves without a worker: timed out, its client left, or the gateway stops.
  enum class Exit : uint8_t { kTimedOut, kClientLeft, kStopped };
  using Leave = std::function<void(Exit)>;

  struct Options {
    size_t max_size = 1024;
    std::chrono::milliseconds timeout{30'000};
    uint64_t quantum_tokens = 4096;  // tokens a tenant may start per round-robin turn
  };

  explicit WaitQueue(Options options);
  ~WaitQueue() { Close(); }
  // Every waiting request leaves with kStopped; nothing waits from here on (Push is refused,
  // Pump does nothing).
  void Close();

  struct Ticket {
    uint32_t tenant;
    int priority;
    uint64_t tokens;
    TryStart start;
    Leave leave;
    std::shared_ptr<std::atomic<bool>> gone;  // set when the client leaves
  };
  // False when the queue is full (the caller answers 503).
  bool Push(Ticket ticket);
  // Starts waiting requests, in order, until one finds no free worker. Safe to call from
  // within a start (a request that ends at once): that pump runs after the current one.
  void Pump();
  size_t size() const;
  // Requests waiting, by tenant (tenants with none are left out).
  std::map<uint32_t, size_t> WaitingByTenant() const;

 private:
  struct Waiting {
    Ticket ticket;
    Clock::time_point arrived;
  };
  // One priority: tenants in round-robin order, each with its queue and deficit.
  struct Level {
    std::deque<uint32_t> turn;
    std::map<uint32_t, std::deque<Waiting>> queues;
    std::map<uint32_t, uint64_t> deficit;
    bool new_turn = true;            // the front tenant has not had this turn's quantum yet
    std::set<uint32_t> interrupted;  // turns cut short by a sparse tenant (see Push)
  };
  void PumpLocked(std::vector<Leave>& left);
  void Sweep();  // timeouts and clients that left (on the sweeper thread)
  void Drop(Level& level, uint32_t tenant);

  const Options options_;
  mutable std::mutex mu_;
  std::map<int, Level, std::greater<>> levels_;  // highest priority first
  size_t size_ = 0;
  std::atomic<bool> pump_again_{false};            // a start() of the running pump pumped again
  std::atomic<std::thread::id> pumping_thread_{};  // the thread running PumpLocked, if any
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread sweeper_;
};

}  // namespace kvgate::gateway
