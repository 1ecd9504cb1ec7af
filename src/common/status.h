// A result for operations whose failure the caller reports: a code (absl's canonical codes,
// so callers can tell a timeout from a bad argument without reading the message) and a
// message for people. The one mapping from codes to HTTP statuses is api/error.h.
#pragma once

#include <string>
#include <utility>

#include "absl/status/status.h"

namespace kvgate {

using StatusCode = absl::StatusCode;

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  // A failure with no more specific kind (bad files, bad config, an engine's own error).
  static Status Error(std::string message) { return {StatusCode::kUnknown, std::move(message)}; }
  // The client's input is wrong: bad JSON, a field of the wrong type, an empty prompt.
  static Status InvalidArgument(std::string message) {
    return {StatusCode::kInvalidArgument, std::move(message)};
  }
  static Status NotFound(std::string message) {
    return {StatusCode::kNotFound, std::move(message)};
  }
  // Something took longer than allowed.
  static Status Timeout(std::string message) {
    return {StatusCode::kDeadlineExceeded, std::move(message)};
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  bool timed_out() const { return code_ == StatusCode::kDeadlineExceeded; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

}  // namespace kvgate
