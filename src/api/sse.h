// Server-sent events, both ways: writing one event (gateway and mocker alike), and splitting
// a byte stream arriving in arbitrary pieces into whole events (the text before each blank
// line), so a proxy can look at one event at a time.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>

namespace kvgate::api {

// "data: <data>\n\n". `data` is one line (compact JSON is).
std::string SseEvent(std::string_view data);
// The end-of-stream event OpenAI-compatible servers send.
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

class SseSplitter {
 public:
  // Appends `bytes` and calls `on_event(event_text)` for every event it completes; the
  // event text excludes its terminating blank line. Linear in the bytes fed, however they
  // are cut: a search resumes where the last one stopped.
  template <typename OnEvent>
  void Feed(std::string_view bytes, OnEvent&& on_event) {
    pending_.append(bytes);
    size_t begin = 0;
    for (;;) {
      const size_t end = FindEventEnd(std::max(begin, searched_));
      if (end == std::string::npos) break;
      on_event(std::string_view(pending_).substr(begin, end - begin));
      begin = end + SeparatorLength(end);
      searched_ = begin;
    }
    pending_.erase(0, begin);
    // The last three bytes may begin a separator the next piece completes.
    searched_ = pending_.size() < 3 ? 0 : pending_.size() - 3;
  }
  // Bytes of an event that has not ended yet.
  std::string_view pending() const { return pending_; }

 private:
  size_t FindEventEnd(size_t from) const;
  size_t SeparatorLength(size_t at) const;
  std::string pending_;
  size_t searched_ = 0;  // no event ends before this offset of pending_
};

// The payload of an event's `data:` lines joined by '\n' (per the SSE spec); empty when
// the event has none.
std::string SseData(std::string_view event);

}  // namespace kvgate::api
