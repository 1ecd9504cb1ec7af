// The gateway's engine workers, their membership and their health. Workers join and leave
// at run time (static config, admin API, etcd; docs/design.md §11); each keeps its number
// (slot) for the process's life, so a request in flight on a worker that left still finds
// it. A joining worker is subscribed to its KV events at once but routed to only once its
// health check passes and its event replay has caught up. A worker that fails its health
// checks or keeps failing requests is taken out of routing and its KV blocks are dropped
// from the index; it comes back, with a fresh event stream, once a health check passes.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/slot_table.h"
#include "events/subscriber.h"
#include "gateway/config.h"
#include "http/client.h"
#include "routing/router.h"

namespace kvgate::gateway {

// Where a worker's record came from.
enum class WorkerSource : uint8_t { kStatic, kApi, kEtcd };
inline constexpr std::string_view kWorkerSourceNames[] = {"static", "api", "etcd"};
inline std::string_view SourceName(WorkerSource s) {
  return kWorkerSourceNames[static_cast<size_t>(s)];
}

struct Worker {
  uint32_t slot = 0;  // this gateway's number for the worker (never reused)
  WorkerConfig config;
  WorkerSource source = WorkerSource::kStatic;
  http::Endpoint endpoint;
};

class WorkerPool {
 public:
  // Workers that ever joined, over the process's life.
  static constexpr size_t kMaxSlots = 16384;

  WorkerPool(routing::Router& router, events::Subscriber& subscriber, http::Client& client,
             const LimitsConfig& limits);
  ~WorkerPool();  // stops health checks

  // Adds a worker under an id not in use. `routable_at_once`: for the static workers at
  // start (the gateway serves at once, as it always did); a worker that joins later waits
  // for its first health check and its event replay. Fills `*slot`.
  Status Add(const WorkerConfig& config, WorkerSource source, bool routable_at_once,
             uint32_t* slot);
  // Takes the worker out: no new requests from now on, in-flight ones finish, its blocks
  // leave the index. NotFound when no worker has that id.
  Status Remove(std::string_view id);
  void StartHealthChecks();

  std::optional<uint32_t> Find(std::string_view id) const;
  // Every slot below size() is valid; present() says whether the worker is still a member.
  const Worker& worker(uint32_t slot) const { return slots_[slot].worker; }
  size_t size() const { return slots_.size(); }
  bool present(uint32_t slot) const { return slots_[slot].present; }
  bool healthy(uint32_t slot) const { return slots_[slot].healthy; }
  // Whether a health check of the worker ever passed (a joining worker is up).
  bool seen_up(uint32_t slot) const { return slots_[slot].seen_up; }
  size_t healthy_count() const;
  size_t count(WorkerSource source) const;  // present workers from `source`

  // Outcomes of health checks and of inference requests, counted apart: a worker that
  // answers /health but fails every request must still leave routing. It does after
  // `limits.unhealthy_after` consecutive failures of either kind; a passing health check
  // brings it back, but its inference failures are forgotten only by a request that
  // succeeds (so a worker that hangs every request costs one request per return).
  enum class Check : uint8_t { kProbe, kInference };
  void ReportSuccess(uint32_t slot, Check check);
  void ReportFailure(uint32_t slot, Check check, std::string_view why);

 private:
  struct Slot {
    Worker worker;
    std::atomic<bool> present{true};
    std::atomic<bool> healthy{false};  // in routing
    std::atomic<bool> subscribed{false};
    std::atomic<bool> seen_up{false};
    std::atomic<uint32_t> probe_failures{0};
    std::atomic<uint32_t> inference_failures{0};
  };
  void Subscribe(Slot& s);  // to its KV events, if it publishes them
  void Unsubscribe(Slot& s);
  void SetHealthy(Slot& s, bool healthy);
  void HealthLoop();

  routing::Router& router_;
  events::Subscriber& subscriber_;
  http::Client& client_;
  const LimitsConfig limits_;
  SlotTable<Slot> slots_{kMaxSlots};
  mutable std::mutex members_mu_;  // guards ids_ and serialises Add / Remove
  std::map<std::string, uint32_t, std::less<>> ids_;
  std::mutex transition_mu_;  // one health or membership flip at a time
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread health_thread_;
};

}  // namespace kvgate::gateway
