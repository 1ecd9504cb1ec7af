#include "discovery/etcd_discovery.h"

#include <algorithm>
#include <vector>

#include "common/log.h"
#include "discovery/etcd_client.h"
#include "http/client.h"

namespace kvgate::discovery {

EtcdDiscovery::EtcdDiscovery(EtcdDiscoveryOptions options, DiscoveryHandler handler)
    : options_(std::move(options)), handler_(std::move(handler)) {}

EtcdDiscovery::~EtcdDiscovery() { Stop(); }

Status EtcdDiscovery::Start() {
  http::Endpoint endpoint;
  if (Status s = EtcdClient::Parse(options_.url, &endpoint); !s.ok()) return s;
  http_ = std::make_unique<http::Client>();
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

void EtcdDiscovery::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  http_.reset();
}

bool EtcdDiscovery::Sleep(std::chrono::milliseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (!stop_ && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return !stop_;
}

void EtcdDiscovery::Run() {
  http::Endpoint endpoint;
  (void)EtcdClient::Parse(options_.url, &endpoint);  // checked by Start
  EtcdClient etcd(*http_, endpoint);
  const std::string prefix = workers_prefix();
  std::chrono::milliseconds backoff = options_.retry_min;
  bool failing = false;
  auto failed = [&](const Status& s) {
    ++errors_;
    if (!failing) {
      Log(LogLevel::kWarn, "etcd {}: {}; keeping the {} workers known, retrying", options_.url,
          s.message(), known_.size());
    }
    failing = true;
    Sleep(backoff);
    backoff = std::min(backoff * 2, options_.retry_max);
  };
  while (!stop_) {
    std::vector<EtcdKeyValue> kvs;
    int64_t revision = 0;
    if (Status s = etcd.List(prefix, &kvs, &revision); !s.ok()) {
      failed(s);
      continue;
    }
    if (failing) Log(LogLevel::kInfo, "etcd {} is back", options_.url);
    failing = false;
    backoff = options_.retry_min;
    std::map<std::string, std::string> listed;
    for (EtcdKeyValue& kv : kvs) listed[kv.key] = std::move(kv.value);
    Reconcile(listed);
    // Watch from just after the listing; resume after quiet periods from the last change.
    int64_t next = revision + 1;
    Status end;
    while (!stop_ && end.ok()) {
      end = etcd.Watch(
          prefix, next,
          [&](const EtcdWatchEvent& e) {
            next = std::max(next, e.revision + 1);
            if (e.deleted) {
              Delete(e.key);
            } else {
              Put(e.key, e.value);
            }
          },
          stop_);
    }
    if (!stop_) failed(end);
  }
}

void EtcdDiscovery::Reconcile(const std::map<std::string, std::string>& listed) {
  std::vector<std::string> gone;
  for (const auto& [key, id] : known_) {
    if (!listed.contains(key)) gone.push_back(key);
  }
  for (const std::string& key : gone) Delete(key);
  for (const auto& [key, value] : listed) Put(key, value);
}

void EtcdDiscovery::Put(const std::string& key, const std::string& value) {
  WorkerRecord record;
  Status s = ParseWorkerRecord(value, &record);
  if (s.ok()) s = handler_.put(record);
  if (!s.ok()) {
    ++bad_records_;
    Log(LogLevel::kWarn, "etcd key {}: {}", key, s.message());
    Delete(key);  // whatever the key named before is not what it says now
    return;
  }
  // A key whose record now names another worker: the old one goes.
  auto it = known_.find(key);
  if (it != known_.end() && it->second != record.id) handler_.remove(it->second);
  known_[key] = record.id;
}

void EtcdDiscovery::Delete(const std::string& key) {
  auto it = known_.find(key);
  if (it == known_.end()) return;
  handler_.remove(it->second);
  known_.erase(it);
}

}  // namespace kvgate::discovery
