// Evaluates template expressions with Jinja2's semantics: names and attribute chains read
// in place where nothing can change them, Python's operators and their errors, calls of
// macros and of the builtins (filters, tests, methods and globals: builtins.h).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <span>

#include "chat/builtins.h"
#include "chat/renderer.h"

namespace kvgate::chat {
namespace {

// Python's v[start:stop:step] for lists and strings.
Value SliceOf(Heap& heap, const Value& v, const Value& start, const Value& stop,
              const Value& step) {
  const bool is_str = v.is_string();
  List items = is_str ? Iterate(v) : (v.kind == Value::Kind::kList ? *v.list() : Iterate(v));
  const int64_t n = static_cast<int64_t>(items.size());
  const int64_t st = step.defined() && !step.is_none() ? step.integer : 1;
  if (st == 0) Fail("slice step cannot be zero");
  auto clamp = [&](const Value& x, int64_t fallback) {
    if (!x.defined() || x.is_none()) return fallback;
    int64_t i = x.integer;
    if (i < 0) i += n;
    if (st > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t b = clamp(start, st > 0 ? 0 : n - 1);
  const int64_t e = clamp(stop, st > 0 ? n : -1);
  List out(heap.resource());
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) out.push_back(items[i]);
  if (!is_str) return heap.MakeList(std::move(out));
  std::string s;
  for (const Value& c : out) s += c.text;
  return heap.MakeString(s);
}

}  // namespace

// The value a name / attribute / item chain refers to, without copying it; null when the
// expression is something else (or its base is undefined). Valid until the next mutation.
inline const Value* Renderer::EvalRef(const Node& n) {
  switch (n.kind) {
    case NodeKind::kLiteral:
      return &n.value;
    case NodeKind::kName:
      return FindName(n.id);
    case NodeKind::kAttr:
    case NodeKind::kItem:
      return ChainRef(n);
    default:
      return nullptr;
  }
}

// EvalRef of an attribute / item chain: down to its base, then back up one member at a
// time (a loop, not a recursion: this runs for most expressions a template evaluates).
inline const Value* Renderer::ChainRef(const Node& n) {
  std::array<const Node*, 8> members;
  size_t count = 0;
  const Node* base = &n;
  for (; base->kind == NodeKind::kAttr || base->kind == NodeKind::kItem; base = base->a[0].get()) {
    if (count == members.size()) return nullptr;
    if (base->kind == NodeKind::kAttr && IsLoop(*base->a[0])) {
      return nullptr;  // Eval answers loop.<field> without a dict
    }
    if (base->kind == NodeKind::kItem && base->a[1]->kind != NodeKind::kLiteral) return nullptr;
    members[count++] = base;
  }
  const Value* v = base->kind == NodeKind::kName      ? FindName(base->id)
                   : base->kind == NodeKind::kLiteral ? &base->value
                                                      : nullptr;
  while (v != nullptr && count > 0) v = Member(*v, *members[--count]);
  return v;
}

// `obj.name` or `obj[literal]` (node `m`) in place; null when absent.
inline const Value* Renderer::Member(const Value& obj, const Node& m) {
  const Value* key = m.kind == NodeKind::kItem ? &m.a[1]->value : nullptr;
  if (obj.kind == Value::Kind::kDict && (key == nullptr || key->is_string())) {
    const std::string_view name = key ? key->text : std::string_view(m.text);
    for (const auto& [k, v] : *obj.dict()) {
      if (SameKey(k, name)) return &v;
    }
  } else if (obj.kind == Value::Kind::kList && key && key->kind == Value::Kind::kInt) {
    const int64_t i = NormalizeIndex(key->integer, obj.list()->size());
    if (i >= 0 && i < static_cast<int64_t>(obj.list()->size())) return &(*obj.list())[i];
  } else if (obj.is_group && key == nullptr) {
    if (Is(m.text, "grouper")) return &(*obj.list())[0];
    if (Is(m.text, "list")) return &(*obj.list())[1];
  }
  return nullptr;
}

// The value of `n`: read in place (EvalRef) when `in_place` allows and it can be, else
// evaluated into `storage`. Callers pass in_place = false when something evaluated after
// this read could change what a reference points to.
inline const Value& Renderer::Read(const Node& n, Value& storage, bool in_place) {
  if (in_place) {
    if (const Value* v = EvalRef(n)) return *v;
  }
  storage = Eval(n);
  return storage;
}

// Whether expression `n` is true, without building the values of boolean operators,
// comparisons and tests (`a and b` is true exactly when both are).
inline bool Renderer::Truthy(const Node& n) {
  switch (n.kind) {
    case NodeKind::kBinary:
      if (n.op == BinaryOp::kAnd) return Truthy(*n.a[0]) && Truthy(*n.a[1]);
      if (n.op == BinaryOp::kOr) return Truthy(*n.a[0]) || Truthy(*n.a[1]);
      if (IsComparison(n.op)) return Comparison(n);
      break;
    case NodeKind::kUnary:
      if (Is(n.text, "not")) return !Truthy(*n.a[0]);
      break;
    case NodeKind::kTest:
      return ApplyTest(n) != n.negated;
    default:
      break;
  }
  if (const Value* v = EvalRef(n)) return v->Truthy();
  return Eval(n).Truthy();
}

// `l op r` for ==, !=, <, >, <=, >=, in, not in. Operands are read in place where that is
// safe: the right one always (nothing is evaluated after it), the left one when the right
// one makes no call (nothing else can change what it refers to).
inline bool Renderer::Comparison(const Node& n) {
  Value left, right;
  const Value& l = Read(*n.a[0], left, !n.a[1]->may_mutate);
  const Value& r = Read(*n.a[1], right);
  switch (n.op) {
    case BinaryOp::kEq:
      return Equal(l, r);
    case BinaryOp::kNe:
      return !Equal(l, r);
    case BinaryOp::kLt:
      return Compare(l, r) < 0;
    case BinaryOp::kGt:
      return Compare(l, r) > 0;
    case BinaryOp::kLe:
      return Compare(l, r) <= 0;
    case BinaryOp::kGe:
      return Compare(l, r) >= 0;
    case BinaryOp::kIn:
      return Contains(r, l);
    case BinaryOp::kNotIn:
      return !Contains(r, l);
    default:
      Fail("not a comparison");
  }
}

inline Value Renderer::Eval(const Node& n) {
  switch (n.kind) {
    case NodeKind::kLiteral:
      return n.value;
    case NodeKind::kName:
      if (const Value* v = FindName(n.id)) return *v;
      // A global is defined for the template like any variable.
      if (n.builtin >= 0) return heap_.MakeCallable({nullptr, false, 0, n.builtin});
      return Value::Undefined();
    case NodeKind::kList: {
      List items = TempList();
      for (const auto& c : n.children) items.push_back(Eval(*c));
      return Is(n.text, "tuple") ? heap_.MakeTuple(std::move(items))
                                 : heap_.MakeList(std::move(items));
    }
    case NodeKind::kDict: {
      Value d = heap_.MakeDict();
      for (size_t i = 0; i + 1 < n.children.size(); i += 2) {
        const std::string_view key = Text(Eval(*n.children[i]));
        d.Set(key, Eval(*n.children[i + 1]));
      }
      return d;
    }
    case NodeKind::kAttr: {
      if (IsLoop(*n.a[0])) {
        Value field;
        if (LoopAttr(n, &field)) return field;
      }
      if (const Value* v = EvalRef(n)) return *v;
      const Value obj = Eval(*n.a[0]);
      if (!obj.defined()) Fail(fmt::format("'{}' is undefined", Describe(*n.a[0])));
      if (obj.kind == Value::Kind::kDict) return obj.Get(n.text);
      if (const Value* member = Member(obj, n)) return *member;
      return Value::Undefined();
    }
    case NodeKind::kItem: {
      const Value obj = Eval(*n.a[0]);
      const Value key = Eval(*n.a[1]);
      if (!obj.defined()) Fail(fmt::format("'{}' is undefined", Describe(*n.a[0])));
      return Index(obj, key);
    }
    case NodeKind::kSlice:
      return SliceOf(heap_, Eval(*n.a[0]), n.a[1] ? Eval(*n.a[1]) : Value(),
                     n.a[2] ? Eval(*n.a[2]) : Value(), n.a[3] ? Eval(*n.a[3]) : Value());
    case NodeKind::kCall:
      return EvalCall(n);
    case NodeKind::kFilter:
      return ApplyFilter(n, Eval(*n.a[0]));
    case NodeKind::kTest: {
      const bool result = ApplyTest(n);
      return Value::Bool(n.negated ? !result : result);
    }
    case NodeKind::kUnary: {
      if (Is(n.text, "not")) return Value::Bool(!Truthy(*n.a[0]));
      const Value v = Eval(*n.a[0]);
      if (v.kind == Value::Kind::kInt) return Value::Int(Is(n.text, "-") ? -v.integer : v.integer);
      if (v.kind == Value::Kind::kFloat)
        return Value::Float(Is(n.text, "-") ? -v.number : v.number);
      Fail(fmt::format("bad operand type for unary {}: '{}'", n.text, KindName(v)));
    }
    case NodeKind::kBinary:
      return EvalBinary(n);
    case NodeKind::kTernary: {
      if (Truthy(*n.a[1])) return Eval(*n.a[0]);
      return n.a[2] ? Eval(*n.a[2]) : Value::Undefined();
    }
    default:
      Fail("statement used as an expression");
  }
}

// Jinja2's message for using an undefined value that expression `n` produced.
inline void Renderer::FailUndefined(const Node& n) {
  if (n.kind == NodeKind::kAttr ||
      (n.kind == NodeKind::kItem && n.a[1]->kind == NodeKind::kLiteral)) {
    const Value obj = Eval(*n.a[0]);
    if (n.kind == NodeKind::kItem && !n.a[1]->value.is_string()) {
      Fail(fmt::format("{} has no element {}", ObjectTypeRepr(obj), n.a[1]->value.Repr()));
    }
    FailNoMethod(obj, n.kind == NodeKind::kAttr ? std::string_view(n.text) : n.a[1]->value.text);
  }
  Fail(fmt::format("'{}' is undefined", Describe(n)));
}

inline std::string Renderer::Describe(const Node& n) {
  if (n.kind == NodeKind::kName) return n.text;
  if (n.kind == NodeKind::kAttr) return Describe(*n.a[0]) + "." + n.text;
  return "value";
}

inline Value Renderer::Index(const Value& obj, const Value& key) {
  switch (obj.kind) {
    case Value::Kind::kDict:
      return obj.Get(key.Str());
    case Value::Kind::kList: {
      if (key.kind != Value::Kind::kInt) return Value::Undefined();
      const int64_t i = NormalizeIndex(key.integer, obj.list()->size());
      if (i < 0 || i >= static_cast<int64_t>(obj.list()->size())) return Value::Undefined();
      return (*obj.list())[i];
    }
    case Value::Kind::kString: {
      if (key.kind != Value::Kind::kInt) return Value::Undefined();
      const auto cps = CodePoints(obj.text);
      const int64_t i = NormalizeIndex(key.integer, cps.size());
      if (i < 0 || i >= static_cast<int64_t>(cps.size())) return Value::Undefined();
      return heap_.MakeString(cps[i]);
    }
    default:
      return Value::Undefined();
  }
}

// Writes str() of expression `e`. String concatenations (`~`, and `+` while its operands
// are strings) go to `out` piece by piece instead of building each intermediate string.
inline void Renderer::Output(const Node& e, std::string& out) {
  if (e.kind == NodeKind::kBinary && e.op == BinaryOp::kConcat) {
    Output(*e.a[0], out);
    Output(*e.a[1], out);
    return;
  }
  if (e.kind == NodeKind::kBinary && e.op == BinaryOp::kAdd) {
    OutputSum(e, out);
    return;
  }
  if (const Value* v = EvalRef(e)) {
    if (v->is_string()) {
      out += v->text;
    } else {
      out += v->Str();
    }
    return;
  }
  out += Eval(e).Str();
}

// A chain a + b + c...: strings are appended as they come; the first operand that is not
// a string turns the sum so far into a value, and the rest is added the ordinary way, in
// the same order, so any error is the one Python raises.
inline void Renderer::OutputSum(const Node& e, std::string& out) {
  std::array<const Node*, 16> reversed;
  size_t count = 0;
  const Node* x = &e;
  for (; x->kind == NodeKind::kBinary && x->op == BinaryOp::kAdd; x = x->a[0].get()) {
    if (count + 1 == reversed.size()) {  // a very long chain: the ordinary way
      out += Eval(e).Str();
      return;
    }
    reversed[count++] = x->a[1].get();
  }
  reversed[count++] = x;
  const std::span<const Node*> terms(reversed.data(), count);
  std::reverse(terms.begin(), terms.end());
  const size_t mark = out.size();
  size_t i = 0;
  Value sum;
  for (; i < terms.size(); ++i) {
    Value evaluated;
    const Value& v = Read(*terms[i], evaluated);
    if (v.is_string()) {
      out += v.text;
      continue;
    }
    sum = i == 0 ? v
                 : Arithmetic(BinaryOp::kAdd, heap_.MakeString(std::string_view(out).substr(mark)),
                              v, *terms[0], *terms[i]);
    out.resize(mark);
    break;
  }
  if (i == terms.size()) return;
  for (++i; i < terms.size(); ++i) {
    sum = Arithmetic(BinaryOp::kAdd, std::move(sum), Eval(*terms[i]), *terms[0], *terms[i]);
  }
  out += sum.Str();
}

inline Value Renderer::EvalBinary(const Node& n) {
  switch (n.op) {
    case BinaryOp::kAnd: {
      Value l = Eval(*n.a[0]);
      return l.Truthy() ? Eval(*n.a[1]) : l;
    }
    case BinaryOp::kOr: {
      Value l = Eval(*n.a[0]);
      return l.Truthy() ? l : Eval(*n.a[1]);
    }
    default:
      break;
  }
  if (IsComparison(n.op)) return Value::Bool(Comparison(n));
  Value l = Eval(*n.a[0]);
  // The right operand is read in place when it can be (nothing is evaluated after it).
  Value evaluated;
  const Value& r = Read(*n.a[1], evaluated);
  switch (n.op) {
    case BinaryOp::kConcat:
      return heap_.Concat(Text(l), Text(r));
    default:
      return Arithmetic(n.op, std::move(l), r, *n.a[0], *n.a[1]);
  }
}

// `l op r` for the arithmetic operators; the operand nodes name an undefined operand.
inline Value Renderer::Arithmetic(BinaryOp op_code, Value l, const Value& r, const Node& left,
                                  const Node& right) {
  // Arithmetic on Undefined raises, as Jinja2's Undefined does.
  if (!l.defined()) FailUndefined(left);
  if (!r.defined()) FailUndefined(right);
  if (op_code == BinaryOp::kAdd) {
    if (l.is_string() && r.is_string()) return heap_.Concat(l.text, r.text);
    if (l.kind == Value::Kind::kList && r.kind == Value::Kind::kList) {
      List* items = heap_.NewList(l.list()->size() + r.list()->size());
      items->insert(items->end(), l.list()->begin(), l.list()->end());
      items->insert(items->end(), r.list()->begin(), r.list()->end());
      return Value::Of(items);
    }
  }
  if (op_code == BinaryOp::kAdd && (l.is_string() || l.kind == Value::Kind::kList)) {
    Fail(fmt::format("can only concatenate {} (not \"{}\") to {}", KindName(l), KindName(r),
                     KindName(l)));
  }
  if (op_code == BinaryOp::kMul && (l.is_string() || l.kind == Value::Kind::kList) &&
      r.kind == Value::Kind::kInt) {
    return Repeat(l, r.integer);
  }
  if (op_code == BinaryOp::kMul && l.kind == Value::Kind::kInt &&
      (r.is_string() || r.kind == Value::Kind::kList)) {
    return Repeat(r, l.integer);
  }
  const bool numbers = (l.is_number() || l.kind == Value::Kind::kBool) &&
                       (r.is_number() || r.kind == Value::Kind::kBool);
  if (!numbers) {
    Fail(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", OperatorText(op_code),
                     KindName(l), KindName(r)));
  }
  // A bool counts as an int, as in Python.
  auto as_int = [](const Value& v) { return v.kind == Value::Kind::kBool ? v.boolean : v.integer; };
  auto as_double = [&](const Value& v) {
    return v.kind == Value::Kind::kFloat ? v.number : static_cast<double>(as_int(v));
  };
  const bool ints = l.kind != Value::Kind::kFloat && r.kind != Value::Kind::kFloat;
  const int64_t ai = ints ? as_int(l) : 0, bi = ints ? as_int(r) : 0;
  const double ad = as_double(l), bd = as_double(r);
  switch (op_code) {
    case BinaryOp::kAdd:
      return ints ? Value::Int(ai + bi) : Value::Float(ad + bd);
    case BinaryOp::kSub:
      return ints ? Value::Int(ai - bi) : Value::Float(ad - bd);
    case BinaryOp::kMul:
      return ints ? Value::Int(ai * bi) : Value::Float(ad * bd);
    case BinaryOp::kDiv:
      if (bd == 0) Fail("division by zero");
      return Value::Float(ad / bd);
    case BinaryOp::kFloorDiv:
      if (bd == 0) Fail("integer division or modulo by zero");
      if (ints) {
        int64_t q = ai / bi;
        if ((ai % bi != 0) && ((ai < 0) != (bi < 0))) --q;
        return Value::Int(q);
      }
      return Value::Float(std::floor(ad / bd));
    case BinaryOp::kMod: {
      if (bd == 0) Fail("integer division or modulo by zero");
      if (ints) {
        int64_t m = ai % bi;
        if (m != 0 && ((m < 0) != (bi < 0))) m += bi;
        return Value::Int(m);
      }
      double m = std::fmod(ad, bd);
      if (m != 0 && ((m < 0) != (bd < 0))) m += bd;
      return Value::Float(m);
    }
    case BinaryOp::kPow:
      if (ints && bi >= 0) {
        int64_t p = 1;
        for (int64_t i = 0; i < bi; ++i) p *= ai;
        return Value::Int(p);
      }
      return Value::Float(std::pow(ad, bd));
    default:
      Fail(fmt::format("unknown operator {}", OperatorText(op_code)));
  }
}

// Python's sequence * n for a string or a list.
inline Value Renderer::Repeat(const Value& sequence, int64_t times) {
  const bool is_list = sequence.kind == Value::Kind::kList;
  const size_t size = is_list ? sequence.list()->size() * sizeof(Value) : sequence.text.size();
  if (size == 0 || times <= 0) times = 0;  // (an empty sequence repeats to nothing, fast)
  if (times > 0 && size > (size_t{1} << 30) / static_cast<uint64_t>(times)) {
    Fail("the repeated sequence would pass 1 GiB");  // (Python: MemoryError)
  }
  if (is_list) {
    List* items = heap_.NewList(sequence.list()->size() * static_cast<size_t>(times));
    for (int64_t i = 0; i < times; ++i) {
      items->insert(items->end(), sequence.list()->begin(), sequence.list()->end());
    }
    return Value::Of(items);
  }
  std::string s;
  for (int64_t i = 0; i < times; ++i) s += sequence.text;
  return heap_.MakeString(s);
}

inline void Renderer::EvalArgs(const Node& n, List& args, Kwargs& kwargs) {
  for (const auto& c : n.children) args.push_back(Eval(*c));
  for (const auto& [k, v] : n.kwargs) kwargs.emplace_back(k, Eval(*v));
}

inline Value Renderer::EvalCall(const Node& n) {
  List args = TempList();
  Kwargs kwargs;
  const Node& callee = *n.a[0];
  if (callee.kind == NodeKind::kAttr) {
    // The receiver is read in place unless evaluating the arguments could change what it
    // refers to (only calls can).
    Value evaluated;
    const Value* obj = &Read(*callee.a[0], evaluated, !ArgumentsMayMutate(n));
    if (obj->kind == Value::Kind::kDict) {
      const Value fn = obj->Get(callee.text);
      if (fn.kind == Value::Kind::kCallable) {
        EvalArgs(n, args, kwargs);
        return Call(*fn.callable(), args, kwargs);
      }
    }
    EvalArgs(n, args, kwargs);
    const MethodFn method = MethodFor(callee.builtin, *obj);
    if (method == nullptr) FailNoMethod(*obj, callee.text);
    return method(heap_, *obj, args, kwargs);
  }
  EvalArgs(n, args, kwargs);
  if (callee.kind == NodeKind::kName) {
    const Value* f = FindName(callee.id);
    if (f != nullptr && f->kind == Value::Kind::kCallable)
      return Call(*f->callable(), args, kwargs);
    if (callee.builtin < 0) Fail(fmt::format("'{}' is undefined", callee.text));
    return GlobalById(callee.builtin)(heap_, args, kwargs);
  }
  const Value f = Eval(callee);
  if (f.kind == Value::Kind::kCallable) return Call(*f.callable(), args, kwargs);
  Fail("object is not callable");
}

inline bool Renderer::ArgumentsMayMutate(const Node& n) {
  return std::any_of(n.children.begin(), n.children.end(),
                     [](const auto& c) { return c && c->may_mutate; }) ||
         std::any_of(n.kwargs.begin(), n.kwargs.end(),
                     [](const auto& kw) { return kw.second && kw.second->may_mutate; });
}

// The characters of str(v), living as long as the heap.
inline std::string_view Renderer::Text(const Value& v) {
  return v.is_string() ? v.text : heap_.MakeString(v.Str()).text;
}

inline bool Renderer::ApplyTest(const Node& n) {
  const std::string_view t = n.text;
  if (Is(t, "defined") || Is(t, "undefined")) {
    const Value* ref = EvalRef(*n.a[0]);  // null also when a chain's base is undefined
    const bool defined = ref != nullptr ? ref->defined() : EvalSoft(*n.a[0]).defined();
    return Is(t, "defined") ? defined : !defined;
  }
  Value evaluated;  // the arguments are evaluated after the subject
  const Value& v = Read(*n.a[0], evaluated, !ArgumentsMayMutate(n));
  List args = TempList();
  Kwargs kwargs;
  EvalArgs(n, args, kwargs);
  if (n.builtin < 0) Fail(fmt::format("no test named '{}'", t));
  return TestById(n.builtin)(v, args);
}

// Like Eval, but attribute/item access on undefined yields undefined (for `is defined`).
inline Value Renderer::EvalSoft(const Node& n) {
  if (n.kind == NodeKind::kAttr || n.kind == NodeKind::kItem) {
    const Value obj = EvalSoft(*n.a[0]);
    if (!obj.defined()) return Value::Undefined();
    if (n.kind == NodeKind::kAttr)
      return obj.kind == Value::Kind::kDict ? obj.Get(n.text) : Value();
    return Index(obj, Eval(*n.a[1]));
  }
  return Eval(n);
}

inline Value Renderer::ApplyFilter(const Node& n, Value v) {
  List args = TempList();
  Kwargs kwargs;
  EvalArgs(n, args, kwargs);
  if (n.builtin < 0) Fail(fmt::format("no filter named '{}'", n.text));
  return FilterById(n.builtin)(heap_, std::move(v), args, kwargs);
}

}  // namespace kvgate::chat
