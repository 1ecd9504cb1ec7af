// One coroutine per connection on its event loop's thread: read a request, hand it to the handler
// with a Responder, then deliver whatever the Responder queues (from any thread) until the response
// is complete; repeat while the client keeps the connection alive.
#include "http/server.h"

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/beast.hpp>
#include <cctype>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

#include "common/log.h"
#include "http/event_loop_impl.h"
#include "http/socket_deadline.h"

namespace kvgate::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

struct Piece {
  enum Kind { kSend, kBegin, kWrite, kEnd } kind;
  int status = 200;
  std::string content_type;
  std::string data;
  std::string extra_headers;  // kSend: formatted header lines
};

// What a Responder queued for its connection. Shared between handler threads and the
// connection's loop.
struct ResponseState : std::enable_shared_from_this<ResponseState> {
  explicit ResponseState(LoopExecutor ex) : executor(ex), wake(ex) {
    wake.expires_at(LoopTimer::time_point::max());
  }
  LoopExecutor executor;
  LoopTimer wake;  // cancelled to wake the connection
  std::mutex mu;
  std::deque<Piece> pieces;
  std::atomic<bool> connected{true};
  std::atomic<size_t> buffered{0};      // bytes of queued pieces not yet written
  bool head_only = false;               // a HEAD request: the answer's head, not its body
  std::string cors_headers;             // formatted header lines, added to the answer
  std::function<void()> on_disconnect;  // guarded by mu

  // The client is gone: writes stop, and whoever asked is told (once).
  void Disconnected() {
    std::function<void()> callback;
    {
      std::lock_guard lock(mu);
      connected = false;
      callback = std::move(on_disconnect);
      on_disconnect = nullptr;
    }
    if (callback) callback();
  }

  void Push(Piece p) {
    buffered += p.data.size();
    {
      std::lock_guard lock(mu);
      pieces.push_back(std::move(p));
    }
    // Runs on the connection's loop, so it either wakes a pending wait or the connection finds the
    // piece when it next looks at the queue. Inline when already there (an engine's answer
    // read on the same loop): one trip through the loop's queue fewer.
    asio::dispatch(executor, [self = shared_from_this()] { self->wake.cancel(); });
  }
};

class ResponderImpl : public Responder {
 public:
  ResponderImpl(std::shared_ptr<ResponseState> state, ErrorFormatter errors)
      : state_(std::move(state)), errors_(std::move(errors)) {}
  ~ResponderImpl() override {
    if (!answered_) {
      ErrorResponse e = errors_(500, "the handler did not answer");
      state_->Push({Piece::kSend, 500, std::move(e.content_type), std::move(e.body), {}});
    } else if (streaming_ && !ended_) {
      state_->Push({Piece::kEnd, 0, {}, {}, {}});
    }
  }
  using Responder::Send;
  void Send(int status, std::string content_type, std::string body, Headers headers) override {
    if (answered_) return;
    answered_ = true;
    std::string extra;
    for (const auto& [name, value] : headers) extra += fmt::format("{}: {}\r\n", name, value);
    state_->Push(
        {Piece::kSend, status, std::move(content_type), std::move(body), std::move(extra)});
  }
  void Begin(int status, std::string content_type) override {
    if (answered_) return;
    answered_ = streaming_ = true;
    state_->Push({Piece::kBegin, status, std::move(content_type), {}, {}});
  }
  void Write(std::string chunk) override {
    if (!streaming_ || ended_ || chunk.empty()) return;
    state_->Push({Piece::kWrite, 0, {}, std::move(chunk), {}});
  }
  void End() override {
    if (!streaming_ || ended_) return;
    ended_ = true;
    state_->Push({Piece::kEnd, 0, {}, {}, {}});
  }
  bool connected() const override { return state_->connected; }
  size_t buffered_bytes() const override { return state_->buffered; }
  void OnDisconnect(std::function<void()> callback) override {
    {
      std::lock_guard lock(state_->mu);
      if (state_->connected) {
        state_->on_disconnect = std::move(callback);
        return;
      }
    }
    callback();
  }

 private:
  // The handler owns the answer; these flags need no lock as long as one thread answers at
  // a time, which Responder's contract (calls in order) implies.
  std::shared_ptr<ResponseState> state_;
  // A copy: a handler may hold its responder past the server's end. Formatters are plain
  // functions, so the copy does not allocate.
  ErrorFormatter errors_;
  bool answered_ = false;
  bool streaming_ = false;
  bool ended_ = false;
};

