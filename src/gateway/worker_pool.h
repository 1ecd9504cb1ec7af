// The gateway's engine workers and their health. A worker that fails its health checks or
// keeps failing requests is taken out of routing and its KV blocks are dropped from the
// index; it comes back, with a fresh event stream, once a health check passes again.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "events/subscriber.h"
#include "gateway/config.h"
#include "http/client.h"
#include "routing/router.h"

namespace kvgate::gateway {

struct Worker {
  uint32_t id = 0;
  WorkerConfig config;
  http::Endpoint endpoint;
};

class WorkerPool {
 public:
  WorkerPool(routing::Router& router, events::Subscriber& subscriber, http::Client& client,
             const LimitsConfig& limits);
  ~WorkerPool();  // stops health checks

  // Before Start only. Routes to every dp rank and subscribes to the worker's events.
  Status Add(const WorkerConfig& config);
  void StartHealthChecks();

  const Worker& worker(uint32_t id) const { return *workers_[id]; }
  size_t size() const { return workers_.size(); }
  bool healthy(uint32_t id) const;
  // Whether a health check of the worker ever passed (a joining worker is up).
  bool seen_up(uint32_t id) const { return health_[id]->seen_up; }
  size_t healthy_count() const;

  // Outcomes of health checks and of inference requests, counted apart: a worker that
  // answers /health but fails every request must still leave routing. It does after
  // `limits.unhealthy_after` consecutive failures of either kind; a passing health check
  // brings it back, but its inference failures are forgotten only by a request that
  // succeeds (so a worker that hangs every request costs one request per return).
  enum class Check : uint8_t { kProbe, kInference };
  void ReportSuccess(uint32_t id, Check check);
  void ReportFailure(uint32_t id, Check check, std::string_view why);

 private:
  void Subscribe(const Worker& w);  // to its KV events, if it publishes them
  void SetHealthy(uint32_t id, bool healthy);
  void HealthLoop();

  routing::Router& router_;
  events::Subscriber& subscriber_;
  http::Client& client_;
  const LimitsConfig limits_;
  std::vector<std::unique_ptr<Worker>> workers_;
  struct Health {
    std::atomic<bool> healthy{true};
    std::atomic<bool> seen_up{false};
    std::atomic<uint32_t> probe_failures{0};
    std::atomic<uint32_t> inference_failures{0};
  };
  std::vector<std::unique_ptr<Health>> health_;
  std::mutex transition_mu_;  // one health flip at a time
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread health_thread_;
};

}  // namespace kvgate::gateway
