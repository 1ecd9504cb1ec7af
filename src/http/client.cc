// One coroutine per fetch: take a pooled connection (or connect), write the request, read
// the header under the first-byte timeout, then hand the body to the sink read by read.
#include "http/client.h"

#include <fmt/format.h>

#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <optional>
#include <unordered_map>

#include "http/event_loop_impl.h"
#include "http/socket_deadline.h"

namespace kvgate::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

struct Connection {
  explicit Connection(LoopExecutor ex) : stream(ex) {}
  TimedSocket stream;
  beast::flat_buffer buffer;
};

// This process ran out of something (descriptors, buffers, memory): not the upstream's fault.
bool IsLocalResourceError(const beast::error_code& ec) {
  return ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space ||
         ec == asio::error::no_memory ||
         ec == beast::error_code(ENFILE, boost::system::system_category());
}

// OnDone's error for `ec`, after `what` failed: a Timeout when a deadline passed,
// kResourceExhausted when the fault is this process's.
Status Failure(const beast::error_code& ec, std::string_view what, bool timed_out) {
  if (timed_out) return Status::Timeout(fmt::format("{}: timed out", what));
  const std::string message = fmt::format("{}: {}", what, ec.message());
  if (IsLocalResourceError(ec)) return {StatusCode::kResourceExhausted, message};
  return Status::Error(message);
}

// What a sink's canceller reaches: the connection while the fetch reads from it. The
// canceller runs on the connection's loop (posted), where `socket` is valid while `active`.
struct Waiting {
  LoopSocket* socket = nullptr;
  bool active = true;
};

bool IsStaleConnectionError(const beast::error_code& ec) {
  return ec == bhttp::error::end_of_stream || ec == asio::error::eof ||
         ec == asio::error::connection_reset || ec == asio::error::broken_pipe ||
         ec == bhttp::error::partial_message;
}

}  // namespace

Status ParseBaseUrl(std::string_view url, Endpoint* out) {
  constexpr std::string_view kScheme = "http://";
  if (url.substr(0, kScheme.size()) != kScheme) {
    return Status::Error(fmt::format("'{}': only http:// URLs are supported", url));
  }
  std::string_view rest = url.substr(kScheme.size());
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.empty() || rest.find('/') != std::string_view::npos) {
    return Status::Error(fmt::format("'{}': expected http://host[:port]", url));
  }
  Endpoint e;
  const size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos || rest.back() == ']') {
    e.host = std::string(rest);
  } else {
    e.host = std::string(rest.substr(0, colon));
    const std::string port(rest.substr(colon + 1));
    char* end = nullptr;
    const long p = std::strtol(port.c_str(), &end, 10);
    if (port.empty() || *end != '\0' || p < 1 || p > 65535) {
      return Status::Error(fmt::format("'{}': bad port", url));
    }
    e.port = static_cast<uint16_t>(p);
  }
  if (e.host.size() > 2 && e.host.front() == '[') e.host = e.host.substr(1, e.host.size() - 2);
  *out = std::move(e);
  return Status::Ok();
}

struct Client::Impl {
  ClientOptions options;
  std::shared_ptr<EventLoops> loops;
  bool owns_loops = false;
  // Idle connections per loop (only that loop's thread touches its pool: no lock).
  using Pool = std::unordered_map<std::string, std::vector<std::unique_ptr<Connection>>>;
  std::vector<Pool> pools;

  std::unique_ptr<Connection> TakeIdle(Pool& pool, const std::string& key) {
    auto it = pool.find(key);
    if (it == pool.end() || it->second.empty()) return nullptr;
    auto c = std::move(it->second.back());
    it->second.pop_back();
    return c;
  }

  void ReturnIdle(Pool& pool, const std::string& key, std::unique_ptr<Connection> c) {
    auto& list = pool[key];
    if (list.size() < options.max_idle_per_endpoint) list.push_back(std::move(c));
  }

