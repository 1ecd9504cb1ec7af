// Template source -> tokens, in two levels: SplitSegments cuts the source into text and
// tags (applying whitespace control, trim_blocks and lstrip_blocks as Jinja2 does), and
// Tokenize reads one tag's content into tokens for the parser (parse.cc).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kvgate::chat {

struct Segment {
  enum Kind { kText, kExpr, kStmt } kind;
  std::string content;
  int line;
};

struct Token {
  enum Kind { kName, kString, kInt, kFloat, kOp, kEnd } kind;
  std::string text;
  int64_t integer = 0;
  double number = 0;
};

inline bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

Status SplitSegments(std::string_view source, std::vector<Segment>& out);
// The tokens of one tag's content (starting on `line`, for messages), ending with kEnd.
Status Tokenize(std::string_view s, int line, std::vector<Token>& out);

}  // namespace kvgate::chat
