// A small HTTP/1.1 server (Boost.Beast + Asio coroutines inside; nothing of them in this
// header): keep-alive, a body size limit, header and idle timeouts, and responses that a
// handler completes later, from any thread — whole, or streamed as chunks (SSE).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kvgate::http {

struct Request {
  std::string method;                          // "GET", "POST", ...
  std::string target;                          // path and query
  std::string path;                            // target without the query
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  bool from_loopback = false;  // the client connected from 127.0.0.0/8 or ::1

  std::string_view Header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string_view{} : std::string_view(it->second);
  }
};

// How a handler answers. Thread-safe; every call is queued to the connection in order.
// Answer with Send(), or with Begin() + Write()... + End(). If the last reference goes
// away unanswered, the client gets a 500.
class Responder {
 public:
  using Headers = std::vector<std::pair<std::string, std::string>>;
  virtual ~Responder() = default;
  void Send(int status, std::string content_type, std::string body) {
    Send(status, std::move(content_type), std::move(body), {});
  }
  // With extra response headers (e.g. Retry-After).
  virtual void Send(int status, std::string content_type, std::string body, Headers headers) = 0;
  virtual void Begin(int status, std::string content_type) = 0;  // chunked from here on
  virtual void Write(std::string chunk) = 0;
  virtual void End() = 0;
  // False once the client has gone away (writes are then dropped). Noticed while the
  // handler works too, not only when a write fails.
  virtual bool connected() const = 0;
  // Bytes queued for the client and not yet written: a producer should wait while this
  // grows (a slow reader), not queue without end.
  virtual size_t buffered_bytes() const = 0;
  // Calls `callback` once, from a server thread, when the client is seen gone (at once when
  // it already is): work done for it can stop.
  virtual void OnDisconnect(std::function<void()> callback) = 0;
};

// The request is the handler's to keep (or move elsewhere, e.g. to another thread).
using Handler = std::function<void(Request, std::shared_ptr<Responder>)>;

// How the server words the errors it answers by itself (a body over the limit, a malformed
// request, a handler that never answered): the protocol above HTTP decides the shape.
struct ErrorResponse {
  std::string content_type;
  std::string body;
};
using ErrorFormatter = std::function<ErrorResponse(int status, std::string_view message)>;

// An answer given from a request's head alone, before its body is read.
struct HeadRejection {
  int status;
  std::string message;
};
// Request (without its body) -> nullopt to go on, or the rejection.
using HeadCheck = std::function<std::optional<HeadRejection>(const Request& head)>;
// Plain text: the message alone.
ErrorResponse PlainTextError(int status, std::string_view message);

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: any free port
  int threads = 1;    // when the server runs its own loops
  size_t max_body_bytes = 32u << 20;
  std::chrono::milliseconds header_timeout{30'000};  // to receive a whole first request
  std::chrono::milliseconds idle_timeout{120'000};   // keep-alive, until the next request
  // A client that takes longer than this to accept one write is dropped.
  std::chrono::milliseconds write_timeout{60'000};
  size_t max_connections = 10'000;  // more are answered 503 and closed
  // Request bodies being received, all connections together; a request that would pass it
  // is answered 503 before its body is read.
  size_t max_body_bytes_in_flight = size_t{1} << 30;
  ErrorFormatter error_formatter = PlainTextError;
  HeadCheck check_head;  // optional (e.g. API keys): no body is read for a rejected request
  // CORS: "" sends no CORS headers; "*" or an origin is sent as Access-Control-Allow-Origin
  // on answers to requests that carry an Origin, and the server answers preflights
  // (OPTIONS with Access-Control-Request-Method) itself, before any check.
  std::string cors_allow_origin;
};

class EventLoops;

class Server {
 public:
  // Without `loops`, the server runs its own `options.threads` loops.
  Server(ServerOptions options, Handler handler, std::shared_ptr<EventLoops> loops = nullptr);
  ~Server();  // stops
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  Status Start();         // binds and starts serving on background threads
  uint16_t port() const;  // the bound port
  // Stops accepting, gives in-flight requests up to `grace` to finish, then closes.
  void Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(2000));

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvgate::http