// Bytes of a request body counted against the server's budget while it is received.
// The budget is shared with the reservation: a session's coroutine frame can be destroyed
// after the server (when the event loops that hold it go last), and its reservation must
// still have something to give back to.
class BodyReservation {
 public:
  explicit BodyReservation(std::shared_ptr<std::atomic<size_t>> in_flight)
      : in_flight_(std::move(in_flight)) {}
  ~BodyReservation() { Release(); }
  bool Take(size_t bytes, size_t budget) {
    if (in_flight_->fetch_add(bytes) + bytes > budget && bytes > 0) {
      *in_flight_ -= bytes;
      return false;
    }
    bytes_ = bytes;
    return true;
  }
  void Release() {
    if (bytes_ != 0) *in_flight_ -= std::exchange(bytes_, 0);
  }

 private:
  std::shared_ptr<std::atomic<size_t>> in_flight_;
  size_t bytes_ = 0;
};

LogRateLimiter accept_log(1);

Request ToRequest(const bhttp::request<bhttp::string_body>& r) {
  Request out;
  out.method = std::string(r.method_string());
  out.target = std::string(r.target());
  out.path = out.target.substr(0, out.target.find('?'));
  for (const auto& field : r) {
    std::string name(field.name_string());
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out.headers[name] = std::string(field.value());
  }
  return out;  // the body is moved in separately
}

}  // namespace

ErrorResponse PlainTextError(int, std::string_view message) {
  return {"text/plain; charset=utf-8", std::string(message) + "\n"};
}

struct Server::Impl {
  ServerOptions options;
  Handler handler;
  std::shared_ptr<EventLoops> loops;
  bool owns_loops = false;
  std::unique_ptr<asio::basic_socket_acceptor<tcp, LoopExecutor>> acceptor;
  std::atomic<int> in_flight{0};
  std::atomic<size_t> connections{0};
  std::shared_ptr<std::atomic<size_t>> body_bytes_in_flight =
      std::make_shared<std::atomic<size_t>>(0);
  std::atomic<bool> stopping{false};
  bool started = false;
  uint16_t port = 0;
  size_t next_loop = 0;  // accept loop only

  Task<void> Accept() {
    for (;;) {
      auto& all = loops->impl().loops;
      auto& loop = *all[next_loop++ % all.size()];
      // Accepted straight onto the loop that will serve the connection.
      auto [ec, socket] = co_await acceptor->async_accept(loop.ioc, kAwaitNoThrow);
      if (ec) {
        if (stopping || ec == asio::error::operation_aborted) co_return;
        // Out of descriptors or memory: the pending connection stays queued and accept
        // fails again at once. Wait instead of spinning; connections closing free them.
        if (accept_log.Allow()) Log(LogLevel::kWarn, "accept: {}", ec.message());
        LoopTimer pause(co_await asio::this_coro::executor, std::chrono::milliseconds(50));
        co_await pause.async_wait(kAwaitNoThrow);
        continue;
      }
      boost::system::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      if (connections >= options.max_connections) {
        asio::co_spawn(loop.ioc, Refuse(std::move(socket)), asio::detached);
        continue;
      }
      ++connections;
      asio::co_spawn(loop.ioc, Session(std::move(socket)), asio::detached);
    }
  }

  // Over the connection cap: a short answer, then close.
  Task<void> Refuse(LoopSocket socket) {
    TimedSocket stream(std::move(socket));
    const ErrorResponse e = options.error_formatter(503, "too many connections");
    co_await WriteWhole(stream, 503, e.content_type, e.body, false);
    beast::error_code ignored;
    stream.socket.shutdown(tcp::socket::shutdown_both, ignored);
  }

  Task<bool> WriteRaw(TimedSocket& stream, std::string data) {
    stream.deadline.Set(options.write_timeout);
    auto [ec, n] = co_await asio::async_write(stream.socket, asio::buffer(data), kAwaitNoThrow);
    stream.deadline.Clear();  // the next piece may take its time
    co_return !ec;
  }

