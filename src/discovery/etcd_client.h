// The few etcd v3 calls fleet mode needs (list, put under a lease, delete, leases, watch),
// over etcd's JSON gateway (`/v3/...` on its client port) and kvgate's own HTTP client:
// Debian packages no C++ etcd client. Keys and values travel base64, revisions as strings.
// Calls block the calling thread (never an event-loop thread of `client`).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "http/client.h"

namespace kvgate::discovery {

struct EtcdKeyValue {
  std::string key;
  std::string value;
};

struct EtcdWatchEvent {
  bool deleted = false;
  std::string key;
  std::string value;  // empty for a delete
  int64_t revision = 0;
};

class EtcdClient {
 public:
  // `url`: http://host:port of one etcd member.
  static Status Parse(std::string_view url, http::Endpoint* endpoint);
  EtcdClient(http::Client& client, http::Endpoint endpoint,
             std::chrono::milliseconds timeout = std::chrono::milliseconds(3000));

  // Every key under `prefix`, and the store's revision they were read at.
  Status List(std::string_view prefix, std::vector<EtcdKeyValue>* out, int64_t* revision);
  Status Put(std::string_view key, std::string_view value, int64_t lease = 0);
  Status Delete(std::string_view key);
  Status GrantLease(int64_t ttl_seconds, int64_t* lease);
  // Renews the lease; `*alive` is false when etcd no longer has it (it expired).
  Status KeepAlive(int64_t lease, bool* alive);
  Status Revoke(int64_t lease);

  // Streams changes under `prefix` from `start_revision` on, calling `on_event` (on a
  // client thread) for each, until the stream breaks, nothing arrives for `idle`, or
  // `stop` turns true (checked every 100 ms). Returns why it ended (ok: stopped or idle).
  Status Watch(std::string_view prefix, int64_t start_revision,
               const std::function<void(const EtcdWatchEvent&)>& on_event,
               const std::atomic<bool>& stop,
               std::chrono::milliseconds idle = std::chrono::seconds(60));

 private:
  // POSTs `body` to `path`; the parsed JSON answer goes to `*answer`.
  Status Call(std::string_view path, std::string body, std::string* answer);

  http::Client& client_;
  const http::Endpoint endpoint_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace kvgate::discovery
