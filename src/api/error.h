// OpenAI's error body, and the one place a Status code becomes an HTTP status. Gateway and
// mocker answer every error through here, so a client sees one shape whatever failed.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "http/server.h"

namespace kvgate::api {

// kInvalidArgument 400, kUnauthenticated 401, kPermissionDenied 403, kNotFound 404,
// kUnimplemented 405 (method not allowed), kOutOfRange 413 (body too large),
// kResourceExhausted 429, kAborted 502 (an engine failed), kUnavailable 503 (no worker),
// kDeadlineExceeded 504 (an engine timed out); anything else 500.
int HttpStatus(StatusCode code);

// The error's `type` as OpenAI names it ("invalid_request_error", "rate_limit_error", ...).
std::string_view ErrorType(StatusCode code);

// {"error": {"message", "type", "param": null, "code": <http status>}}.
std::string ErrorBody(const Status& status);
// For errors known only by their HTTP status (the HTTP server's own: 400, 413, 500).
std::string ErrorBody(int http_status, std::string_view message);
// With a type of its own (e.g. a tenant over its limit: "rate_limit_exceeded").
std::string ErrorBody(int http_status, std::string_view message, std::string_view type);
// The same as an http::ErrorFormatter: servers speaking OpenAI's API answer their own
// errors in its shape.
http::ErrorResponse OpenAiErrorResponse(int http_status, std::string_view message);

}  // namespace kvgate::api
