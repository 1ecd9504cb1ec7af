#include "api/sse.h"

namespace kvgate::api {

std::string SseEvent(std::string_view data) {
  std::string event;
  event.reserve(data.size() + 8);
  event.append("data: ").append(data).append("\n\n");
  return event;
}

// An event ends at "\n\n" or "\r\n\r\n" (engines use the former; proxies may rewrite).
size_t SseSplitter::FindEventEnd(size_t from) const {
  const size_t lf = pending_.find("\n\n", from);
  const size_t crlf = pending_.find("\r\n\r\n", from);
  return std::min(lf, crlf);
}

size_t SseSplitter::SeparatorLength(size_t at) const {
  return pending_.compare(at, 4, "\r\n\r\n") == 0 ? 4 : 2;
}

std::string SseData(std::string_view event) {
  std::string data;
  bool first = true;
  while (!event.empty()) {
    const size_t eol = event.find('\n');
    std::string_view line = event.substr(0, eol);
    event = eol == std::string_view::npos ? std::string_view{} : event.substr(eol + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.substr(0, 5) != "data:") continue;
    line.remove_prefix(5);
    if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    if (!first) data += '\n';
    data.append(line);
    first = false;
  }
  return data;
}

}  // namespace kvgate::api
