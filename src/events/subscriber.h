// Subscribes to every worker's KV-event publisher (ZMQ SUB, plus a DEALER to its replay
// ROUTER when configured) on one background thread, and feeds decoded batches, in sequence
// order, into the prefix index. Workers can be added and removed while it runs.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "events/stream_state.h"
#include "kv/prefix_index.h"
#include "wire/event.h"

namespace kvgate::events {

struct WorkerEndpoints {
  uint32_t worker = 0;
  std::string events;  // e.g. tcp://127.0.0.1:5557
  std::string replay;  // e.g. tcp://127.0.0.1:5558; empty: no replay
  // Set when these endpoints carry one data-parallel rank's events (TensorRT-LLM publishes
  // each attention-DP rank on its own port): that rank, whatever the batches say. A worker
  // then has one stream per rank.
  std::optional<uint32_t> dp_rank;
};

struct WorkerStreamStats {
  StreamCounters stream;
  uint64_t bad_frames = 0;           // wrong frame count or seq length
  uint64_t bad_payloads = 0;         // not an EventBatch
  std::array<uint64_t, 5> events{};  // by wire::EventKind
  uint64_t unknown_medium = 0;
  kv::ApplyStats apply;
  bool caught_up = false;  // the first replay (of what the engine held before) is done
};

struct SubscriberOptions {
  std::chrono::milliseconds replay_timeout{2000};
  std::chrono::milliseconds reconnect_min{100};  // ZMQ's own reconnect backoff, capped
  std::chrono::milliseconds reconnect_max{5000};
};

class Subscriber {
 public:
  // Called on the subscriber thread after each applied batch (e.g. `events listen`).
  using Observer =
      std::function<void(uint32_t worker, uint64_t seq, const wire::DecodedBatch& batch)>;

  // `index` may be null (listen only).
  explicit Subscriber(kv::PrefixIndex* index, SubscriberOptions options = {},
                      Observer observer = nullptr);
  ~Subscriber();
  Subscriber(const Subscriber&) = delete;
  Subscriber& operator=(const Subscriber&) = delete;

  // Adds a stream (replacing the worker's stream for the same rank, if any).
  void AddWorker(const WorkerEndpoints& endpoints);
  // Stops listening to `worker` (every stream) and drops its blocks from the index.
  void RemoveWorker(uint32_t worker);

  // One entry per stream: a worker with a stream per rank has several.
  std::vector<std::pair<uint32_t, WorkerStreamStats>> Stats() const;
  // Whether every stream of `worker` is subscribed and past its first replay (or has no
  // replay to wait for): its blocks are in the index.
  bool CaughtUp(uint32_t worker) const;

 private:
  class Stream;
  struct Command {
    bool add;
    WorkerEndpoints endpoints;
  };
  void Run();
  void ProcessCommands();
  void PublishStats();

  kv::PrefixIndex* index_;
  const SubscriberOptions options_;
  Observer observer_;
  struct ZmqContext;
  std::unique_ptr<ZmqContext> zmq_;
  std::vector<std::unique_ptr<Stream>> streams_;  // subscriber thread only
  std::vector<Command> deferred_;  // subscriber thread only: adds that failed for want of fds
  std::chrono::steady_clock::time_point retry_deferred_at_{};
  mutable std::mutex mu_;  // guards commands_ and stats_
  std::vector<Command> commands_;
  std::vector<std::pair<uint32_t, WorkerStreamStats>> stats_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace kvgate::events
