// A compact Jinja interpreter for chat templates: parse once, render many, with Jinja2's
// semantics as transformers and vLLM configure it (trim_blocks, lstrip_blocks, loop
// controls, tojson without ASCII escaping, raise_exception, strftime_now).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "chat/value.h"
#include "common/status.h"

namespace kvgate::chat {

class Heap;

class Template {
 public:
  // A syntax error is a Status naming the line.
  static Status Parse(std::string_view source, std::unique_ptr<Template>* out);
  ~Template();

  // `variables` is a dict of top-level names; the values the render makes live in `heap`.
  // Errors (including raise_exception's message) come back as a Status; `out` then holds
  // nothing useful.
  Status Render(const Value& variables, Heap& heap, std::string* out) const;

  // Whether the template loops over a message's content (`{% for part in
  // message['content'] %}`), i.e. expects content as a list of parts ("openai" content
  // format) rather than a string. As vLLM decides it, from the template's syntax.
  bool IteratesMessageContent() const;

  struct Node;
  struct NameTable;

 private:
  Template();
  std::unique_ptr<Node> root_;
  std::unique_ptr<NameTable> names_;
};

}  // namespace kvgate::chat
