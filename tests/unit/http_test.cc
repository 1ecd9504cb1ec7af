// http: the server and the upstream client against each other on loopback.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "http/client.h"
#include "http/server.h"

namespace kvgate::http {
namespace {

// Collects one response; `done` is fulfilled by OnDone.
class Collect : public ResponseSink {
 public:
  void OnHeaders(int status, std::string_view content_type) override {
    status_ = status;
    content_type_ = content_type;
  }
  void OnBody(std::string_view data) override { body_.append(data); }
  void OnDone(const Status& s) override { done_.set_value(s); }

  Status Wait() { return done_.get_future().get(); }
  int status_ = 0;
  std::string content_type_, body_;

 private:
  std::promise<Status> done_;
};

std::shared_ptr<Collect> Fetch(Client& client, uint16_t port, std::string target,
                               std::string body) {
  auto sink = std::make_shared<Collect>();
  ClientRequest request;
  request.target = std::move(target);
  request.body = std::move(body);
  client.Fetch({"127.0.0.1", port}, std::move(request), sink);
  EXPECT_TRUE(sink->Wait().ok());
  return sink;
}

TEST(Http, WholeAndStreamedResponsesReachTheClient) {
  Server server({}, [](const Request& req, std::shared_ptr<Responder> r) {
    if (req.path == "/stream") {
      r->Begin(200, "text/event-stream");
      r->Write("data: 1\n\n");
      r->Write("data: 2\n\n");
      return r->End();
    }
    r->Send(200, "application/json", req.body);
  });
  ASSERT_TRUE(server.Start().ok());
  Client client;
  auto whole = Fetch(client, server.port(), "/echo", R"({"a":1})");
  EXPECT_EQ(whole->status_, 200);
  EXPECT_EQ(whole->body_, R"({"a":1})");
  auto stream = Fetch(client, server.port(), "/stream", "");
  EXPECT_EQ(stream->content_type_, "text/event-stream");
  EXPECT_EQ(stream->body_, "data: 1\n\ndata: 2\n\n");
}

TEST(Http, ErrorsTheServerAnswersItselfUseItsOwnersFormat) {
  ServerOptions options;
  options.max_body_bytes = 16;
  options.error_formatter = [](int status, std::string_view message) {
    return ErrorResponse{"application/x-test", std::to_string(status) + ":" + std::string(message)};
  };
  Server server(options, [](const Request&, std::shared_ptr<Responder>) {
    // Never answers: the server does, when the responder goes away.
  });
  ASSERT_TRUE(server.Start().ok());
  Client client;
  auto unanswered = Fetch(client, server.port(), "/x", "{}");
  EXPECT_EQ(unanswered->status_, 500);
  EXPECT_EQ(unanswered->content_type_, "application/x-test");
  EXPECT_EQ(unanswered->body_, "500:the handler did not answer");
  auto too_large = Fetch(client, server.port(), "/x", std::string(100, 'x'));
  EXPECT_EQ(too_large->status_, 413);
  EXPECT_EQ(too_large->body_, "413:request body larger than 16 bytes");
}

// ---------- raw sockets: clients and engines that do what they like ----------
int Connect(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

void SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return;
    data.remove_prefix(static_cast<size_t>(n));
  }
}

// Everything until the peer closes (or 5 s pass).
std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
    out.append(buf, static_cast<size_t>(n));
  return out;
}

// A fake engine: accepts connections and answers every request it reads with `reply`.
class RawEngine {
 public:
  explicit RawEngine(std::string reply) : reply_(std::move(reply)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    ::listen(listener_, 16);
    thread_ = std::thread([this] {
      for (int fd; (fd = ::accept(listener_, nullptr, nullptr)) >= 0;) {
        ++connections_;
        std::string request;
        char buf[4096];
        for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) {
          request.append(buf, static_cast<size_t>(n));
          // One reply per request head (bodies here are small and arrive with it).
          for (size_t end; (end = request.find("\r\n\r\n")) != std::string::npos;) {
            const size_t cl = request.find("Content-Length: ");
            const size_t body = cl < end ? std::stoul(request.substr(cl + 16)) : 0;
            if (request.size() < end + 4 + body) break;
            request.erase(0, end + 4 + body);
            SendAll(fd, reply_);
          }
        }
        ::close(fd);
      }
    });
  }
  ~RawEngine() {
    ::shutdown(listener_, SHUT_RDWR);
    ::close(listener_);
    thread_.join();
  }
  uint16_t port() const { return port_; }
  int connections() const { return connections_; }

 private:
  std::string reply_;
  int listener_;
  uint16_t port_ = 0;
  std::atomic<int> connections_{0};
  std::thread thread_;
};

