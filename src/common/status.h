// A success-or-error-message result for operations whose failure the caller reports.
#pragma once

#include <string>
#include <utility>

namespace kvgate {

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  static Status Ok() { return Status(); }
  static Status Error(std::string message) { return Status(std::move(message), true); }
  // An error because something took longer than allowed (the gateway answers those 504).
  static Status Timeout(std::string message) {
    Status s(std::move(message), true);
    s.timed_out_ = true;
    return s;
  }

  bool ok() const { return !failed_; }
  bool timed_out() const { return timed_out_; }
  const std::string& message() const { return message_; }

 private:
  Status(std::string message, bool failed) : message_(std::move(message)), failed_(failed) {}
  std::string message_;
  bool failed_ = false;
  bool timed_out_ = false;
};

}  // namespace kvgate
