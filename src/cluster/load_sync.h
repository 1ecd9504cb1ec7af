// Shares load between gateway replicas over NATS (docs/design.md §11): publishes this
// replica's routed / first-token / finished deltas and a heartbeat every second on
// `kvgate.<cluster>.load`, and applies every peer's deltas to the local LoadView, so each
// replica's `kv` cost counts the whole fleet's in-flight work. A peer silent for 3 s, or
// whose messages were lost, has its contributions dropped. With NATS down, each replica
// routes on its own load, the client reconnects in the background, and sync resumes.
// Tenants' usage (docs/design.md §13) travels on the same subject, every 100 ms it changes.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "cluster/load_delta.h"
#include "cluster/peers.h"
#include "cluster/usage_ledger.h"
#include "common/status.h"
#include "routing/load_view.h"

namespace kvgate::cluster {

struct LoadSyncOptions {
  std::string nats_url;  // nats://host:port
  std::string cluster = "default";
  std::string replica_name;  // for people: shown in heartbeats
  std::chrono::milliseconds heartbeat{1000};
  std::chrono::milliseconds peer_timeout{3000};
};

// Names workers across replicas: slots are this process's own numbers, record ids are shared.
struct WorkerNames {
  std::function<std::string(uint32_t slot)> id_of;
  std::function<std::optional<uint32_t>(std::string_view id)> slot_of;
};

struct LoadSyncStats {
  bool connected = false;
  size_t peers = 0;
  uint64_t sent = 0, received = 0;
  uint64_t disconnects = 0;
  uint64_t peer_resets = 0;      // a peer's messages were lost: its contributions dropped
  uint64_t peers_expired = 0;    // silent peers dropped
  uint64_t unknown_workers = 0;  // a peer routed to a worker this replica does not know
  uint64_t bad_messages = 0;
  uint64_t send_errors = 0;
};

class LoadSync : public routing::LocalLoadListener {
 public:
  // `view`'s local origin is this replica's; it must outlive the LoadSync.
  LoadSync(LoadSyncOptions options, routing::LoadView& view, WorkerNames names);
  ~LoadSync() override;
  LoadSync(const LoadSync&) = delete;
  LoadSync& operator=(const LoadSync&) = delete;

  // Shares tenants' usage through `ledger` (which must outlive the LoadSync); before Start.
  void SetUsageLedger(UsageLedger* ledger) { ledger_ = ledger; }
  // Connects (or keeps trying in the background when NATS is down), subscribes, starts the
  // heartbeat. Errors only for a bad URL.
  Status Start();
  void Stop();
  LoadSyncStats Stats() const;
  std::string subject() const { return "kvgate." + options_.cluster + ".load"; }

  // routing::LocalLoadListener: this replica's own load changes, to publish.
  void OnLocalChange(const routing::LoadChange& change) override;

 private:
  struct Nats;
  void Publish(LoadDelta delta);
  void Receive(std::string_view data);
  void HeartbeatLoop();
  void ForgetOrigin(uint16_t origin);  // its load and its tenants' requests (peers_mu_ held)

  const LoadSyncOptions options_;
  routing::LoadView& view_;
  const WorkerNames names_;
  UsageLedger* ledger_ = nullptr;
  const uint64_t instance_;
  std::unique_ptr<Nats> nats_;
  std::function<void(std::string_view)> receive_;  // what cnats's message callback calls
  std::mutex publish_mu_;                          // one seq order on the wire
  uint64_t next_seq_ = 0;
  std::mutex peers_mu_;
  Peers peers_;
  std::atomic<uint64_t> sent_{0}, received_{0}, disconnects_{0}, peer_resets_{0}, peers_expired_{0},
      unknown_workers_{0}, bad_messages_{0}, send_errors_{0};
  std::atomic<size_t> peer_count_{0};
  std::atomic<bool> connected_{false};
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread heartbeat_;
};

}  // namespace kvgate::cluster
