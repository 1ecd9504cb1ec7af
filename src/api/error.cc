#include "api/error.h"

#include <boost/json.hpp>

namespace kvgate::api {
namespace {

std::string Body(int http_status, std::string_view message, std::string_view type) {
  boost::json::object error{
      {"message", message}, {"type", type}, {"param", nullptr}, {"code", http_status}};
  return boost::json::serialize(boost::json::object{{"error", std::move(error)}});
}

StatusCode CodeOfHttpStatus(int http_status) {
  switch (http_status) {
    case 400:
      return StatusCode::kInvalidArgument;
    case 401:
      return StatusCode::kUnauthenticated;
    case 403:
      return StatusCode::kPermissionDenied;
    case 404:
      return StatusCode::kNotFound;
    case 405:
      return StatusCode::kUnimplemented;
    case 413:
      return StatusCode::kOutOfRange;
    case 429:
      return StatusCode::kResourceExhausted;
    case 502:
      return StatusCode::kAborted;
    case 503:
      return StatusCode::kUnavailable;
    case 504:
      return StatusCode::kDeadlineExceeded;
    default:
      return StatusCode::kInternal;
  }
}

}  // namespace

int HttpStatus(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
      return 400;
    case StatusCode::kUnauthenticated:
      return 401;
    case StatusCode::kPermissionDenied:
      return 403;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kUnimplemented:
      return 405;
    case StatusCode::kOutOfRange:
      return 413;
    case StatusCode::kResourceExhausted:
      return 429;
    case StatusCode::kAborted:
      return 502;
    case StatusCode::kUnavailable:
      return 503;
    case StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

std::string_view ErrorType(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kUnimplemented:
    case StatusCode::kOutOfRange:
      return "invalid_request_error";
    case StatusCode::kUnauthenticated:
      return "authentication_error";
    case StatusCode::kPermissionDenied:
      return "permission_error";
    case StatusCode::kNotFound:
      return "not_found_error";
    case StatusCode::kResourceExhausted:
      return "rate_limit_error";
    case StatusCode::kUnavailable:
      return "service_unavailable";
    case StatusCode::kAborted:
    case StatusCode::kDeadlineExceeded:
      return "upstream_error";
    default:
      return "internal_error";
  }
}

std::string ErrorBody(const Status& status) {
  return Body(HttpStatus(status.code()), status.message(), ErrorType(status.code()));
}

std::string ErrorBody(int http_status, std::string_view message) {
  return Body(http_status, message, ErrorType(CodeOfHttpStatus(http_status)));
}

}  // namespace kvgate::api
