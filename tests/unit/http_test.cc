// http: the server and the upstream client against each other on loopback.
#include <gtest/gtest.h>

#include <future>
#include <string>

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

TEST(Http, PlainTextErrorsByDefault) {
  const ErrorResponse e = PlainTextError(400, "malformed");
  EXPECT_EQ(e.content_type, "text/plain; charset=utf-8");
  EXPECT_EQ(e.body, "malformed\n");
}

}  // namespace
}  // namespace kvgate::http
