// An HTTP/1.1 client for upstream engines (Boost.Beast inside; nothing of it here):
// per-endpoint pools of keep-alive connections, connect / first-byte / idle timeouts, and
// response bodies delivered to a sink as they arrive, so SSE streams pass straight through.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace kvgate::http {

// Where an upstream lives: from a base URL such as "http://127.0.0.1:8001".
struct Endpoint {
  std::string host;
  uint16_t port = 80;
  std::string key() const { return host + ':' + std::to_string(port); }
};
// Accepts "http://host[:port][/]" (no TLS, no path prefix).
Status ParseBaseUrl(std::string_view url, Endpoint* out);

struct ClientTimeouts {
  std::chrono::milliseconds connect{2000};
  std::chrono::milliseconds first_byte{300'000};  // until the response headers arrive
  std::chrono::milliseconds idle{300'000};        // between two reads of the body
};

struct ClientRequest {
  std::string method = "POST";
  std::string target;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  ClientTimeouts timeouts;
};

// Receives one response. Calls come from client threads, in this order: OnHeaders at most
// once, OnBody zero or more times (de-chunked body bytes), then OnDone exactly once.
// OnDone's status is ok when the whole body arrived; kResourceExhausted when this process
// (not the upstream) ran out of descriptors or memory.
class ResponseSink {
 public:
  virtual ~ResponseSink() = default;
  virtual void OnHeaders(int status, std::string_view content_type) = 0;
  virtual void OnBody(std::string_view data) = 0;
  virtual void OnDone(const Status& status) = 0;
  // Polled between reads: true abandons the response (the connection is closed, which tells
  // the engine; OnDone still comes, with an error).
  virtual bool Cancelled() const { return false; }
  // Before the client waits on the engine: calling `cancel` (from any thread, at any time,
  // any number of times) ends the wait at once, and the response is abandoned if
  // Cancelled() then says so. For sinks that learn of their client leaving by an event.
  virtual void OnCancellable(std::function<void()> /*cancel*/) {}
  // Polled before each read: while true, the client reads no more of the body (the sink's
  // consumer is behind).
  virtual bool Backlogged() const { return false; }
};

class EventLoops;

struct ClientOptions {
  int threads = 1;                     // when the client runs its own loops
  size_t max_idle_per_endpoint = 256;  // per loop
};

class Client {
 public:
  // With shared `loops` (e.g. the server's), a fetch started on a loop thread runs on that
  // loop; their owner must stop them before destroying the client. Without, the client
  // runs its own loops.
  explicit Client(ClientOptions options = {}, std::shared_ptr<EventLoops> loops = nullptr);
  // Fetches still in flight are abandoned: their sinks are released without OnDone.
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Starts one request. A pooled connection the server closed while idle is replaced
  // transparently (the request has not been seen by then).
  void Fetch(const Endpoint& endpoint, ClientRequest request, std::shared_ptr<ResponseSink> sink);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A whole response, for callers that wait for it (health probes, etcd, canaries).
struct WholeResponse {
  Status status;  // of the transfer; the HTTP status is `code`
  int code = 0;
  std::string body;  // at most `max_body` bytes of it
};
// Starts `request`; the future is ready when the response ended (or broke). Its get()
// throws std::future_error if the client is destroyed first.
std::future<WholeResponse> FetchWhole(Client& client, const Endpoint& endpoint,
                                      ClientRequest request, size_t max_body = size_t{1} << 20);

}  // namespace kvgate::http
