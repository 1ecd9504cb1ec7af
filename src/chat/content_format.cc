// Template::IteratesMessageContent: which content format a chat template expects, read from
// its syntax tree the way vLLM detects it (docs/design.md §10).
#include <set>
#include <string>

#include "chat/ast.h"

namespace kvgate::chat {
namespace {

// Calls `visit` on `n` and every node below it.
template <typename Visit>
void Walk(const Node& n, const Visit& visit) {
  visit(n);
  for (const auto& c : n.a) {
    if (c) Walk(*c, visit);
  }
  for (const auto& c : n.children) {
    if (c) Walk(*c, visit);
  }
  for (const auto& [name, c] : n.kwargs) {
    if (c) Walk(*c, visit);
  }
}

// `messages` or a name that holds it, possibly sliced or filtered (`messages[1:]`,
// `loop_messages|reverse`).
bool IsMessages(const Node& n, const std::set<std::string>& aliases) {
  if (n.kind == NodeKind::kName) return aliases.contains(n.text);
  if ((n.kind == NodeKind::kSlice || n.kind == NodeKind::kFilter) && !n.a.empty() && n.a[0]) {
    return IsMessages(*n.a[0], aliases);
  }
  return false;
}

// `m.content` or `m['content']` for a message variable `m`.
bool IsContentOf(const Node& n, const std::set<std::string>& message_vars) {
  const bool attr = n.kind == NodeKind::kAttr && n.text == "content";
  const bool item = n.kind == NodeKind::kItem && n.a.size() > 1 && n.a[1] &&
                    n.a[1]->kind == NodeKind::kLiteral && n.a[1]->value.is_string() &&
                    n.a[1]->value.text == "content";
  if (!attr && !item) return false;
  const Node& base = *n.a[0];
  return base.kind == NodeKind::kName && message_vars.contains(base.text);
}

}  // namespace

bool Template::IteratesMessageContent() const {
  // The names that hold the messages (`{% set loop_messages = messages[1:] %}`) ...
  std::set<std::string> aliases{"messages"};
  for (size_t before = 0; before != aliases.size();) {
    before = aliases.size();
    Walk(*root_, [&](const Node& n) {
      if (n.kind == NodeKind::kSet && n.names.size() == 1 && !n.a.empty() && n.a[0] &&
          IsMessages(*n.a[0], aliases)) {
        aliases.insert(n.names[0]);
      }
    });
  }
  // ... the ones that hold a message: loop targets over them, and `messages[i]`.
  std::set<std::string> message_vars;
  Walk(*root_, [&](const Node& n) {
    if (n.kind == NodeKind::kFor && n.names.size() == 1 && n.a[0] && IsMessages(*n.a[0], aliases)) {
      message_vars.insert(n.names[0]);
    }
    if (n.kind == NodeKind::kSet && n.names.size() == 1 && !n.a.empty() && n.a[0] &&
        n.a[0]->kind == NodeKind::kItem && n.a[0]->a[0] && IsMessages(*n.a[0]->a[0], aliases)) {
      message_vars.insert(n.names[0]);
    }
  });
  // And those that hold a message's content (`{% set content = message['content'] %}`).
  std::set<std::string> content_vars;
  Walk(*root_, [&](const Node& n) {
    if (n.kind == NodeKind::kSet && n.names.size() == 1 && !n.a.empty() && n.a[0] &&
        IsContentOf(*n.a[0], message_vars)) {
      content_vars.insert(n.names[0]);
    }
  });
  bool iterates = false;
  Walk(*root_, [&](const Node& n) {
    if (n.kind != NodeKind::kFor || !n.a[0]) return;
    const Node& over = *n.a[0];
    iterates |= IsContentOf(over, message_vars) ||
                (over.kind == NodeKind::kName && content_vars.contains(over.text));
  });
  return iterates;
}

}  // namespace kvgate::chat
