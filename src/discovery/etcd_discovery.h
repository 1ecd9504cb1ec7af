// Keeps a gateway's etcd-sourced workers equal to the records under `<prefix>/workers/`
// (docs/design.md §11): lists them, then watches from the next revision. When etcd cannot
// be reached it keeps the last known set, retries with backoff and, once back, lists again
// and reconciles (so a restart of etcd neither duplicates nor loses a worker).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "common/status.h"
#include "discovery/worker_record.h"

namespace kvgate::http {
class Client;
}

namespace kvgate::discovery {

struct EtcdDiscoveryOptions {
  std::string url;  // http://host:2379
  std::string prefix = "/kvgate";
  std::chrono::milliseconds retry_min{200};
  std::chrono::milliseconds retry_max{5000};
};

// What the discovery tells its owner, on its own thread, one call at a time.
struct DiscoveryHandler {
  // A record appeared or changed. The owner keeps it (or refuses it and says why).
  std::function<Status(const WorkerRecord&)> put;
  std::function<void(const std::string& id)> remove;
};

class EtcdDiscovery {
 public:
  EtcdDiscovery(EtcdDiscoveryOptions options, DiscoveryHandler handler);
  ~EtcdDiscovery();
  EtcdDiscovery(const EtcdDiscovery&) = delete;
  EtcdDiscovery& operator=(const EtcdDiscovery&) = delete;

  Status Start();  // errors only for a bad URL; an unreachable etcd is retried
  void Stop();

  uint64_t errors() const { return errors_; }            // failed etcd calls and broken watches
  uint64_t bad_records() const { return bad_records_; }  // values that are no worker record
  std::string workers_prefix() const { return options_.prefix + "/workers/"; }

 private:
  void Run();
  // Applies the full listing: puts every record, removes the known ones it lacks.
  void Reconcile(const std::map<std::string, std::string>& listed);
  void Put(const std::string& key, const std::string& value);
  void Delete(const std::string& key);
  bool Sleep(std::chrono::milliseconds d);  // false when stopping

  const EtcdDiscoveryOptions options_;
  const DiscoveryHandler handler_;
  std::unique_ptr<http::Client> http_;
  std::map<std::string, std::string> known_;  // etcd key -> worker id (discovery thread only)
  std::atomic<uint64_t> errors_{0}, bad_records_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace kvgate::discovery
