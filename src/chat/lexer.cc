#include "chat/lexer.h"

#include <fmt/format.h>

#include <cctype>

namespace kvgate::chat {
namespace {

// Finds the end delimiter `close` of a tag starting at `pos`, skipping string literals and,
// as Jinja2's lexer does, anything inside open brackets (`{{ {'a': {'b': 1}} }}`).
size_t FindTagEnd(std::string_view s, size_t pos, std::string_view close) {
  char quote = 0;
  int depth = 0;
  for (size_t i = pos; i < s.size(); ++i) {
    const char c = s[i];
    if (quote) {
      if (c == '\\') {
        ++i;
      } else if (c == quote) {
        quote = 0;
      }
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c;
      continue;
    }
    if (depth == 0) {
      if (s.compare(i, close.size(), close) == 0) return i;
      if (c == '-' && s.compare(i + 1, close.size(), close) == 0) return i;
    }
    if (c == '(' || c == '[' || c == '{') ++depth;
    if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
  }
  return std::string_view::npos;
}

}  // namespace

Status SplitSegments(std::string_view src, std::vector<Segment>& out) {
  size_t pos = 0;
  int line = 1;
  bool strip_next = false;    // the previous tag ended with '-': drop all leading whitespace
  bool trim_newline = false;  // the previous tag was a block or comment (trim_blocks)
  bool line_starting = true;  // what precedes this text ended a line (Jinja2's notion)
  auto count_lines = [&](std::string_view s) {
    for (char c : s) line += c == '\n';
  };
  for (;;) {
    size_t open = std::string_view::npos;
    for (size_t i = pos; i + 1 < src.size(); ++i) {
      if (src[i] == '{' && (src[i + 1] == '{' || src[i + 1] == '%' || src[i + 1] == '#')) {
        open = i;
        break;
      }
    }
    std::string text(
        src.substr(pos, open == std::string_view::npos ? std::string_view::npos : open - pos));
    const int text_line = line;
    count_lines(text);
    if (strip_next) {
      size_t b = 0;
      while (b < text.size() && IsSpace(text[b])) ++b;
      if (b > 0) line_starting = text[b - 1] == '\n';
      text.erase(0, b);
    } else if (trim_newline && text.starts_with("\r\n")) {
      text.erase(0, 2);
      line_starting = true;
    } else if (trim_newline && text.starts_with('\n')) {
      text.erase(0, 1);
      line_starting = true;
    }
    if (open == std::string_view::npos) {
      if (!text.empty()) out.push_back({Segment::kText, std::move(text), text_line});
      break;
    }
    const char kind = src[open + 1];
    size_t body = open + 2;
    const bool minus_left = body < src.size() && src[body] == '-';
    const bool plus_left = body < src.size() && src[body] == '+';
    if (minus_left || plus_left) ++body;
    if (minus_left) {
      while (!text.empty() && IsSpace(text.back())) text.pop_back();
    } else if (kind != '{' && !plus_left) {
      // lstrip_blocks: blanks between a line start and a block or comment tag go away.
      const size_t line_start = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
      bool blank = true;
      for (size_t i = line_start; i < text.size(); ++i) blank &= IsSpace(text[i]);
      if (blank && (line_start > 0 || line_starting)) text.resize(line_start);
    }
    if (!text.empty()) out.push_back({Segment::kText, std::move(text), text_line});
    const std::string_view close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    size_t end;
    if (kind == '#') {  // comments are not tokenized: quotes inside mean nothing
      end = src.find(close, body);
      if (end != std::string_view::npos && end > body && src[end - 1] == '-') --end;
    } else {
      end = FindTagEnd(src, body, close);
    }
    if (end == std::string_view::npos) {
      return Status::Error(fmt::format("line {}: unclosed tag", line));
    }
    const bool minus_right = src[end] == '-';
    std::string content(src.substr(body, end - body));
    const int tag_line = line;
    count_lines(content);
    pos = end + (minus_right ? 1 : 0) + close.size();
    if (kind == '{') {
      out.push_back({Segment::kExpr, std::move(content), tag_line});
    } else if (kind == '%') {
      out.push_back({Segment::kStmt, std::move(content), tag_line});
    }
    strip_next = minus_right;
    trim_newline = !minus_right && kind != '{';
    line_starting = false;
  }
  return Status::Ok();
}

Status Tokenize(std::string_view s, int line, std::vector<Token>& out) {
  static constexpr std::string_view kOps[] = {"**", "//", "==", "!=", "<=", ">=", "(", ")", "[",
                                              "]",  "{",  "}",  ",",  ".",  ":",  "|", "~", "+",
                                              "-",  "*",  "/",  "%",  "<",  ">",  "=", "!"};
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    if (IsSpace(c)) {
      ++i;
      continue;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i + 1;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Token::kName, std::string(s.substr(i, j - i))});
      i = j;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      bool is_float = false;
      if (j + 1 < s.size() && s[j] == '.' && std::isdigit(static_cast<unsigned char>(s[j + 1]))) {
        is_float = true;
        ++j;
        while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      }
      if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
        is_float = true;
        ++j;
        if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
        while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      }
      std::string digits;
      for (char d : s.substr(i, j - i)) {
        if (d != '_') digits += d;
      }
      Token t{is_float ? Token::kFloat : Token::kInt, digits};
      if (is_float) {
        t.number = std::stod(digits);
      } else {
        t.integer = std::stoll(digits);
      }
      out.push_back(std::move(t));
      i = j;
      continue;
    }
    if (c == '\'' || c == '"') {
      std::string value;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] != '\\' || j + 1 >= s.size()) {
          value += s[j];
          continue;
        }
        const char e = s[++j];
        switch (e) {
          case 'n':
            value += '\n';
            break;
          case 't':
            value += '\t';
            break;
          case 'r':
            value += '\r';
            break;
          case '\\':
            value += '\\';
            break;
          case '\'':
            value += '\'';
            break;
          case '"':
            value += '"';
            break;
          case '0':
            value += '\0';
            break;
          default:
            value += '\\';
            value += e;
        }
      }
      if (j >= s.size()) return Status::Error(fmt::format("line {}: unterminated string", line));
      out.push_back({Token::kString, std::move(value)});
      i = j + 1;
      continue;
    }
    bool matched = false;
    for (std::string_view op : kOps) {
      if (s.compare(i, op.size(), op) == 0) {
        out.push_back({Token::kOp, std::string(op)});
        i += op.size();
        matched = true;
        break;
      }
    }
    if (!matched) return Status::Error(fmt::format("line {}: unexpected character '{}'", line, c));
  }
  out.push_back({Token::kEnd, ""});
  return Status::Ok();
}

}  // namespace kvgate::chat
