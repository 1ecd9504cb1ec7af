// Numbering a template's variable names (Template::NameTable): names are read in `kName`
// expressions and bound by `for` targets, `set`, macros and their parameters. The same walk
// marks `loop.<field>` nodes and the expressions that make calls.
#include "chat/ast.h"

namespace kvgate::chat {

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
    case NodeKind::kMacro:
      n.id = Number(n.text);
      break;
    case NodeKind::kAttr:
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
  n.makes_calls = n.kind == NodeKind::kCall;
  auto visit = [&](Node* child) {
    if (child == nullptr) return;
    NumberTree(*child);
    n.makes_calls |= child->makes_calls;
  };
  for (auto& child : n.a) visit(child.get());
  for (auto& child : n.children) visit(child.get());
  for (auto& [name, value] : n.kwargs) visit(value.get());
}

}  // namespace kvgate::chat