  // The status line and headers, formatted by hand: a fraction of the cost of Beast's
  // serializer on this hot path. `framing` is the Content-Length or chunked header lines.
  static std::string ResponseHead(int status, std::string_view content_type,
                                  std::string_view framing, bool keep_alive) {
    return fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\n{}Connection: {}\r\n\r\n", status,
                       std::string(bhttp::obsolete_reason(static_cast<bhttp::status>(status))),
                       content_type, framing, keep_alive ? "keep-alive" : "close");
  }

  // A whole response: head and body in one gather write.
  // `head_only` (HEAD): the Content-Length a GET would get, without the body.
  Task<bool> WriteWhole(TimedSocket& stream, int status, std::string_view content_type,
                        std::string_view body, bool keep_alive, std::string_view extra_headers = {},
                        bool head_only = false) {
    const std::string head = ResponseHead(
        status, content_type, fmt::format("{}Content-Length: {}\r\n", extra_headers, body.size()),
        keep_alive);
    if (head_only) body = {};
    const std::array<asio::const_buffer, 2> buffers{asio::buffer(head), asio::buffer(body)};
    stream.deadline.Set(options.write_timeout);
    auto [ec, n] = co_await asio::async_write(stream.socket, buffers, kAwaitNoThrow);
    stream.deadline.Clear();
    co_return !ec;
  }

  // Whether the client closed its side (or reset): it is readable and reading would return
  // end of stream. Bytes it sent (a pipelined request) stay unread.
  static bool ClientGone(LoopSocket& socket) {
    char byte;
    const ssize_t n = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }

  // Delivers the handler's answer; false when the connection must close. When the handler
  // takes a while (no piece within kWatchAfter), the client's socket is watched too: one
  // that leaves is noticed at once, so the handler can stop the engine's work. Answers that
  // come at once pay nothing for the watch.
  Task<bool> Deliver(TimedSocket& stream, ResponseState& state, bool keep_alive) {
    using namespace asio::experimental::awaitable_operators;
    constexpr auto kWatchAfter = std::chrono::milliseconds(20);
    bool quick = true;         // pieces have been coming without a pause
    bool watch_client = true;  // false after a pipelined request arrived
    for (;;) {
      std::deque<Piece> pieces;
      {
        std::lock_guard lock(state.mu);
        pieces.swap(state.pieces);
      }
      if (pieces.empty()) {
        if (quick) {
          state.wake.expires_after(kWatchAfter);
          auto [ec] = co_await state.wake.async_wait(kAwaitNoThrow);
          quick = ec == asio::error::operation_aborted;  // woken by a piece, not the clock
          continue;
        }
        state.wake.expires_at(LoopTimer::time_point::max());
        if (!watch_client || !state.connected) {
          co_await state.wake.async_wait(kAwaitNoThrow);
        } else {
          auto woke = co_await (state.wake.async_wait(kAwaitNoThrow) ||
                                stream.socket.async_wait(tcp::socket::wait_read, kAwaitNoThrow));
          if (woke.index() == 1) {
            if (ClientGone(stream.socket)) {
              state.Disconnected();
            } else {
              watch_client = false;  // a pipelined request: it waits its turn
            }
          }
        }
        continue;
      }
      quick = true;
      for (Piece& p : pieces) {
        state.buffered -= p.data.size();
        bool ok = true;
        switch (p.kind) {
          case Piece::kSend: {
            const bool ok =
                co_await WriteWhole(stream, p.status, p.content_type, p.data, keep_alive,
                                    state.cors_headers + p.extra_headers, state.head_only);
            co_return ok&& keep_alive;
          }
          case Piece::kBegin:
            ok = co_await WriteRaw(
                stream,
                ResponseHead(p.status, p.content_type,
                             state.cors_headers +
                                 "Transfer-Encoding: chunked\r\nCache-Control: no-cache\r\n",
                             keep_alive));
            break;
          case Piece::kWrite:
            ok = co_await WriteRaw(stream, fmt::format("{:x}\r\n{}\r\n", p.data.size(), p.data));
            break;
          case Piece::kEnd:
            ok = co_await WriteRaw(stream, "0\r\n\r\n");
            co_return ok&& keep_alive;
        }
        if (!ok) {
          state.Disconnected();
          co_return false;
        }
      }
    }
  }

  // After an early answer (413), read and discard what the client is still sending for a
  // while before closing: closing with unread data makes the kernel reset the connection,
  // and the client then sees a broken pipe instead of our answer.
  Task<void> LingeringClose(TimedSocket& stream) {
    beast::error_code ignored;
    stream.socket.shutdown(tcp::socket::shutdown_send, ignored);
    stream.deadline.Set(std::chrono::seconds(2));
    std::array<char, 64 * 1024> sink;
    for (size_t total = 0; total < (256u << 20);) {
      auto [ec, n] = co_await stream.socket.async_read_some(asio::buffer(sink), kAwaitNoThrow);
      if (ec) break;
      total += n;
    }
  }

  Task<void> Session(LoopSocket socket) {
    beast::error_code peer_ec;
    const bool from_loopback = socket.remote_endpoint(peer_ec).address().is_loopback() && !peer_ec;
    TimedSocket stream(std::move(socket));
    beast::flat_buffer buffer;
    bool first = true;
    while (!stopping) {
      bhttp::request_parser<bhttp::string_body> parser;
      parser.body_limit(options.max_body_bytes);
      parser.header_limit(64 * 1024);
      stream.deadline.Set(first ? options.header_timeout : options.idle_timeout);
      auto [hec, hn] =
          co_await bhttp::async_read_header(stream.socket, buffer, parser, kAwaitNoThrow);
      first = false;
      beast::error_code ec = hec;
      BodyReservation reservation(body_bytes_in_flight);
      Request request;
      if (!ec) {
        request = ToRequest(parser.get());
        request.from_loopback = from_loopback;
        if (IsPreflight(request) && parser.is_done()) {
          const bool keep_alive = parser.get().keep_alive() && !stopping;
          if (!co_await WriteWhole(stream, 204, "text/plain", "", keep_alive, Preflight(request)) ||
              !keep_alive) {
            break;
          }
          continue;
        }
        // Decided on the head alone: nothing of the body has been read yet.
        if (std::optional<HeadRejection> no = CheckHead(parser.get(), request, reservation)) {
          const ErrorResponse e = options.error_formatter(no->status, no->message);
          co_await WriteWhole(stream, no->status, e.content_type, e.body, false, CorsFor(request));
          co_await LingeringClose(stream);
          break;
        }
        // Usually the body came with the head: parse what is buffered without a round trip
        // through the event loop, and read only what is missing.
        while (!ec && !parser.is_done() && buffer.size() > 0) {
          const size_t used = parser.put(buffer.data(), ec);
          buffer.consume(used);
          if (ec == bhttp::error::need_more) ec = {};
          if (used == 0) break;
        }
        if (!ec && !parser.is_done()) {
          if (parser.get()[bhttp::field::expect] == "100-continue") {
            co_await WriteRaw(stream, "HTTP/1.1 100 Continue\r\n\r\n");
          }
          stream.deadline.Set(options.header_timeout);
          auto [bec, bn] = co_await bhttp::async_read(stream.socket, buffer, parser, kAwaitNoThrow);
          ec = bec;
        }
      }
      if (ec == bhttp::error::body_limit) {
        const ErrorResponse e = options.error_formatter(
            413, fmt::format("request body larger than {} bytes", options.max_body_bytes));
        co_await WriteWhole(stream, 413, e.content_type, e.body, false);
        co_await LingeringClose(stream);
        break;
      }
      if (ec) {
        if (ec != bhttp::error::end_of_stream && !stream.deadline.expired() &&
            ec != asio::error::eof && ec != asio::error::connection_reset) {
          const ErrorResponse e =
              options.error_formatter(400, fmt::format("malformed HTTP request: {}", ec.message()));
          co_await WriteWhole(stream, 400, e.content_type, e.body, false);
        }
        break;
      }
      stream.deadline.Clear();
      auto& msg = parser.get();
      const bool keep_alive = msg.keep_alive() && !stopping;
      auto state = std::make_shared<ResponseState>(co_await asio::this_coro::executor);
      state->head_only = msg.method() == bhttp::verb::head;
      state->cors_headers = CorsFor(request);
      ++in_flight;
      try {
        request.body = std::move(msg.body());
        reservation.Release();  // the body now belongs to the handler
        handler(std::move(request),
                std::make_shared<ResponderImpl>(state, options.error_formatter));
      } catch (const std::exception& e) {
        Log(LogLevel::kError, "handler threw: {}", e.what());
      }
      const bool again = co_await Deliver(stream, *state, keep_alive);
      --in_flight;
      if (!again) break;
    }
    beast::error_code ignored;
    stream.socket.shutdown(tcp::socket::shutdown_send, ignored);
    --connections;
  }

  std::string CorsOrigin() const {
    return fmt::format("Access-Control-Allow-Origin: {}\r\n{}", options.cors_allow_origin,
                       options.cors_allow_origin == "*" ? "" : "Vary: Origin\r\n");
  }

  // The CORS header lines for an answer to `request` (none without an Origin).
  std::string CorsFor(const Request& request) const {
    if (options.cors_allow_origin.empty() || request.Header("origin").empty()) return "";
    return CorsOrigin();
  }

  // A browser asking whether it may send a cross-origin request.
  bool IsPreflight(const Request& request) const {
    return !options.cors_allow_origin.empty() && request.method == "OPTIONS" &&
           !request.Header("origin").empty() &&
           !request.Header("access-control-request-method").empty();
  }

  std::string Preflight(const Request& request) const {
    std::string_view asked = request.Header("access-control-request-headers");
    // Header names only (letters, digits, '-', ',' and blanks): nothing else is echoed.
    const bool plain = std::all_of(asked.begin(), asked.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == ',' || c == ' ';
    });
    if (asked.empty() || !plain) asked = "Authorization, Content-Type";
    return CorsOrigin() + fmt::format(
                              "Access-Control-Allow-Methods: GET, POST, HEAD, OPTIONS\r\n"
                              "Access-Control-Allow-Headers: {}\r\nAccess-Control-Max-Age: 600\r\n",
                              asked);
  }

  // The checks a request's head must pass before its body is read: framing that could
  // smuggle a second request past a proxy (RFC 9112 §6.3), the owner's check (API keys),
  // and the budget of body bytes being received.
  std::optional<HeadRejection> CheckHead(
      const bhttp::request_parser<bhttp::string_body>::value_type& head, const Request& request,
      BodyReservation& reservation) {
    if (head.count(bhttp::field::authorization) > 1) {
      return HeadRejection{400, "more than one Authorization header"};
    }
    const auto te = head.find(bhttp::field::transfer_encoding);
    if (te != head.end()) {
      if (head.find(bhttp::field::content_length) != head.end()) {
        return HeadRejection{400, "Transfer-Encoding and Content-Length together"};
      }
      std::string_view codings = te->value();
      while (!codings.empty() && (codings.back() == ' ' || codings.back() == '\t')) {
        codings.remove_suffix(1);
      }
      const size_t comma = codings.rfind(',');
      std::string_view last = comma == std::string_view::npos ? codings : codings.substr(comma + 1);
      while (!last.empty() && (last.front() == ' ' || last.front() == '\t')) last.remove_prefix(1);
      if (!beast::iequals(last, "chunked")) {
        return HeadRejection{400, "the last transfer coding must be chunked"};
      }
    }
    if (options.check_head) {
      if (std::optional<HeadRejection> no = options.check_head(request)) return no;
    }
    size_t body = options.max_body_bytes;  // chunked: as much as it may grow to
    if (const auto cl = head.find(bhttp::field::content_length); cl != head.end()) {
      body = std::min<size_t>(options.max_body_bytes,
                              std::strtoull(std::string(cl->value()).c_str(), nullptr, 10));
    }
    if (!reservation.Take(body, options.max_body_bytes_in_flight)) {
      return HeadRejection{503, "the server is receiving too many request bodies; retry later"};
    }
    return std::nullopt;
  }
};

