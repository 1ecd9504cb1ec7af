// Numbering a template's variable names (Template::NameTable): names are read in `kName`
// expressions and bound by `for` targets, `set`, macros and their parameters. The same walk
// marks `loop.<field>` nodes, numbers the builtins the template names (Node::builtin) and
// what may change values (Node::may_mutate).
#include <algorithm>
#include <iterator>

#include "chat/ast.h"
#include "chat/builtins.h"

namespace kvgate::chat {
namespace {

// `x.strip()` and the like: string and dict methods only read (list methods such as append
// change their list, and macros may change anything).
bool CallsReadOnlyMethod(const Node& call) {
  const Node& callee = *call.a[0];
  return callee.kind == NodeKind::kAttr && callee.builtin >= 0 && !MethodMutates(callee.builtin);
}

}  // namespace

Template::NameTable::NameTable() {
  Number("loop");
  Number("caller");
}

int Template::NameTable::Number(const std::string& name) {
  auto [it, inserted] = numbers.try_emplace(name, static_cast<int>(names.size()));
  if (inserted) names.push_back(name);
  return it->second;
}

void Template::NameTable::NumberTree(Node& n) {
  switch (n.kind) {
    case NodeKind::kName:
      n.id = Number(n.text);
      n.builtin = GlobalId(n.text);
      break;
    case NodeKind::kMacro:
      n.id = Number(n.text);
      break;
    case NodeKind::kFilter:
      n.builtin = FilterId(n.text);
      break;
    case NodeKind::kTest:
      n.builtin = TestId(n.text);
      break;
    case NodeKind::kAttr:
      n.builtin = MethodId(n.text);
      if (n.a[0]->kind == NodeKind::kName && n.a[0]->text == "loop") {
        for (size_t i = 0; i < std::size(kLoopFields); ++i) {
          if (kLoopFields[i] == n.text) n.id = static_cast<int>(i);
        }
      }
      break;
    default:
      break;
  }
  switch (n.kind) {
    case NodeKind::kFor:
    case NodeKind::kMacro:
      for (const std::string& name : n.names) n.ids.push_back(Number(name));
      break;
    case NodeKind::kSet:  // `set x = ...` or `set ns.attr = ...`: only the first is a variable
      if (!n.names.empty()) n.ids.push_back(Number(n.names[0]));
      break;
    default:
      break;
  }
  n.may_mutate = n.kind == NodeKind::kCall && !CallsReadOnlyMethod(n);
  auto visit = [&](Node* child) {
    if (child == nullptr) return;
    NumberTree(*child);
    n.may_mutate |= child->may_mutate;
  };
  for (auto& child : n.a) visit(child.get());
  for (auto& child : n.children) visit(child.get());
  for (auto& [name, value] : n.kwargs) visit(value.get());
}

}  // namespace kvgate::chat
