// The tree walker that renders a parsed template (internal to chat/): statements in
// render.cc, expressions in evaluate.cc. Values live in the render's Heap; variables are
// found by the numbers NameTable gave them.
#pragma once

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "chat/ast.h"
#include "chat/heap.h"
#include "chat/python_ops.h"

namespace kvgate::chat {
// Internal linkage, like a class private to one file: render.cc and evaluate.cc are compiled
// as one unit (src/CMakeLists.txt), and the compiler inlines across the walk as it would
// within one file.
namespace {

enum class Flow { kNormal, kBreak, kContinue };

using NameTable = Template::NameTable;

class Renderer {
 public:
  Renderer(const Value& variables, const NameTable& names, Heap& heap)
      : heap_(heap), globals_(names.names.size()) {
    if (variables.kind == Value::Kind::kDict) {
      for (const auto& [name, value] : *variables.dict()) {
        auto it = names.numbers.find(name);
        if (it != names.numbers.end()) globals_[it->second] = &value;
      }
    }
    PushFrame();
  }

  void Exec(const Node& n, std::string& out, Flow& flow);

 private:
  // A for loop's state; `loop` itself becomes a value only if the body uses it as one
  // (`loop.index` and the like are answered from here).
  struct LoopState {
    const List* items = nullptr;
    int64_t index = 0;
    Value as_value;
    bool built = false;
  };
  // Variables of one scope: the template's top level, a for body, a macro call. Few, so
  // looked up by a linear scan over their numbers.
  struct Frame {
    std::vector<std::pair<int, Value>> vars;
    LoopState* loop = nullptr;
    // The scope searched after this one: the one below, except for macro bodies, which see
    // the scope they were defined in, and caller bodies, which see their call site (Jinja2's
    // lexical scoping: a macro does not see its caller's loop variables). Frame 0, the
    // template's top level, is searched last.
    size_t outer = 0;
  };

  // Scopes in use are frames_[0, depth_); the ones above keep their storage for reuse.
  void PushFrame() { PushFrame(depth_ == 0 ? 0 : depth_ - 1); }
  void PushFrame(size_t outer);
  void PopFrame() { --depth_; }

  // The value a name / attribute / item chain refers to, without copying it; null when the
  // expression is something else (or its base is undefined). Valid until the next mutation.
  const Value* EvalRef(const Node& n);

  // EvalRef of an attribute / item chain: down to its base, then back up one member at a
  // time (a loop, not a recursion: this runs for most expressions a template evaluates).
  const Value* ChainRef(const Node& n);

  // `obj.name` or `obj[literal]` (node `m`) in place; null when absent.
  static const Value* Member(const Value& obj, const Node& m);

  // The value of `n`: read in place (EvalRef) when `in_place` allows and it can be, else
  // evaluated into `storage`. Callers pass in_place = false when something evaluated after
  // this read could change what a reference points to.
  const Value& Read(const Node& n, Value& storage, bool in_place = true);

  // Whether expression `n` is true, without building the values of boolean operators,
  // comparisons and tests (`a and b` is true exactly when both are).
  bool Truthy(const Node& n);

  static bool IsComparison(BinaryOp op) { return op >= BinaryOp::kEq && op <= BinaryOp::kNotIn; }

  // `l op r` for ==, !=, <, >, <=, >=, in, not in. Operands are read in place where that is
  // safe: the right one always (nothing is evaluated after it), the left one when the right
  // one makes no call (nothing else can change what it refers to).
  bool Comparison(const Node& n);

  // Innermost scope first, then the template's variables; null when undefined.
  const Value* FindName(int id);

  Value Lookup(int id);

  void SetVar(int id, Value v);

  // One field of a loop (an index into kLoopFields).
  static Value LoopField(const LoopState& loop, int field);

  // Rare (`loop` used as a value), so kept out of FindName's callers.
  [[gnu::noinline]] const Value& LoopValue(LoopState& loop);

  static bool IsLoop(const Node& n);

  // `loop.<field>` (node `n`) straight from the innermost loop; false when `loop` is not a
  // loop there or has no such field.
  bool LoopAttr(const Node& n, Value* out);

  void ExecFor(const Node& n, std::string& out, Flow& flow);

  void Bind(const std::vector<int>& ids, const Value& item);

  // Calls a macro (its parameters bound from `args` and `kwargs`, else their defaults; with
  // `caller` for a {% call %} block) or a caller body; returns what it wrote.
  Value Call(const Callable& c, List& args, Kwargs& kwargs, const Value* caller = nullptr);

  Value Eval(const Node& n);

  // Jinja2's message for using an undefined value that expression `n` produced.
  [[noreturn]] void FailUndefined(const Node& n);

  static std::string Describe(const Node& n);

  Value Index(const Value& obj, const Value& key);

  // Writes str() of expression `e`. String concatenations (`~`, and `+` while its operands
  // are strings) go to `out` piece by piece instead of building each intermediate string.
  void Output(const Node& e, std::string& out);

  // A chain a + b + c...: strings are appended as they come; the first operand that is not
  // a string turns the sum so far into a value, and the rest is added the ordinary way, in
  // the same order, so any error is the one Python raises.
  void OutputSum(const Node& e, std::string& out);

  Value EvalBinary(const Node& n);

  // `l op r` for the arithmetic operators; the operand nodes name an undefined operand.
  Value Arithmetic(BinaryOp op_code, Value l, const Value& r, const Node& left, const Node& right);

  // Python's sequence * n for a string or a list.
  Value Repeat(const Value& sequence, int64_t times);

  // A list for arguments and other temporaries, allocating from the heap.
  List TempList() { return List(heap_.resource()); }

  void EvalArgs(const Node& n, List& args, Kwargs& kwargs);

  Value EvalCall(const Node& n);

  static bool ArgumentsMayMutate(const Node& n);

  // The characters of str(v), living as long as the heap.
  std::string_view Text(const Value& v);

  bool ApplyTest(const Node& n);

  // Like Eval, but attribute/item access on undefined yields undefined (for `is defined`).
  Value EvalSoft(const Node& n);

  Value ApplyFilter(const Node& n, Value v);

  Heap& heap_;                         // where the values the render makes live
  std::vector<const Value*> globals_;  // the template's variables, by number
  std::vector<Frame> frames_;
  size_t depth_ = 0;
  static constexpr int kMaxCallDepth = 250;
  int call_depth_ = 0;  // macro and caller calls in progress
};

}  // namespace
}  // namespace kvgate::chat
