// The canary of docs/design.md §14: a completion of fresh random token ids (3 blocks and one
// token, max_tokens 1) sent straight to one worker. Its KV events must then store exactly
// the blocks kvgate hashed for those tokens (within 5 s), and the same prompt sent again
// must come back with 3 blocks reported cached. The result names the first thing that was
// wrong: ok, no_events, block_size_mismatch, token_mismatch, no_cached_tokens_reported, or
// "error: ...". Canaries run one at a time on their own thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>

namespace kvgate::events {
class Subscriber;
}
namespace kvgate::http {
class Client;
}
namespace kvgate::kv {
class PrefixIndex;
}

namespace kvgate::gateway {

class Fidelity;
class WorkerPool;

struct CanaryOptions {
  uint32_t block_size = 16;
  std::string model;                                // the served model name
  std::chrono::milliseconds events_within{5000};    // for the blocks to show in the index
  std::chrono::milliseconds healthy_within{60000};  // a joining worker must come up by then
  std::chrono::milliseconds request_timeout{30000};
};

class CanaryRunner {
 public:
  CanaryRunner(CanaryOptions options, http::Client& client, const kv::PrefixIndex& index,
               const events::Subscriber& subscriber, const WorkerPool& workers, Fidelity& fidelity);
  ~CanaryRunner() { Stop(); }
  CanaryRunner(const CanaryRunner&) = delete;
  CanaryRunner& operator=(const CanaryRunner&) = delete;

  // Queues a canary for `worker`, first waiting for its first passing health check when
  // `wait_until_up` (a worker that just joined). The result is recorded in Fidelity, then
  // given to `done` (on the runner's thread) when set.
  void Queue(uint32_t worker, bool wait_until_up,
             std::function<void(const std::string& result)> done = nullptr);
  // Drops what is queued (their `done` is never called), ends the running canary early and
  // joins the thread. Queue() after Stop() does nothing.
  void Stop();

 private:
  struct Job {
    uint32_t worker;
    bool wait_until_up;
    std::function<void(const std::string&)> done;
  };
  void Loop();
  std::string Run(uint32_t worker);
  bool Stopping();

  const CanaryOptions options_;
  http::Client& client_;
  const kv::PrefixIndex& index_;
  const events::Subscriber& subscriber_;
  const WorkerPool& workers_;
  Fidelity& fidelity_;
  std::mt19937_64 rng_{std::random_device{}()};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace kvgate::gateway
