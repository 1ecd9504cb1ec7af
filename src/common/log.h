// Minimal leveled logging to stderr, plus a limiter so a misbehaving peer cannot flood it.
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>

namespace kvgate {

enum class LogLevel { kDebug, kInfo, kWarn, kError };
void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);
void LogLine(LogLevel level, std::string_view message);

template <typename... Args>
void Log(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
  if (LogEnabled(level)) LogLine(level, fmt::format(format, std::forward<Args>(args)...));
}

// Allows at most `per_second` messages in each one-second window; counts the rest.
class LogRateLimiter {
 public:
  explicit LogRateLimiter(uint32_t per_second) : per_second_(per_second) {}
  bool Allow();
  uint64_t suppressed() const { return suppressed_.load(std::memory_order_relaxed); }

 private:
  const uint32_t per_second_;
  std::atomic<int64_t> window_{0};
  std::atomic<uint32_t> count_{0};
  std::atomic<uint64_t> suppressed_{0};
};

}  // namespace kvgate
