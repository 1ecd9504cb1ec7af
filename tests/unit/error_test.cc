// api/error: the one mapping from Status codes to HTTP, and OpenAI's error body.
#include "api/error.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace kvgate::api {
namespace {

namespace json = boost::json;

TEST(Error, EveryCodeTheGatewayUsesHasItsStatusAndType) {
  const struct {
    StatusCode code;
    int http;
    std::string_view type;
  } cases[] = {
      {StatusCode::kInvalidArgument, 400, "invalid_request_error"},
      {StatusCode::kUnauthenticated, 401, "authentication_error"},
      {StatusCode::kPermissionDenied, 403, "permission_error"},
      {StatusCode::kNotFound, 404, "not_found_error"},
      {StatusCode::kUnimplemented, 405, "invalid_request_error"},
      {StatusCode::kOutOfRange, 413, "invalid_request_error"},
      {StatusCode::kResourceExhausted, 429, "rate_limit_error"},
      {StatusCode::kAborted, 502, "upstream_error"},
      {StatusCode::kUnavailable, 503, "service_unavailable"},
      {StatusCode::kDeadlineExceeded, 504, "upstream_error"},
      {StatusCode::kInternal, 500, "internal_error"},
      {StatusCode::kUnknown, 500, "internal_error"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(HttpStatus(c.code), c.http) << static_cast<int>(c.code);
    EXPECT_EQ(ErrorType(c.code), c.type) << static_cast<int>(c.code);
    // Known by its HTTP status alone, an error gets the same type.
    const json::value by_status = json::parse(ErrorBody(c.http, "m"));
    if (c.http != 500) {
      EXPECT_EQ(by_status.at("error").at("type").as_string(), c.type) << c.http;
    }
  }
}

TEST(Error, BodyHasOpenAisShape) {
  const json::value body = json::parse(ErrorBody(Status::NotFound("the model 'x' does not exist")));
  const json::object& e = body.at("error").as_object();
  EXPECT_EQ(e.at("message"), "the model 'x' does not exist");
  EXPECT_EQ(e.at("type"), "not_found_error");
  EXPECT_TRUE(e.at("param").is_null());
  EXPECT_EQ(e.at("code"), 404);
  EXPECT_EQ(e.size(), 4u);
}

TEST(Error, TimeoutsAreDeadlineExceeded) {
  const Status s = Status::Timeout("first byte: timed out");
  EXPECT_TRUE(s.timed_out());
  EXPECT_EQ(HttpStatus(s.code()), 504);
  EXPECT_FALSE(Status::Error("x").timed_out());
  EXPECT_TRUE(Status().ok());
  EXPECT_EQ(Status().code(), StatusCode::kOk);
}

}  // namespace
}  // namespace kvgate::api