Server::Server(ServerOptions options, Handler handler, std::shared_ptr<EventLoops> loops)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->handler = std::move(handler);
  impl_->loops = std::move(loops);
}

Server::~Server() { Stop(std::chrono::milliseconds(0)); }

Status Server::Start() {
  Impl& s = *impl_;
  if (!s.loops) {
    s.loops = std::make_shared<EventLoops>(s.options.threads);
    s.owns_loops = true;
  }
  auto& accept_loop = *s.loops->impl().loops[0];
  s.acceptor = std::make_unique<asio::basic_socket_acceptor<tcp, LoopExecutor>>(accept_loop.ioc);
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(s.options.host, ec);
  if (ec)
    return Status::Error(fmt::format("bad listen address {}: {}", s.options.host, ec.message()));
  const tcp::endpoint endpoint(address, s.options.port);
  s.acceptor->open(endpoint.protocol(), ec);
  if (!ec) s.acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor->bind(endpoint, ec);
  if (!ec) s.acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status::Error(
        fmt::format("cannot listen on {}:{}: {}", s.options.host, s.options.port, ec.message()));
  }
  s.port = s.acceptor->local_endpoint().port();
  asio::co_spawn(accept_loop.ioc, s.Accept(), asio::detached);
  s.started = true;
  return Status::Ok();
}

uint16_t Server::port() const { return impl_->port; }

void Server::Stop(std::chrono::milliseconds grace) {
  Impl& s = *impl_;
  if (!s.started) return;
  s.started = false;
  s.stopping = true;
  // Shared with the posted close: it may run after this waits no longer.
  auto closed = std::make_shared<std::promise<void>>();
  asio::post(s.acceptor->get_executor(), [&s, closed] {
    boost::system::error_code ignored;
    s.acceptor->close(ignored);
    closed->set_value();
  });
  closed->get_future().wait_for(std::chrono::seconds(1));
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (s.in_flight > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // Shared loops are stopped by their owner, after whatever else runs on them.
  if (s.owns_loops) s.loops->Stop();
}

}  // namespace kvgate::http
