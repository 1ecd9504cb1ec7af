#include "api/sse.h"

namespace kvgate::api {

std::string SseEvent(std::string_view data) {
  std::string event;
  event.reserve(data.size() + 8);
  event.append("data: ").append(data).append("\n\n");
  return event;
}

// An event ends at "\n\n" or "\r\n\r\n" (engines use the former; proxies may rewrite),
// whichever comes first: found from each line feed at or after `from`, in one pass.
size_t SseSplitter::FindEventEnd(size_t from) const {
  const size_t size = pending_.size();
  for (size_t lf = pending_.find('\n', from); lf != std::string::npos;
       lf = pending_.find('\n', lf + 1)) {
    if (lf + 1 < size && pending_[lf + 1] == '\n') return lf;
    if (lf >= 1 && pending_[lf - 1] == '\r' && lf + 2 < size && pending_[lf + 1] == '\r' &&
        pending_[lf + 2] == '\n') {
      return lf - 1;
    }
  }
  return std::string::npos;
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
