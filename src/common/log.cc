#include "common/log.h"

namespace kvgate {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
}

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }
bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(); }

void LogLine(LogLevel level, std::string_view message) {
  static constexpr const char* kNames[] = {"debug", "info", "warn", "error"};
  fmt::print(stderr, "kvgate {}: {}\n", kNames[static_cast<int>(level)], message);
}

bool LogRateLimiter::Allow() {
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  int64_t window = window_.load(std::memory_order_relaxed);
  if (window != now && window_.compare_exchange_strong(window, now)) {
    count_.store(0, std::memory_order_relaxed);
  }
  if (count_.fetch_add(1, std::memory_order_relaxed) < per_second_) return true;
  suppressed_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

}  // namespace kvgate
