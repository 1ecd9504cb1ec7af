// HTML escaping as Jinja2's `escape` filter (MarkupSafe) does it: & < > " ' as entities.
// Serves the chat templates' filter and the pages kvgate writes.
#pragma once

#include <string>
#include <string_view>

namespace kvgate {

inline std::string HtmlEscaped(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace kvgate
