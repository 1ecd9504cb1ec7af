#include "api/error.h"

#include <boost/json.hpp>
#include <iterator>

namespace kvgate::api {
namespace {

// One row per code kvgate answers with; both directions read this table.
struct HttpError {
  StatusCode code;
  int http_status;
  std::string_view type;
};

constexpr HttpError kErrors[] = {
    {StatusCode::kInvalidArgument, 400, "invalid_request_error"},
    {StatusCode::kUnauthenticated, 401, "authentication_error"},
    {StatusCode::kPermissionDenied, 403, "permission_error"},
    {StatusCode::kNotFound, 404, "not_found_error"},
    {StatusCode::kAlreadyExists, 409, "conflict_error"},
    {StatusCode::kFailedPrecondition, 422, "invalid_request_error"},  // valid, but not here
    {StatusCode::kUnimplemented, 405, "invalid_request_error"},       // method not allowed
    {StatusCode::kOutOfRange, 413, "invalid_request_error"},          // body too large
    {StatusCode::kResourceExhausted, 429, "rate_limit_error"},
    {StatusCode::kAborted, 502, "upstream_error"},
    {StatusCode::kUnavailable, 503, "service_unavailable"},
    {StatusCode::kDeadlineExceeded, 504, "upstream_error"},
};
constexpr HttpError kInternal{StatusCode::kInternal, 500, "internal_error"};

template <typename Matches>
const HttpError& Find(Matches matches) {
  for (const HttpError& e : kErrors) {
    if (matches(e)) return e;
  }
  return kInternal;
}

const HttpError& OfCode(StatusCode code) {
  return Find([code](const HttpError& e) { return e.code == code; });
}

std::string Body(int http_status, std::string_view message, std::string_view type) {
  boost::json::object error{
      {"message", message}, {"type", type}, {"param", nullptr}, {"code", http_status}};
  return boost::json::serialize(boost::json::object{{"error", std::move(error)}});
}

}  // namespace

int HttpStatus(StatusCode code) { return code == StatusCode::kOk ? 200 : OfCode(code).http_status; }

std::string_view ErrorType(StatusCode code) { return OfCode(code).type; }

std::string ErrorBody(const Status& status) {
  const HttpError& e = OfCode(status.code());
  return Body(e.http_status, status.message(), e.type);
}

std::string ErrorBody(int http_status, std::string_view message) {
  const HttpError& e = Find([&](const HttpError& e) { return e.http_status == http_status; });
  return Body(http_status, message, e.type);
}

std::string ErrorBody(int http_status, std::string_view message, std::string_view type) {
  return Body(http_status, message, type);
}

http::ErrorResponse OpenAiErrorResponse(int http_status, std::string_view message) {
  return {"application/json", ErrorBody(http_status, message)};
}

}  // namespace kvgate::api
