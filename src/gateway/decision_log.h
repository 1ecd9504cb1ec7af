// The latest routing decisions, with the terms the chosen worker won on, for the dashboard
// and GET /admin/decisions (docs/design.md §15). A fixed ring: memory does not grow with
// traffic. Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>

#include "routing/router.h"

namespace kvgate::gateway {

struct LoggedDecision {
  int64_t unix_ms = 0;
  routing::RouteDecision decision;
  std::string worker;  // the worker record's id
  std::string tenant;
  uint32_t prompt_tokens = 0;
};

class DecisionLog {
 public:
  explicit DecisionLog(size_t capacity = 200) : capacity_(capacity) {}
  void Record(LoggedDecision d);
  // {"decisions": [...]}, newest first, at most `limit`.
  std::string Json(size_t limit) const;

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::deque<LoggedDecision> latest_;  // newest at the front
};

}  // namespace kvgate::gateway