  Task<beast::error_code> Connect(Connection& c, const Endpoint& e,
                                  std::chrono::milliseconds timeout) {
    boost::system::error_code ec;
    const auto address = asio::ip::make_address(e.host, ec);
    c.stream.deadline.Set(timeout);
    if (!ec) {
      auto [cec] =
          co_await c.stream.socket.async_connect(tcp::endpoint(address, e.port), kAwaitNoThrow);
      if (!cec) c.stream.socket.set_option(tcp::no_delay(true), cec);
      co_return cec;
    }
    asio::ip::basic_resolver<tcp, LoopExecutor> resolver(c.stream.socket.get_executor());
    auto [rec, results] =
        co_await resolver.async_resolve(e.host, std::to_string(e.port), kAwaitNoThrow);
    if (rec) co_return rec;
    auto [cec, ep] = co_await asio::async_connect(c.stream.socket, results, kAwaitNoThrow);
    if (!cec) c.stream.socket.set_option(tcp::no_delay(true), cec);
    co_return cec;
  }

  Task<void> Run(EventLoops::Impl::Loop& loop, Endpoint endpoint, ClientRequest request,
                 std::shared_ptr<ResponseSink> sink) {
    Pool& pool = pools[loop.index];
    const std::string key = endpoint.key();
    // The request head formatted once, written with the body in one gather write.
    std::string head = fmt::format("{} {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: kvgate\r\n",
                                   request.method, request.target, key);
    if (!request.body.empty() || request.method == "POST") {
      head += fmt::format("Content-Type: {}\r\nContent-Length: {}\r\n", request.content_type,
                          request.body.size());
    }
    for (const auto& [name, value] : request.headers)
      head += fmt::format("{}: {}\r\n", name, value);
    head += "\r\n";
    const std::array<asio::const_buffer, 2> message{asio::buffer(head), asio::buffer(request.body)};

    for (int attempt = 0;; ++attempt) {
      std::unique_ptr<Connection> conn = attempt == 0 ? TakeIdle(pool, key) : nullptr;
      const bool reused = conn != nullptr;
      if (!conn) {
        conn = std::make_unique<Connection>(loop.ioc.get_executor());
        if (auto ec = co_await Connect(*conn, endpoint, request.timeouts.connect)) {
          sink->OnDone(
              Failure(ec, fmt::format("connect to {}", key), conn->stream.deadline.expired()));
          co_return;
        }
      }
      conn->stream.deadline.Set(request.timeouts.first_byte);
      auto [wec, wn] = co_await asio::async_write(conn->stream.socket, message, kAwaitNoThrow);
      std::optional<bhttp::response_parser<bhttp::string_body>> parser;
      beast::error_code ec = wec;
      auto waiting = std::make_shared<Waiting>(Waiting{&conn->stream.socket, true});
      sink->OnCancellable([waiting, ex = conn->stream.socket.get_executor()] {
        asio::post(ex, [waiting] {
          beast::error_code ignored;
          if (waiting->active) waiting->socket->cancel(ignored);
        });
      });
      // Ends every path out of this attempt: the connection may go back to the pool.
      struct Deactivate {
        Waiting& w;
        ~Deactivate() { w.active = false; }
      } deactivate{*waiting};
      // Interim 1xx responses (100 Continue, 103 Early Hints) precede the real one: skip
      // them, or the real response would stay unread on a pooled connection.
      for (bool interim = true; !ec && interim;) {
        parser.emplace();
        parser->body_limit(boost::none);
        auto [hec, hn] = co_await bhttp::async_read_header(conn->stream.socket, conn->buffer,
                                                           *parser, kAwaitNoThrow);
        ec = hec;
        if (ec && sink->Cancelled()) {
          sink->OnDone(Status::Error("cancelled"));
          co_return;  // the connection is dropped, which aborts the upstream request
        }
        const unsigned status = ec ? 0 : parser->get().result_int();
        interim = status >= 100 && status < 200 && status != 101;
      }
      if (ec && reused && IsStaleConnectionError(ec)) continue;  // closed while pooled
      if (ec) {
        const bool timed_out = conn->stream.deadline.expired();
        sink->OnDone(Failure(
            ec, fmt::format("{} from {}", timed_out ? "no response" : "request", key), timed_out));
        co_return;
      }
      auto& header = parser->get();
      sink->OnHeaders(static_cast<int>(header.result_int()),
                      std::string_view(header[bhttp::field::content_type]));
      conn->stream.deadline.Clear();  // a backlogged sink may keep the engine waiting
      LoopTimer backlog(conn->stream.socket.get_executor());
      while (!parser->is_done()) {
        // A sink whose client reads slowly is not fed more until it drains: the engine's
        // socket fills and TCP slows the engine down instead of memory growing here.
        while (sink->Backlogged() && !sink->Cancelled()) {
          backlog.expires_after(std::chrono::milliseconds(5));
          co_await backlog.async_wait(kAwaitNoThrow);
        }
        if (sink->Cancelled()) {
          sink->OnDone(Status::Error("cancelled"));
          co_return;  // the connection is dropped, which aborts the upstream request
        }
        conn->stream.deadline.Set(request.timeouts.idle);
        auto [rec, rn] = co_await bhttp::async_read_some(conn->stream.socket, conn->buffer, *parser,
                                                         kAwaitNoThrow);
        conn->stream.deadline.Clear();
        if (rec && sink->Cancelled()) {
          sink->OnDone(Status::Error("cancelled"));
          co_return;
        }
        if (rec) {
          sink->OnDone(Failure(rec, fmt::format("response from {} cut short", key),
                               conn->stream.deadline.expired()));
          co_return;
        }
        if (!parser->get().body().empty()) {
          std::string data = std::exchange(parser->get().body(), std::string());
          sink->OnBody(data);
        }
      }
      if (!parser->get().body().empty()) sink->OnBody(parser->get().body());
      // Bytes after the response (a misbehaving engine) would be read as the next request's
      // response: such a connection is never reused.
      const bool keep = parser->get().keep_alive() && conn->buffer.size() == 0;
      if (keep) ReturnIdle(pool, key, std::move(conn));
      sink->OnDone(Status::Ok());
      co_return;
    }
  }
};

