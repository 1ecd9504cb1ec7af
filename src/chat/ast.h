// The parsed form of a template: one node type for statements and expressions alike,
// shared by the parser (parse.cc) and the renderer (render.cc).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "chat/template.h"
#include "chat/value.h"

namespace kvgate::chat {

enum class NodeKind {
  // statements
  kBody,         // children: statements in order
  kText,         // text
  kOutput,       // a[0]: expression
  kIf,           // children: (cond, body) pairs flattened; odd tail = else body
  kFor,          // names: targets; a[0] iterable; a[1] filter cond or null; a[2] body; a[3] else
  kSet,          // names: [target] or [namespace, attr]; a[0] value expr, or a[1] body (block set)
  kMacro,        // text: name; names: params; children: defaults (null = none); a[0] body
  kCallBlock,    // a[0] call expr; a[1] caller body
  kFilterBlock,  // a[0] filter expr applied to a placeholder; a[1] body
  kBreak,
  kContinue,
  // expressions
  kLiteral,  // value
  kName,     // text
  kAttr,     // a[0] object; text: attribute
  kItem,     // a[0] object; a[1] key
  kSlice,    // a[0] object; a[1], a[2], a[3]: start, stop, step (null = absent)
  kCall,     // a[0] callee; children: args; names/kwargs: keyword args
  kFilter,   // text: filter; a[0] input (null in a filter block); children: args; kwargs
  kTest,     // text: test; a[0] input; children: args; negated
  kUnary,    // text: op ("not", "-", "+"); a[0]
  kBinary,   // text: op; a[0], a[1]
  kTernary,  // a[0] then, a[1] cond, a[2] else (null = undefined)
  kList,     // children
  kDict,     // children: key, value, key, value...
};

// Binary operators, resolved at parse time.
enum class BinaryOp : uint8_t {
  kAnd,
  kOr,
  kEq,  // kEq to kNotIn: comparisons
  kNe,
  kLt,
  kGt,
  kLe,
  kGe,
  kIn,
  kNotIn,
  kConcat,
  kAdd,  // kAdd and everything after it: arithmetic (Undefined operands raise)
  kSub,
  kMul,
  kDiv,
  kFloorDiv,
  kMod,
  kPow,
};

// How each operator is written.
inline constexpr std::pair<std::string_view, BinaryOp> kBinaryOps[] = {
    {"and", BinaryOp::kAnd},      {"or", BinaryOp::kOr},    {"==", BinaryOp::kEq},
    {"!=", BinaryOp::kNe},        {"<", BinaryOp::kLt},     {">", BinaryOp::kGt},
    {"<=", BinaryOp::kLe},        {">=", BinaryOp::kGe},    {"in", BinaryOp::kIn},
    {"not in", BinaryOp::kNotIn}, {"~", BinaryOp::kConcat}, {"+", BinaryOp::kAdd},
    {"-", BinaryOp::kSub},        {"*", BinaryOp::kMul},    {"/", BinaryOp::kDiv},
    {"//", BinaryOp::kFloorDiv},  {"%", BinaryOp::kMod},    {"**", BinaryOp::kPow}};

inline std::string_view OperatorText(BinaryOp op) {
  for (const auto& [text, code] : kBinaryOps) {
    if (code == op) return text;
  }
  return "?";
}

struct Template::Node {
  NodeKind kind;
  BinaryOp op = BinaryOp::kAdd;  // kBinary
  int line = 0;
  int id = -1;  // kName, kMacro: the variable's number (see NameTable); kAttr of `loop`: the
                // field's index in kLoopFields (-1: not a loop field)
  std::vector<int> ids;  // numbers of the variables in `names` (kFor, kSet, kMacro)
  // kFilter, kTest: the builtin's id (builtins.h); kAttr: the method's id, for when it is
  // called; kName: the global's id, for when it is called and no variable has the name.
  // -1: none of that name. Set by NumberTree.
  int builtin = -1;
  // Running this node could change a value read earlier: it calls a macro, a global or a
  // list method like append (calls of string and dict methods that only read do not
  // count). Set by NumberTree.
  bool may_mutate = false;
  std::string text;
  Value value;
  bool negated = false;
  std::vector<std::unique_ptr<Node>> a;         // fixed slots, see NodeKind
  std::vector<std::unique_ptr<Node>> children;  // variable-length
  std::vector<std::string> names;
  std::vector<std::pair<std::string, std::unique_ptr<Node>>> kwargs;
};

using Node = Template::Node;
using NodePtr = std::unique_ptr<Node>;

Status ParseTemplate(std::string_view source, NodePtr* root);

// The fields of a for loop's `loop` object, in Jinja2's order; LoopFieldCode numbers them.
inline constexpr std::string_view kLoopFields[] = {"index",  "index0",   "revindex", "revindex0",
                                                   "first",  "last",     "length",   "depth",
                                                   "depth0", "previtem", "nextitem"};
enum class LoopFieldCode {
  kIndex,
  kIndex0,
  kRevindex,
  kRevindex0,
  kFirst,
  kLast,
  kLength,
  kDepth,
  kDepth0,
  kPrevitem,
  kNextitem
};

// Every variable name a template uses gets a number once, after parsing, so that rendering
// finds variables by comparing numbers instead of hashing strings.
struct Template::NameTable {
  static constexpr int kLoop = 0;    // `loop` in a for body
  static constexpr int kCaller = 1;  // `caller` in a {% call %} body
  std::vector<std::string> names;    // number -> name
  // Looked up by string_view too (a transparent hash).
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  std::unordered_map<std::string, int, Hash, std::equal_to<>> numbers;

  NameTable();
  int Number(const std::string& name);
  // Numbers the variables of `root`'s tree: sets Node::id and Node::ids.
  void NumberTree(Node& root);
};

}  // namespace kvgate::chat
