// Numbering a template's variable names (Template::NameTable): names are read in `kName`
// expressions and bound by `for` targets, `set`, macros and their parameters.
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
  for (auto& child : n.a) {
    if (child) NumberTree(*child);
  }
  for (auto& child : n.children) {
    if (child) NumberTree(*child);
  }
  for (auto& [name, value] : n.kwargs) {
    if (value) NumberTree(*value);
  }
}

}  // namespace kvgate::chat
