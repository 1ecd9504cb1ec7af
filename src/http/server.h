// A small HTTP/1.1 server (Boost.Beast + Asio coroutines inside; nothing of them in this
// header): keep-alive, a body size limit, header and idle timeouts, and responses that a
// handler completes later, from any thread — whole, or streamed as chunks (SSE).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
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
  virtual ~Responder() = default;
  virtual void Send(int status, std::string content_type, std::string body) = 0;
  virtual void Begin(int status, std::string content_type) = 0;  // chunked from here on
  virtual void Write(std::string chunk) = 0;
  virtual void End() = 0;
  // False once the client has gone away (writes are then dropped).
  virtual bool connected() const = 0;
};

using Handler = std::function<void(const Request&, std::shared_ptr<Responder>)>;

// How the server words the errors it answers by itself (a body over the limit, a malformed
// request, a handler that never answered): the protocol above HTTP decides the shape.
struct ErrorResponse {
  std::string content_type;
  std::string body;
};
using ErrorFormatter = std::function<ErrorResponse(int status, std::string_view message)>;
// Plain text: the message alone.
ErrorResponse PlainTextError(int status, std::string_view message);

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: any free port
  int threads = 1;    // when the server runs its own loops
  size_t max_body_bytes = 32u << 20;
  std::chrono::milliseconds header_timeout{30'000};  // to receive a whole first request
  std::chrono::milliseconds idle_timeout{120'000};   // keep-alive, until the next request
  ErrorFormatter error_formatter = PlainTextError;
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