Client::Client(ClientOptions options, std::shared_ptr<EventLoops> loops)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
  if (!loops) {
    loops = std::make_shared<EventLoops>(options.threads);
    impl_->owns_loops = true;
  }
  impl_->pools.resize(loops->impl().loops.size());
  impl_->loops = std::move(loops);
}

Client::~Client() {
  if (impl_->owns_loops) impl_->loops->Stop();
}

void Client::Fetch(const Endpoint& endpoint, ClientRequest request,
                   std::shared_ptr<ResponseSink> sink) {
  EventLoops::Impl::Loop& loop = impl_->loops->impl().Pick();
  asio::co_spawn(loop.ioc, impl_->Run(loop, endpoint, std::move(request), std::move(sink)),
                 asio::detached);
}

namespace {

class WholeResponseSink : public ResponseSink {
 public:
  explicit WholeResponseSink(size_t max_body) : max_body_(max_body) {}
  void OnHeaders(int status, std::string_view) override { response_.code = status; }
  void OnBody(std::string_view data) override {
    if (response_.body.size() < max_body_) {
      response_.body.append(data.substr(0, max_body_ - response_.body.size()));
    }
  }
  void OnDone(const Status& status) override {
    response_.status = status;
    promise_.set_value(std::move(response_));
  }
  std::future<WholeResponse> Result() { return promise_.get_future(); }

 private:
  const size_t max_body_;
  WholeResponse response_;
  std::promise<WholeResponse> promise_;
};

}  // namespace

std::future<WholeResponse> FetchWhole(Client& client, const Endpoint& endpoint,
                                      ClientRequest request, size_t max_body) {
  auto sink = std::make_shared<WholeResponseSink>(max_body);
  std::future<WholeResponse> result = sink->Result();
  client.Fetch(endpoint, std::move(request), std::move(sink));
  return result;
}

}  // namespace kvgate::http