TEST(HttpClient, InterimResponsesAreSkippedNotRelayed) {
  RawEngine engine(
      "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
      "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
  Client client;
  for (int i = 0; i < 3; ++i) {  // the pooled connection must be clean each time
    auto r = Fetch(client, engine.port(), "/x", "{}");
    EXPECT_EQ(r->status_, 200);
    EXPECT_EQ(r->body_, "ok");
  }
  EXPECT_EQ(engine.connections(), 1);
}

TEST(HttpClient, ConnectionsWithBytesAfterTheResponseAreNotReused) {
  // Each reply carries a second, unasked-for response: another user must never get it.
  RawEngine engine(
      "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nmine"
      "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\ntheirs");
  Client client;
  for (int i = 0; i < 3; ++i) {
    auto r = Fetch(client, engine.port(), "/x", "{}");
    EXPECT_EQ(r->body_, "mine");
  }
  EXPECT_EQ(engine.connections(), 3);
}

// A timeout bounds each wait on the engine, not the time a pooled connection sits idle.
TEST(HttpClient, TimeoutsBoundTheWaitsOnTheEngineNotTheTimeBetween) {
  using std::chrono::milliseconds;
  RawEngine engine("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
  Client client;  // closes its pooled connection before the engine waits for it to end
  auto fetch = [&](uint16_t port) {
    auto sink = std::make_shared<Collect>();
    ClientRequest request;
    request.target = "/x";
    request.body = "{}";
    request.timeouts = {milliseconds(1000), milliseconds(150), milliseconds(150)};
    client.Fetch({"127.0.0.1", port}, std::move(request), sink);
    const Status status = sink->Wait();
    return std::pair{sink, status};
  };
  {
    RawEngine silent("");  // reads the request, never answers
    const auto start = std::chrono::steady_clock::now();
    auto [sink, status] = fetch(silent.port());
    EXPECT_EQ(status.code(), StatusCode::kDeadlineExceeded) << status.message();
    EXPECT_NE(status.message().find("no response"), std::string::npos) << status.message();
    EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(140));
  }
  {
    RawEngine stalls("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc");
    auto [sink, status] = fetch(stalls.port());
    EXPECT_EQ(sink->status_, 200);
    EXPECT_EQ(sink->body_, "abc");
    EXPECT_EQ(status.code(), StatusCode::kDeadlineExceeded) << status.message();
    EXPECT_NE(status.message().find("cut short"), std::string::npos) << status.message();
  }
  for (int i = 0; i < 3; ++i) {
    auto [sink, status] = fetch(engine.port());
    EXPECT_TRUE(status.ok()) << status.message();
    EXPECT_EQ(sink->body_, "ok");
    std::this_thread::sleep_for(milliseconds(400));  // idle for longer than any timeout
  }
  EXPECT_EQ(engine.connections(), 1);
}

// Likewise on the server: a keep-alive connection outlives its last write's timeout.
TEST(HttpServer, TheWriteTimeoutEndsWithTheWrite) {
  ServerOptions options;
  options.write_timeout = std::chrono::milliseconds(100);
  options.idle_timeout = std::chrono::milliseconds(2000);
  Server server(options, [](const Request&, std::shared_ptr<Responder> r) {
    r->Send(200, "text/plain", "ok");
  });
  ASSERT_TRUE(server.Start().ok());
  const int fd = Connect(server.port());
  for (int i = 0; i < 2; ++i) {
    SendAll(fd, "GET /x HTTP/1.1\r\nHost: a\r\n\r\n");
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0) << "request " << i << ": the connection was closed";
    EXPECT_NE(std::string(buf, static_cast<size_t>(n)).find("200 OK"), std::string::npos);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  ::close(fd);
}

TEST(HttpServer, SmugglingFramingIsRejected) {
  std::atomic<int> handled{0};
  Server server({}, [&](const Request&, std::shared_ptr<Responder> r) {
    ++handled;
    r->Send(200, "text/plain", "ok");
  });
  ASSERT_TRUE(server.Start().ok());
  for (const char* request :
       {"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n"
        "\r\n0\r\n\r\n",
        "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n"
        "\r\n0\r\n\r\n",
        "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n",
        "POST /x HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer a\r\nAuthorization: Bearer b\r\n"
        "Content-Length: 0\r\n\r\n"}) {
    const int fd = Connect(server.port());
    SendAll(fd, request);
    const std::string reply = ReadAll(fd);
    ::close(fd);
    EXPECT_EQ(reply.substr(0, 12), "HTTP/1.1 400") << request << "\n" << reply;
  }
  EXPECT_EQ(handled, 0);
}

TEST(HttpServer, HeadCheckAnswersBeforeTheBodyIsRead) {
  ServerOptions options;
  options.check_head = [](const Request& head) -> std::optional<HeadRejection> {
    if (head.Header("authorization") != "Bearer k") return HeadRejection{401, "no key"};
    return std::nullopt;
  };
  std::atomic<int> handled{0};
  Server server(options, [&](const Request& req, std::shared_ptr<Responder> r) {
    ++handled;
    r->Send(200, "text/plain", req.body);
  });
  ASSERT_TRUE(server.Start().ok());
  // Announces 10 MB, sends none of it: the answer comes anyway.
  int fd = Connect(server.port());
  SendAll(fd, "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 10000000\r\n\r\n");
  std::string reply = ReadAll(fd);
  ::close(fd);
  EXPECT_EQ(reply.substr(0, 12), "HTTP/1.1 401") << reply;
  EXPECT_EQ(handled, 0);
  // With the key, and an Expect: 100-continue client.
  fd = Connect(server.port());
  SendAll(fd,
          "POST /x HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer k\r\nExpect: 100-continue\r\n"
          "Content-Length: 2\r\nConnection: close\r\n\r\n");
  char buf[64];
  const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
  EXPECT_EQ(std::string(buf, n > 0 ? static_cast<size_t>(n) : 0), "HTTP/1.1 100 Continue\r\n\r\n");
  SendAll(fd, "hi");
  reply = ReadAll(fd);
  ::close(fd);
  EXPECT_EQ(reply.substr(0, 12), "HTTP/1.1 200") << reply;
  EXPECT_EQ(reply.substr(reply.size() - 2), "hi");
}

TEST(HttpServer, BodyBudgetAndConnectionCap) {
  ServerOptions options;
  options.max_body_bytes_in_flight = 1000;
  options.max_connections = 1;
  Server server(options, [](const Request&, std::shared_ptr<Responder> r) {
    r->Send(200, "text/plain", "ok");
  });
  ASSERT_TRUE(server.Start().ok());
  const int first = Connect(server.port());
  // Over the budget on its own: 503 before any body byte is read.
  SendAll(first, "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5000\r\n\r\n");
  char buf[64];
  const ssize_t n = ::recv(first, buf, sizeof buf, 0);
  EXPECT_EQ(std::string(buf, n > 12 ? 12 : 0), "HTTP/1.1 503");
  const int held = Connect(server.port());  // the one connection allowed
  SendAll(held, "GET /x HTTP/1.1\r\nHost: a\r\n\r\n");
  EXPECT_GT(::recv(held, buf, sizeof buf, 0), 0);
  const int second = Connect(server.port());
  EXPECT_EQ(ReadAll(second).substr(0, 12), "HTTP/1.1 503");
  for (int fd : {first, held, second}) ::close(fd);
}

TEST(HttpServer, AClientThatLeavesIsNoticedWhileTheHandlerWorks) {
  std::promise<std::shared_ptr<Responder>> held;
  Server server({}, [&](const Request&, std::shared_ptr<Responder> r) { held.set_value(r); });
  ASSERT_TRUE(server.Start().ok());
  const int fd = Connect(server.port());
  SendAll(fd, "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n");
  std::shared_ptr<Responder> r = held.get_future().get();
  EXPECT_TRUE(r->connected());
  ::close(fd);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (r->connected() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_FALSE(r->connected());
}

TEST(HttpServer, SlowReadersAreBufferedVisiblyAndDroppedAfterTheWriteTimeout) {
  ServerOptions options;
  options.write_timeout = std::chrono::milliseconds(300);
  std::promise<std::shared_ptr<Responder>> held;
  Server server(options, [&](const Request&, std::shared_ptr<Responder> r) {
    r->Begin(200, "text/event-stream");
    held.set_value(r);
  });
  ASSERT_TRUE(server.Start().ok());
  const int fd = Connect(server.port());
  int small = 4096;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  SendAll(fd, "GET /x HTTP/1.1\r\nHost: a\r\n\r\n");
  std::shared_ptr<Responder> r = held.get_future().get();
  const std::string chunk(64 * 1024, 'x');
  for (int i = 0; i < 200 && r->connected(); ++i) r->Write(chunk);  // the client reads nothing
  EXPECT_GT(r->buffered_bytes(), 0u);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (r->connected() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_FALSE(r->connected()) << "dropped after the write timeout";
  ::close(fd);
}

TEST(Http, PlainTextErrorsByDefault) {
  const ErrorResponse e = PlainTextError(400, "malformed");
  EXPECT_EQ(e.content_type, "text/plain; charset=utf-8");
  EXPECT_EQ(e.body, "malformed\n");
}

}  // namespace
}  // namespace kvgate::http
