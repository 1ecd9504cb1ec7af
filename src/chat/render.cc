// Renders the AST with Jinja2's semantics: Python-like values and operators, scoping where
// `for` bodies (and macros) get their own scope while `if` does not, loop variables,
// filters, tests, the string/dict/list methods chat templates call, and the globals
// transformers provides.
#include <fmt/format.h>
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <span>

#include "chat/ast.h"
#include "chat/heap.h"

namespace kvgate::chat {

namespace {

// Keyword arguments of a call; names are the template's.
using Kwargs = std::vector<std::pair<std::string_view, Value>>;

struct RenderError {
  std::string message;
};
enum class Flow { kNormal, kBreak, kContinue };

[[noreturn]] void Fail(std::string message) { throw RenderError{std::move(message)}; }

// Whether `s` is the literal `lit`: filter, test and method names are compared against many
// literals per call, and a compile-time length makes each comparison a few instructions.
template <size_t N>
bool Is(std::string_view s, const char (&lit)[N]) {
  return s.size() == N - 1 && std::memcmp(s.data(), lit, N - 1) == 0;
}

// ---------- Unicode helpers (Python's str semantics are per code point) ----------
size_t CodePointLength(unsigned char lead) {
  if (lead >= 0xF0) return 4;
  if (lead >= 0xE0) return 3;
  if (lead >= 0xC0) return 2;
  return 1;
}

std::vector<std::string> CodePoints(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const size_t n = CodePointLength(static_cast<unsigned char>(s[i]));
    out.emplace_back(s.substr(i, n));
    i += n;
  }
  return out;
}

int32_t Decode(std::string_view cp) {
  utf8proc_int32_t c = -1;
  utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(cp.data()),
                   static_cast<utf8proc_ssize_t>(cp.size()), &c);
  return c;
}

bool PyIsSpace(int32_t c) {
  if (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F) || c == 0x85) return true;
  if (c < 0x80) return false;
  const auto cat = utf8proc_category(c);
  return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

// Python's str.strip family: whitespace by default, else any code point of `chars`. The
// result views `s`.
std::string_view Strip(std::string_view s, const Value* chars, bool left, bool right) {
  const bool custom = chars && chars->is_string();
  auto strip_it = [&](std::string_view cp) {
    if (custom) {
      for (size_t i = 0; i < chars->text.size();) {
        const size_t n = CodePointLength(static_cast<unsigned char>(chars->text[i]));
        if (chars->text.compare(i, n, cp) == 0) return true;
        i += n;
      }
      return false;
    }
    return PyIsSpace(Decode(cp));
  };
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e) {
      const size_t n = std::min(CodePointLength(static_cast<unsigned char>(s[b])), e - b);
      if (!strip_it(s.substr(b, n))) break;
      b += n;
    }
  }
  if (right) {
    while (e > b) {
      size_t start = e - 1;
      while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      if (!strip_it(s.substr(start, e - start))) break;
      e = start;
    }
  }
  return s.substr(b, e - b);
}

std::string MapCase(std::string_view s, bool upper) {
  std::string out;
  for (const std::string& cp : CodePoints(s)) {
    const int32_t c = Decode(cp);
    utf8proc_uint8_t buf[4];
    const auto n = utf8proc_encode_char(upper ? utf8proc_toupper(c) : utf8proc_tolower(c), buf);
    out.append(reinterpret_cast<char*>(buf), static_cast<size_t>(n));
  }
  return out;
}

// Python's str.split / rsplit. The parts view `s`, except where a whitespace split with
// `maxsplit` rejoins its tail (made in `heap`).
List Split(Heap& heap, std::string_view s, const Value* sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string_view> parts;
  if (sep == nullptr || sep->is_none() || !sep->defined()) {
    // Whitespace split: runs collapse, ends are ignored.
    size_t word = 0;
    bool in_word = false;
    for (size_t i = 0; i < s.size();) {
      const size_t n = std::min(CodePointLength(static_cast<unsigned char>(s[i])), s.size() - i);
      const bool space = PyIsSpace(Decode(s.substr(i, n)));
      if (space && in_word) parts.push_back(s.substr(word, i - word)), in_word = false;
      if (!space && !in_word) word = i, in_word = true;
      i += n;
    }
    if (in_word) parts.push_back(s.substr(word));
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) > maxsplit + 1) {
      // Rare in templates; rejoin the tail with single spaces (approximation of Python).
      const size_t joined_from = from_right ? 0 : static_cast<size_t>(maxsplit);
      const size_t joined_to = from_right ? parts.size() - maxsplit : parts.size();
      std::string rest;
      for (size_t i = joined_from; i < joined_to; ++i) {
        if (i > joined_from) rest += ' ';
        rest += parts[i];
      }
      const std::string_view joined = heap.MakeString(rest).text;
      parts.erase(parts.begin() + joined_from, parts.begin() + joined_to);
      parts.insert(parts.begin() + joined_from, joined);
    }
  } else {
    const std::string_view d = sep->text;
    if (d.empty()) Fail("empty separator");
    if (!from_right) {
      size_t start = 0;
      int64_t n = 0;
      for (size_t pos = s.find(d); pos != std::string_view::npos && (maxsplit < 0 || n < maxsplit);
           pos = s.find(d, start), ++n) {
        parts.push_back(s.substr(start, pos - start));
        start = pos + d.size();
      }
      parts.push_back(s.substr(start));
    } else {
      size_t end = s.size();
      int64_t n = 0;
      while (maxsplit < 0 || n < maxsplit) {
        if (end < d.size()) break;
        const size_t pos = s.rfind(d, end - d.size());
        if (pos == std::string_view::npos) break;
        parts.push_back(s.substr(pos + d.size(), end - pos - d.size()));
        end = pos;
        ++n;
      }
      parts.push_back(s.substr(0, end));
      std::reverse(parts.begin(), parts.end());
    }
  }
  List out;
  out.reserve(parts.size());
  for (std::string_view p : parts) out.push_back(Value::StringView(p));
  return out;
}

std::string KindName(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return "list";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kCallable:
      return "function";
  }
  return "object";
}

List Iterate(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kList:
      return *v.list();
    case Value::Kind::kDict: {
      List keys;
      for (const auto& [k, x] : *v.dict()) keys.push_back(Value::StringView(k));
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      for (size_t i = 0; i < v.text.size();) {
        const size_t n =
            std::min(CodePointLength(static_cast<unsigned char>(v.text[i])), v.text.size() - i);
        chars.push_back(Value::StringView(v.text.substr(i, n)));
        i += n;
      }
      return chars;
    }
    case Value::Kind::kUndefined:
      return {};
    default:
      Fail(fmt::format("'{}' object is not iterable", KindName(v)));
  }
}

int Compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    return a.AsDouble() < b.AsDouble() ? -1 : a.AsDouble() > b.AsDouble() ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) return a.text < b.text ? -1 : a.text > b.text ? 1 : 0;
  if (a.kind == Value::Kind::kBool || b.kind == Value::Kind::kBool) {
    const double x = a.kind == Value::Kind::kBool ? a.boolean : a.AsDouble();
    const double y = b.kind == Value::Kind::kBool ? b.boolean : b.AsDouble();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  Fail(fmt::format("'<' not supported between instances of '{}' and '{}'", KindName(a),
                   KindName(b)));
}

int64_t NormalizeIndex(int64_t i, size_t size) {
  return i < 0 ? i + static_cast<int64_t>(size) : i;
}

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

const Value* Kwarg(Kwargs& kwargs, std::string_view name) {
  for (auto& [k, v] : kwargs) {
    if (k == name) return &v;
  }
  return nullptr;
}

// Positional-or-keyword argument `index`/`name`.
const Value* Arg(List& args, Kwargs& kwargs, size_t index, std::string_view name) {
  if (index < args.size()) return &args[index];
  return Kwarg(kwargs, name);
}

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

  void Exec(const Node& n, std::string& out, Flow& flow) {
    switch (n.kind) {
      case NodeKind::kBody:
        for (const auto& c : n.children) {
          Exec(*c, out, flow);
          if (flow != Flow::kNormal) return;
        }
        return;
      case NodeKind::kText:
        out += n.text;
        return;
      case NodeKind::kOutput:
        Output(*n.a[0], out);
        return;
      case NodeKind::kIf: {
        size_t i = 0;
        for (; i + 1 < n.children.size(); i += 2) {
          if (Truthy(*n.children[i])) {
            Exec(*n.children[i + 1], out, flow);
            return;
          }
        }
        if (i < n.children.size()) Exec(*n.children[i], out, flow);
        return;
      }
      case NodeKind::kFor:
        ExecFor(n, out, flow);
        return;
      case NodeKind::kSet: {
        Value v;
        if (n.a[0]) {
          v = Eval(*n.a[0]);
        } else {
          std::string captured;
          Flow f = Flow::kNormal;
          Exec(*n.a[1], captured, f);
          v = heap_.MakeString(captured);
        }
        if (n.names.size() == 2) {
          Value ns = Lookup(n.ids[0]);
          if (ns.kind != Value::Kind::kDict || !ns.is_namespace) {
            Fail("cannot assign attribute on non-namespace object");
          }
          ns.Set(n.names[1], std::move(v));
        } else {
          SetVar(n.ids[0], std::move(v));
        }
        return;
      }
      case NodeKind::kMacro:
        SetVar(n.id, heap_.MakeCallable({&n, /*is_caller=*/false, depth_ - 1}));
        return;
      case NodeKind::kCallBlock: {
        // The macro gets `caller`, the block's body, as a hidden argument; the body sees the
        // scope of the call site.
        const Node& call = *n.a[0];
        if (call.kind != NodeKind::kCall) Fail("{% call %} must call a macro");
        const Value macro = Eval(*call.a[0]);
        if (macro.kind != Value::Kind::kCallable) {
          Fail(fmt::format("'{}' is not a macro", Describe(*call.a[0])));
        }
        List args = TempList();
        Kwargs kwargs;
        EvalArgs(call, args, kwargs);
        const Value caller = heap_.MakeCallable({n.a[1].get(), /*is_caller=*/true, depth_ - 1});
        out += Call(*macro.callable(), args, kwargs, &caller).text;
        return;
      }
      case NodeKind::kFilterBlock: {
        std::string captured;
        Flow f = Flow::kNormal;
        Exec(*n.a[1], captured, f);
        out += ApplyFilter(*n.a[0], heap_.MakeString(captured)).Str();
        return;
      }
      case NodeKind::kBreak:
        flow = Flow::kBreak;
        return;
      case NodeKind::kContinue:
        flow = Flow::kContinue;
        return;
      default:
        out += Eval(n).Str();
    }
  }

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
  void PushFrame(size_t outer) {
    if (depth_ == frames_.size()) frames_.emplace_back();
    Frame& frame = frames_[depth_++];
    frame.vars.clear();
    frame.loop = nullptr;
    frame.outer = outer;
  }
  void PopFrame() { --depth_; }

  // The value a name / attribute / item chain refers to, without copying it; null when the
  // expression is something else (or its base is undefined). Valid until the next mutation.
  const Value* EvalRef(const Node& n) {
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
  const Value* ChainRef(const Node& n) {
    std::array<const Node*, 8> members;
    size_t count = 0;
    const Node* base = &n;
    for (; base->kind == NodeKind::kAttr || base->kind == NodeKind::kItem;
         base = base->a[0].get()) {
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
  static const Value* Member(const Value& obj, const Node& m) {
    const Value* key = m.kind == NodeKind::kItem ? &m.a[1]->value : nullptr;
    if (obj.kind == Value::Kind::kDict && (key == nullptr || key->is_string())) {
      const std::string_view name = key ? key->text : std::string_view(m.text);
      for (const auto& [k, v] : *obj.dict()) {
        if (SameKey(k, name)) return &v;
      }
    } else if (obj.kind == Value::Kind::kList && key && key->kind == Value::Kind::kInt) {
      const int64_t i = NormalizeIndex(key->integer, obj.list()->size());
      if (i >= 0 && i < static_cast<int64_t>(obj.list()->size())) return &(*obj.list())[i];
    }
    return nullptr;
  }

  // The value of `n`: read in place (EvalRef) when `in_place` allows and it can be, else
  // evaluated into `storage`. Callers pass in_place = false when something evaluated after
  // this read could change what a reference points to.
  const Value& Read(const Node& n, Value& storage, bool in_place = true) {
    if (in_place) {
      if (const Value* v = EvalRef(n)) return *v;
    }
    storage = Eval(n);
    return storage;
  }

  // Whether expression `n` is true, without building the values of boolean operators,
  // comparisons and tests (`a and b` is true exactly when both are).
  bool Truthy(const Node& n) {
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

  static bool IsComparison(BinaryOp op) { return op >= BinaryOp::kEq && op <= BinaryOp::kNotIn; }

  // `l op r` for ==, !=, <, >, <=, >=, in, not in. Operands are read in place where that is
  // safe: the right one always (nothing is evaluated after it), the left one when the right
  // one makes no call (nothing else can change what it refers to).
  bool Comparison(const Node& n) {
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

  // Innermost scope first, then the template's variables; null when undefined.
  const Value* FindName(int id) {
    for (size_t i = depth_ - 1;; i = frames_[i].outer) {
      Frame& frame = frames_[i];
      for (auto& [number, value] : frame.vars) {
        if (number == id) return &value;
      }
      if (id == NameTable::kLoop && frame.loop != nullptr) return &LoopValue(*frame.loop);
      if (i == 0) return globals_[id];
    }
  }

  Value Lookup(int id) {
    const Value* v = FindName(id);
    return v ? *v : Value::Undefined();
  }

  void SetVar(int id, Value v) {
    std::vector<std::pair<int, Value>>& vars = frames_[depth_ - 1].vars;
    for (auto& [number, value] : vars) {
      if (number == id) {
        value = v;
        return;
      }
    }
    vars.emplace_back(id, v);
  }

  // One field of a loop (an index into kLoopFields).
  static Value LoopField(const LoopState& loop, int field) {
    const List& items = *loop.items;
    const int64_t i = loop.index;
    const int64_t len = static_cast<int64_t>(items.size());
    switch (static_cast<LoopFieldCode>(field)) {
      case LoopFieldCode::kIndex:
        return Value::Int(i + 1);
      case LoopFieldCode::kIndex0:
        return Value::Int(i);
      case LoopFieldCode::kRevindex:
        return Value::Int(len - i);
      case LoopFieldCode::kRevindex0:
        return Value::Int(len - i - 1);
      case LoopFieldCode::kFirst:
        return Value::Bool(i == 0);
      case LoopFieldCode::kLast:
        return Value::Bool(i == len - 1);
      case LoopFieldCode::kLength:
        return Value::Int(len);
      case LoopFieldCode::kDepth:
        return Value::Int(1);
      case LoopFieldCode::kDepth0:
        return Value::Int(0);
      case LoopFieldCode::kPrevitem:
        return i > 0 ? items[i - 1] : Value::Undefined();
      case LoopFieldCode::kNextitem:
        return i + 1 < len ? items[i + 1] : Value::Undefined();
    }
    return Value::Undefined();
  }

  // Rare (`loop` used as a value), so kept out of FindName's callers.
  [[gnu::noinline]] const Value& LoopValue(LoopState& loop) {
    if (!loop.built) {
      loop.as_value = heap_.MakeDict(std::size(kLoopFields));
      for (int field = 0; field < static_cast<int>(std::size(kLoopFields)); ++field) {
        loop.as_value.dict()->emplace_back(kLoopFields[field], LoopField(loop, field));
      }
      loop.built = true;
    }
    return loop.as_value;
  }

  static bool IsLoop(const Node& n) {
    return n.kind == NodeKind::kName && n.id == NameTable::kLoop;
  }

  // `loop.<field>` (node `n`) straight from the innermost loop; false when `loop` is not a
  // loop there or has no such field.
  bool LoopAttr(const Node& n, Value* out) {
    if (n.id < 0) return false;
    for (size_t i = depth_ - 1;; i = frames_[i].outer) {
      const Frame& frame = frames_[i];
      for (auto& [number, value] : frame.vars) {
        if (number == NameTable::kLoop) return false;  // rebound by `set`
      }
      if (frame.loop != nullptr) {
        *out = LoopField(*frame.loop, n.id);
        return true;
      }
      if (i == 0) return false;
    }
  }

  void ExecFor(const Node& n, std::string& out, Flow& flow) {
    const Value iterable = Eval(*n.a[0]);
    // A list is iterated in place when nothing in the loop can change it; otherwise, and for
    // strings, dicts and filtered loops, over a snapshot.
    List items = TempList();
    const bool in_place = iterable.kind == Value::Kind::kList && !n.a[1] && !n.a[2]->may_mutate;
    if (!in_place) items = Iterate(iterable);
    const List& seq = in_place ? *iterable.list() : items;
    if (n.a[1]) {  // `for x in xs if cond`: filter first; loop.length counts what is left
      List kept = TempList();  // (swapped with `items`: the same resource)
      for (Value& item : items) {
        PushFrame();
        Bind(n.ids, item);
        if (Eval(*n.a[1]).Truthy()) kept.push_back(item);
        PopFrame();
      }
      items.swap(kept);
    }
    if (seq.empty()) {
      if (n.a[3]) Exec(*n.a[3], out, flow);
      return;
    }
    // One scope for the loop, emptied per iteration: assignments never outlive an iteration
    // (as in Jinja2), and the scope keeps its storage.
    LoopState loop;
    loop.items = &seq;
    PushFrame();
    for (size_t i = 0; i < seq.size(); ++i) {
      Frame& frame = frames_[depth_ - 1];  // (the body's own scopes may have moved it)
      frame.vars.clear();
      frame.loop = &loop;
      loop.index = static_cast<int64_t>(i);
      loop.built = false;
      Bind(n.ids, seq[i]);
      Flow f = Flow::kNormal;
      Exec(*n.a[2], out, f);
      if (f == Flow::kBreak) break;
    }
    PopFrame();
    (void)flow;
  }

  void Bind(const std::vector<int>& ids, const Value& item) {
    if (ids.size() == 1) {
      SetVar(ids[0], item);
      return;
    }
    List parts = Iterate(item);
    if (parts.size() != ids.size()) {
      Fail(fmt::format("cannot unpack {} values into {} names", parts.size(), ids.size()));
    }
    for (size_t i = 0; i < ids.size(); ++i) SetVar(ids[i], parts[i]);
  }

  // Calls a macro (its parameters bound from `args` and `kwargs`, else their defaults; with
  // `caller` for a {% call %} block) or a caller body; returns what it wrote.
  Value Call(const Callable& c, List& args, Kwargs& kwargs, const Value* caller = nullptr) {
    const Node& n = *c.node;
    // Runaway recursion fails as in Jinja2 instead of overflowing the stack. (Jinja2's own
    // limit, from Python's, lets macros nest about 195 deep in transformers' sandbox.)
    if (call_depth_ == kMaxCallDepth) Fail("maximum recursion depth exceeded");
    ++call_depth_;  // (an error abandons the whole render: no need to undo on the way out)
    // (A macro kept past the scope it was defined in sees the innermost scope still alive.)
    PushFrame(std::min(c.scope, depth_ - 1));
    if (!c.is_caller) {
      for (size_t i = 0; i < n.names.size(); ++i) {
        Value value;
        if (i < args.size()) {
          value = args[i];
        } else if (const Value* kw = Kwarg(kwargs, n.names[i])) {
          value = *kw;
        } else if (n.children[i]) {
          value = Eval(*n.children[i]);
        }
        SetVar(n.ids[i], value);
      }
      if (caller != nullptr) SetVar(NameTable::kCaller, *caller);
    }
    std::string captured;
    Flow f = Flow::kNormal;
    Exec(c.is_caller ? n : *n.a[0], captured, f);
    PopFrame();
    --call_depth_;
    return heap_.MakeString(captured);
  }

  Value Eval(const Node& n) {
    switch (n.kind) {
      case NodeKind::kLiteral:
        return n.value;
      case NodeKind::kName:
        return Lookup(n.id);
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
        if (v.kind == Value::Kind::kInt)
          return Value::Int(Is(n.text, "-") ? -v.integer : v.integer);
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
  [[noreturn]] void FailUndefined(const Node& n) {
    if (n.kind == NodeKind::kAttr ||
        (n.kind == NodeKind::kItem && n.a[1]->kind == NodeKind::kLiteral)) {
      const Value obj = Eval(*n.a[0]);
      if (n.kind == NodeKind::kItem && !n.a[1]->value.is_string()) {
        Fail(fmt::format("{} object has no element {}", KindName(obj), n.a[1]->value.Repr()));
      }
      const std::string_view name =
          n.kind == NodeKind::kAttr ? std::string_view(n.text) : n.a[1]->value.text;
      Fail(fmt::format("'{} object' has no attribute '{}'", KindName(obj), name));
    }
    Fail(fmt::format("'{}' is undefined", Describe(n)));
  }

  static std::string Describe(const Node& n) {
    if (n.kind == NodeKind::kName) return n.text;
    if (n.kind == NodeKind::kAttr) return Describe(*n.a[0]) + "." + n.text;
    return "value";
  }

  Value Index(const Value& obj, const Value& key) {
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
  void Output(const Node& e, std::string& out) {
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
  void OutputSum(const Node& e, std::string& out) {
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
      sum = i == 0
                ? v
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

  Value EvalBinary(const Node& n) {
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
  Value Arithmetic(BinaryOp op_code, Value l, const Value& r, const Node& left, const Node& right) {
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
    auto as_int = [](const Value& v) {
      return v.kind == Value::Kind::kBool ? v.boolean : v.integer;
    };
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
  Value Repeat(const Value& sequence, int64_t times) {
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

  static bool Contains(const Value& container, const Value& item) {
    switch (container.kind) {
      case Value::Kind::kString:
        return item.is_string() && container.text.find(item.text) != std::string::npos;
      case Value::Kind::kList:
        return std::any_of(container.list()->begin(), container.list()->end(),
                           [&](const Value& v) { return Equal(v, item); });
      case Value::Kind::kDict:
        return container.Get(item.Str()).defined();
      case Value::Kind::kUndefined:
        return false;
      default:
        Fail(fmt::format("argument of type '{}' is not iterable", KindName(container)));
    }
  }

  // A list for arguments and other temporaries, allocating from the heap.
  List TempList() { return List(heap_.resource()); }

  void EvalArgs(const Node& n, List& args, Kwargs& kwargs) {
    for (const auto& c : n.children) args.push_back(Eval(*c));
    for (const auto& [k, v] : n.kwargs) kwargs.emplace_back(k, Eval(*v));
  }

  Value EvalCall(const Node& n) {
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
      return Method(*obj, callee.text, args, kwargs);
    }
    EvalArgs(n, args, kwargs);
    if (callee.kind == NodeKind::kName) {
      const Value* f = FindName(callee.id);
      if (f != nullptr && f->kind == Value::Kind::kCallable)
        return Call(*f->callable(), args, kwargs);
      return Global(callee.text, args, kwargs);
    }
    const Value f = Eval(callee);
    if (f.kind == Value::Kind::kCallable) return Call(*f.callable(), args, kwargs);
    Fail("object is not callable");
  }

  Value Global(const std::string& name, List& args, Kwargs& kwargs) {
    if (Is(name, "raise_exception")) Fail(args.empty() ? "" : args[0].Str());
    if (Is(name, "range")) {
      int64_t start = 0, stop = 0, step = 1;
      if (args.size() == 1) {
        stop = args[0].integer;
      } else if (args.size() >= 2) {
        start = args[0].integer;
        stop = args[1].integer;
        if (args.size() >= 3) step = args[2].integer;
      }
      if (step == 0) Fail("range() arg 3 must not be zero");
      // As in Jinja2's sandbox, which transformers renders in.
      const int64_t span = step > 0 ? stop - start : start - stop;
      const int64_t length = span <= 0 ? 0 : (span - 1) / (step > 0 ? step : -step) + 1;
      constexpr int64_t kMaxRange = 100000;
      if (length > kMaxRange) {
        Fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
      }
      List* items = heap_.NewList(static_cast<size_t>(length));
      for (int64_t i = 0; i < length; ++i) items->push_back(Value::Int(start + i * step));
      return Value::Of(items);
    }
    if (Is(name, "namespace") || Is(name, "dict")) {
      Value d = heap_.MakeDict();
      d.is_namespace = Is(name, "namespace");
      for (const Value& a : args) {
        if (a.kind == Value::Kind::kDict) {
          for (const auto& [k, v] : *a.dict()) d.Set(k, v);
        }
      }
      for (auto& [k, v] : kwargs) d.Set(k, v);
      return d;
    }
    if (Is(name, "strftime_now")) {
      const std::time_t now = std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[256];
      const size_t n =
          std::strftime(buf, sizeof buf, args.empty() ? "" : args[0].Str().c_str(), &tm);
      return heap_.MakeString({buf, n});
    }
    Fail(fmt::format("'{}' is undefined", name));
  }

  static bool ArgumentsMayMutate(const Node& n) {
    return std::any_of(n.children.begin(), n.children.end(),
                       [](const auto& c) { return c && c->may_mutate; }) ||
           std::any_of(n.kwargs.begin(), n.kwargs.end(),
                       [](const auto& kw) { return kw.second && kw.second->may_mutate; });
  }

  // The characters of str(v), living as long as the heap.
  std::string_view Text(const Value& v) {
    return v.is_string() ? v.text : heap_.MakeString(v.Str()).text;
  }

  Value Method(const Value& obj, std::string_view name, List& args, Kwargs& kwargs) {
    if (obj.is_string()) {
      const std::string_view s = obj.text;
      if (Is(name, "strip"))
        return Value::StringView(Strip(s, Arg(args, kwargs, 0, "chars"), true, true));
      if (Is(name, "lstrip"))
        return Value::StringView(Strip(s, Arg(args, kwargs, 0, "chars"), true, false));
      if (Is(name, "rstrip"))
        return Value::StringView(Strip(s, Arg(args, kwargs, 0, "chars"), false, true));
      if (Is(name, "split") || Is(name, "rsplit")) {
        const Value* max = Arg(args, kwargs, 1, "maxsplit");
        return heap_.MakeList(Split(heap_, s, Arg(args, kwargs, 0, "sep"), max ? max->integer : -1,
                                    Is(name, "rsplit")));
      }
      if (Is(name, "startswith") || Is(name, "endswith")) {
        List options;
        if (!args.empty() && args[0].kind == Value::Kind::kList) {
          options = *args[0].list();
        } else if (!args.empty()) {
          options.push_back(args[0]);
        }
        for (const Value& o : options) {
          if (Is(name, "startswith") ? s.starts_with(o.text) : s.ends_with(o.text)) {
            return Value::Bool(true);
          }
        }
        return Value::Bool(false);
      }
      if (Is(name, "upper")) return heap_.MakeString(MapCase(s, true));
      if (Is(name, "lower")) return heap_.MakeString(MapCase(s, false));
      if (Is(name, "capitalize")) return heap_.MakeString(Capitalize(s));
      if (Is(name, "title")) return heap_.MakeString(Title(s));
      if (Is(name, "replace")) {
        const Value* count = Arg(args, kwargs, 2, "count");
        return heap_.MakeString(
            Replace(s, args.at(0).text, args.at(1).text, count ? count->integer : -1));
      }
      if (Is(name, "find")) {
        const size_t pos = s.find(args.at(0).text);
        return Value::Int(pos == std::string::npos
                              ? -1
                              : static_cast<int64_t>(CodePoints(s.substr(0, pos)).size()));
      }
      if (Is(name, "count")) {
        int64_t c = 0;
        const std::string_view sub = args.at(0).text;
        if (sub.empty()) return Value::Int(static_cast<int64_t>(CodePoints(s).size()) + 1);
        for (size_t pos = s.find(sub); pos != std::string::npos;
             pos = s.find(sub, pos + sub.size()))
          ++c;
        return Value::Int(c);
      }
      if (Is(name, "join")) {
        std::string out;
        const List items = Iterate(args.at(0));
        for (size_t i = 0; i < items.size(); ++i) {
          if (i != 0) out += s;
          out += items[i].Str();
        }
        return heap_.MakeString(out);
      }
      if (Is(name, "format")) {
        std::string out;
        size_t next = 0;
        for (size_t i = 0; i < s.size(); ++i) {
          if (s[i] == '{' && i + 1 < s.size() && s[i + 1] == '}') {
            out += next < args.size() ? args[next++].Str() : "";
            ++i;
          } else {
            out += s[i];
          }
        }
        return heap_.MakeString(out);
      }
      if (Is(name, "isdigit"))
        return Value::Bool(!s.empty() && std::all_of(s.begin(), s.end(), ::isdigit));
    }
    if (obj.kind == Value::Kind::kDict) {
      if (Is(name, "items")) {
        List items;
        for (const auto& [k, v] : *obj.dict())
          items.push_back(heap_.MakeTuple({heap_.MakeString(k), v}));
        return heap_.MakeList(std::move(items));
      }
      if (Is(name, "keys")) {
        List items;
        for (const auto& [k, v] : *obj.dict()) items.push_back(heap_.MakeString(k));
        return heap_.MakeList(std::move(items));
      }
      if (Is(name, "values")) {
        List items;
        for (const auto& [k, v] : *obj.dict()) items.push_back(v);
        return heap_.MakeList(std::move(items));
      }
      if (Is(name, "get")) {
        const Value v = obj.Get(args.at(0).Str());
        if (v.defined()) return v;
        return args.size() > 1 ? args[1] : Value::None();
      }
    }
    if (obj.kind == Value::Kind::kList) {
      if (Is(name, "append")) {
        obj.list()->push_back(args.at(0));
        return Value::None();
      }
      if (Is(name, "pop")) {
        if (obj.list()->empty()) Fail("pop from empty list");
        const int64_t i = args.empty() ? static_cast<int64_t>(obj.list()->size()) - 1
                                       : NormalizeIndex(args[0].integer, obj.list()->size());
        Value v = obj.list()->at(i);
        obj.list()->erase(obj.list()->begin() + i);
        return v;
      }
      if (Is(name, "index")) {
        for (size_t i = 0; i < obj.list()->size(); ++i) {
          if (Equal((*obj.list())[i], args.at(0))) return Value::Int(static_cast<int64_t>(i));
        }
        Fail("value is not in list");
      }
      if (Is(name, "count")) {
        return Value::Int(std::count_if(obj.list()->begin(), obj.list()->end(),
                                        [&](const Value& v) { return Equal(v, args.at(0)); }));
      }
    }
    // Jinja2's wording for a missing attribute (its undefined-attribute error).
    Fail(fmt::format("'{} object' has no attribute '{}'", KindName(obj), name));
  }

  static std::string Replace(std::string_view s, std::string_view from, std::string_view to,
                             int64_t count) {
    if (from.empty()) return std::string(s);
    std::string out;
    size_t last = 0;
    int64_t n = 0;
    for (size_t pos = s.find(from); pos != std::string::npos && (count < 0 || n < count);
         pos = s.find(from, last), ++n) {
      out.append(s, last, pos - last);
      out += to;
      last = pos + from.size();
    }
    out.append(s, last, std::string::npos);
    return out;
  }

  static std::string Capitalize(std::string_view s) {
    const auto cps = CodePoints(s);
    if (cps.empty()) return std::string(s);
    std::string out = MapCase(cps[0], true);
    for (size_t i = 1; i < cps.size(); ++i) out += MapCase(cps[i], false);
    return out;
  }

  static std::string Title(std::string_view s) {
    std::string out;
    bool prev_cased = false;
    for (const std::string& cp : CodePoints(s)) {
      const int32_t c = Decode(cp);
      const auto cat = utf8proc_category(c);
      const bool cased =
          cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
      out += MapCase(cp, !prev_cased);
      prev_cased = cased;
    }
    return out;
  }

  bool ApplyTest(const Node& n) {
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
    using K = Value::Kind;
    if (Is(t, "none")) return v.kind == K::kNone;
    if (Is(t, "string")) return v.kind == K::kString;
    if (Is(t, "mapping")) return v.kind == K::kDict;
    if (Is(t, "iterable")) return v.kind == K::kList || v.kind == K::kDict || v.kind == K::kString;
    if (Is(t, "sequence")) return v.kind == K::kList || v.kind == K::kString || v.kind == K::kDict;
    if (Is(t, "number")) return v.kind == K::kInt || v.kind == K::kFloat || v.kind == K::kBool;
    if (Is(t, "integer")) return v.kind == K::kInt;
    if (Is(t, "float")) return v.kind == K::kFloat;
    if (Is(t, "boolean")) return v.kind == K::kBool;
    if (Is(t, "true")) return v.kind == K::kBool && v.boolean;
    if (Is(t, "false")) return v.kind == K::kBool && !v.boolean;
    if (Is(t, "callable")) return v.kind == K::kCallable;
    if (Is(t, "equalto") || Is(t, "eq") || Is(t, "==") || Is(t, "sameas"))
      return !args.empty() && Equal(v, args[0]);
    if (Is(t, "ne")) return args.empty() || !Equal(v, args[0]);
    if (Is(t, "odd")) return v.kind == K::kInt && v.integer % 2 != 0;
    if (Is(t, "even")) return v.kind == K::kInt && v.integer % 2 == 0;
    if (Is(t, "divisibleby"))
      return !args.empty() && args[0].integer != 0 && v.integer % args[0].integer == 0;
    if (Is(t, "lower")) return v.is_string() && MapCase(v.text, false) == v.text;
    if (Is(t, "upper")) return v.is_string() && MapCase(v.text, true) == v.text;
    if (Is(t, "in")) return !args.empty() && Contains(args[0], v);
    if (Is(t, "gt")) return Compare(v, args.at(0)) > 0;
    if (Is(t, "lt")) return Compare(v, args.at(0)) < 0;
    if (Is(t, "ge")) return Compare(v, args.at(0)) >= 0;
    if (Is(t, "le")) return Compare(v, args.at(0)) <= 0;
    Fail(fmt::format("no test named '{}'", t));
  }

  // Like Eval, but attribute/item access on undefined yields undefined (for `is defined`).
  Value EvalSoft(const Node& n) {
    if (n.kind == NodeKind::kAttr || n.kind == NodeKind::kItem) {
      const Value obj = EvalSoft(*n.a[0]);
      if (!obj.defined()) return Value::Undefined();
      if (n.kind == NodeKind::kAttr)
        return obj.kind == Value::Kind::kDict ? obj.Get(n.text) : Value();
      return Index(obj, Eval(*n.a[1]));
    }
    return Eval(n);
  }

  bool TestByName(const std::string& test, const Value& v, List extra) {
    Node n;
    n.kind = NodeKind::kTest;
    n.text = test;
    auto lit = std::make_unique<Node>();
    lit->kind = NodeKind::kLiteral;
    lit->value = v;
    n.a.push_back(std::move(lit));
    for (Value& e : extra) {
      auto arg = std::make_unique<Node>();
      arg->kind = NodeKind::kLiteral;
      arg->value = std::move(e);
      n.children.push_back(std::move(arg));
    }
    return ApplyTest(n);
  }

  Value ApplyFilter(const Node& n, Value v) {
    List args = TempList();
    Kwargs kwargs;
    EvalArgs(n, args, kwargs);
    return Filter(n.text, std::move(v), args, kwargs);
  }

  Value Filter(std::string_view f, Value v, List& args, Kwargs& kwargs) {
    using K = Value::Kind;
    if (Is(f, "tojson")) {
      const Value* indent = Arg(args, kwargs, 0, "indent");
      const Value* separators = Kwarg(kwargs, "separators");
      const Value* sort = Kwarg(kwargs, "sort_keys");
      const int ind = indent && indent->kind == K::kInt ? static_cast<int>(indent->integer) : -1;
      std::string item_sep = ind >= 0 ? "," : ", ", key_sep = ": ";
      if (separators && separators->kind == K::kList && separators->list()->size() == 2) {
        item_sep = (*separators->list())[0].text;
        key_sep = (*separators->list())[1].text;
      }
      return heap_.MakeString(v.ToJson(ind, item_sep == ", " && ind >= 0 ? "," : item_sep, key_sep,
                                       sort && sort->Truthy()));
    }
    if (Is(f, "trim"))
      return Value::StringView(Strip(Text(v), Arg(args, kwargs, 0, "chars"), true, true));
    if (Is(f, "length") || Is(f, "count")) {
      if (v.kind == K::kString) return Value::Int(static_cast<int64_t>(CodePoints(v.text).size()));
      if (v.kind == K::kList) return Value::Int(static_cast<int64_t>(v.list()->size()));
      if (v.kind == K::kDict) return Value::Int(static_cast<int64_t>(v.dict()->size()));
      if (!v.defined()) return Value::Int(0);
      Fail(fmt::format("object of type '{}' has no len()", KindName(v)));
    }
    if (Is(f, "upper")) return heap_.MakeString(MapCase(v.Str(), true));
    if (Is(f, "lower")) return heap_.MakeString(MapCase(v.Str(), false));
    if (Is(f, "capitalize")) return heap_.MakeString(Capitalize(v.Str()));
    if (Is(f, "title")) return heap_.MakeString(Title(v.Str()));
    if (Is(f, "replace")) {
      const Value* count = Arg(args, kwargs, 2, "count");
      return heap_.MakeString(
          Replace(v.Str(), args.at(0).Str(), args.at(1).Str(), count ? count->integer : -1));
    }
    if (Is(f, "join")) {
      const Value* sep = Arg(args, kwargs, 0, "d");
      const Value* attr = Arg(args, kwargs, 1, "attribute");
      std::string out;
      const List items = Iterate(v);
      for (size_t i = 0; i < items.size(); ++i) {
        if (i && sep) out += sep->Str();
        out += (attr ? items[i].Get(attr->Str()) : items[i]).Str();
      }
      return heap_.MakeString(out);
    }
    if (Is(f, "first") || Is(f, "last")) {
      const List items = Iterate(v);
      if (items.empty()) return Value::Undefined();
      return Is(f, "first") ? items.front() : items.back();
    }
    if (Is(f, "default") || Is(f, "d")) {
      const Value* fallback = Arg(args, kwargs, 0, "default_value");
      const Value* boolean = Arg(args, kwargs, 1, "boolean");
      const bool use = boolean && boolean->Truthy() ? !v.Truthy() : !v.defined();
      return use ? (fallback ? *fallback : heap_.MakeString("")) : v;
    }
    if (Is(f, "list")) return heap_.MakeList(Iterate(v));
    if (Is(f, "items")) {
      if (v.kind != K::kDict) return heap_.MakeList();
      List a;
      Kwargs kw;
      return Method(v, "items", a, kw);
    }
    if (Is(f, "string")) return heap_.MakeString(v.Str());
    if (Is(f, "safe") || Is(f, "e") || Is(f, "escape") || Is(f, "forceescape")) {
      if (Is(f, "safe")) return v.is_string() ? v : heap_.MakeString(v.Str());
      std::string out;
      for (char c : v.Str()) {
        switch (c) {
          case '&':
            out += "&amp;";
            break;
          case '<':
            out += "&lt;";
            break;
          case '>':
            out += "&gt;";
            break;
          case '"':
            out += "&#34;";
            break;
          case '\'':
            out += "&#39;";
            break;
          default:
            out += c;
        }
      }
      return heap_.MakeString(out);
    }
    if (Is(f, "int")) {
      if (v.kind == K::kInt) return v;
      if (v.kind == K::kFloat) return Value::Int(static_cast<int64_t>(v.number));
      if (v.kind == K::kBool) return Value::Int(v.boolean);
      try {
        return Value::Int(std::stoll(std::string(Strip(v.Str(), nullptr, true, true))));
      } catch (...) {
        return args.empty() ? Value::Int(0) : args[0];
      }
    }
    if (Is(f, "float")) {
      if (v.is_number()) return Value::Float(v.AsDouble());
      try {
        return Value::Float(std::stod(v.Str()));
      } catch (...) {
        return Value::Float(0);
      }
    }
    if (Is(f, "abs")) {
      if (v.kind == K::kInt) return Value::Int(std::llabs(v.integer));
      return Value::Float(std::fabs(v.AsDouble()));
    }
    if (Is(f, "round")) {
      const Value* precision = Arg(args, kwargs, 0, "precision");
      const double scale = std::pow(10.0, precision ? precision->integer : 0);
      return Value::Float(std::round(v.AsDouble() * scale) / scale);
    }
    if (Is(f, "indent")) {
      const Value* width = Arg(args, kwargs, 0, "width");
      const Value* first = Arg(args, kwargs, 1, "first");
      const Value* blank = Arg(args, kwargs, 2, "blank");
      const std::string pad =
          width && width->is_string()
              ? std::string(width->text)
              : std::string(width ? static_cast<size_t>(width->integer) : 4, ' ');
      std::string s = v.Str(), out;
      std::vector<std::string> lines;
      size_t start = 0;
      for (size_t pos = s.find('\n'); pos != std::string::npos; pos = s.find('\n', start)) {
        lines.push_back(s.substr(start, pos - start));
        start = pos + 1;
      }
      lines.push_back(s.substr(start));
      for (size_t i = 0; i < lines.size(); ++i) {
        if (i) out += '\n';
        const bool indent_it = (i > 0 || (first && first->Truthy())) &&
                               (!lines[i].empty() || (blank && blank->Truthy()));
        if (indent_it) out += pad;
        out += lines[i];
      }
      return heap_.MakeString(out);
    }
    if (Is(f, "wordcount")) {
      return Value::Int(static_cast<int64_t>(Split(heap_, v.Str(), nullptr, -1, false).size()));
    }
    if (Is(f, "unique")) {
      List out;
      for (const Value& x : Iterate(v)) {
        if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return Equal(x, y); })) {
          out.push_back(x);
        }
      }
      return heap_.MakeList(std::move(out));
    }
    if (Is(f, "reverse")) {
      if (v.is_string()) {
        auto cps = CodePoints(v.text);
        std::string out;
        for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
        return heap_.MakeString(out);
      }
      List items = Iterate(v);
      std::reverse(items.begin(), items.end());
      return heap_.MakeList(std::move(items));
    }
    if (Is(f, "sort") || Is(f, "dictsort")) {
      const Value* reverse = Kwarg(kwargs, "reverse");
      const Value* attr = Kwarg(kwargs, "attribute");
      List items;
      if (Is(f, "dictsort")) {
        List a;
        Kwargs kw;
        items = *Method(v, "items", a, kw).list();
      } else {
        items = Iterate(v);
      }
      auto key = [&](const Value& x) {
        if (Is(f, "dictsort")) return (*x.list())[0];
        return attr ? x.Get(attr->Str()) : x;
      };
      std::stable_sort(items.begin(), items.end(),
                       [&](const Value& a, const Value& b) { return Compare(key(a), key(b)) < 0; });
      if (reverse && reverse->Truthy()) std::reverse(items.begin(), items.end());
      return heap_.MakeList(std::move(items));
    }
    if (Is(f, "sum")) {
      Value total = Value::Int(0);
      for (const Value& x : Iterate(v)) {
        total = total.kind == K::kInt && x.kind == K::kInt
                    ? Value::Int(total.integer + x.integer)
                    : Value::Float(total.AsDouble() + x.AsDouble());
      }
      return total;
    }
    if (Is(f, "min") || Is(f, "max")) {
      const List items = Iterate(v);
      if (items.empty()) return Value::Undefined();
      Value best = items[0];
      for (const Value& x : items) {
        if (Is(f, "min") ? Compare(x, best) < 0 : Compare(x, best) > 0) best = x;
      }
      return best;
    }
    if (Is(f, "center")) {
      const int64_t width = args.empty() ? 80 : args[0].integer;
      std::string s = v.Str();
      const int64_t len = static_cast<int64_t>(CodePoints(s).size());
      if (len >= width) return heap_.MakeString(s);
      const int64_t total = width - len, left = total / 2 + (total & width & 1);
      return heap_.MakeString(std::string(left, ' ') + s + std::string(total - left, ' '));
    }
    if (Is(f, "batch")) {
      const int64_t size = args.at(0).integer;
      List out, cur;
      for (const Value& x : Iterate(v)) {
        cur.push_back(x);
        if (static_cast<int64_t>(cur.size()) == size)
          out.push_back(heap_.MakeList(std::move(cur))), cur.clear();
      }
      if (!cur.empty()) {
        if (args.size() > 1) {
          while (static_cast<int64_t>(cur.size()) < size) cur.push_back(args[1]);
        }
        out.push_back(heap_.MakeList(std::move(cur)));
      }
      return heap_.MakeList(std::move(out));
    }
    if (Is(f, "map")) {
      List out;
      const Value* attr = Kwarg(kwargs, "attribute");
      for (const Value& x : Iterate(v)) {
        if (attr) {
          Value y = x.Get(attr->Str());
          if (!y.defined()) {
            if (const Value* d = Kwarg(kwargs, "default")) y = *d;
          }
          out.push_back(y);
        } else if (!args.empty()) {
          List rest(args.begin() + 1, args.end());
          Kwargs kw;
          out.push_back(Filter(args[0].Str(), x, rest, kw));
        }
      }
      return heap_.MakeList(std::move(out));
    }
    if (Is(f, "select") || Is(f, "reject") || Is(f, "selectattr") || Is(f, "rejectattr")) {
      const bool by_attr = f.ends_with("attr");
      const bool keep_if = f.starts_with("select");
      List out;
      for (const Value& x : Iterate(v)) {
        size_t first_arg = 0;
        Value subject = x;
        if (by_attr) {
          subject = x.Get(args.at(0).Str());
          first_arg = 1;
        }
        bool pass;
        if (args.size() > first_arg) {
          List extra(args.begin() + first_arg + 1, args.end());
          pass = TestByName(args[first_arg].Str(), subject, std::move(extra));
        } else {
          pass = subject.Truthy();
        }
        if (pass == keep_if) out.push_back(x);
      }
      return heap_.MakeList(std::move(out));
    }
    Fail(fmt::format("no filter named '{}'", f));
  }

  Heap& heap_;                         // where the values the render makes live
  std::vector<const Value*> globals_;  // the template's variables, by number
  std::vector<Frame> frames_;
  size_t depth_ = 0;
  static constexpr int kMaxCallDepth = 250;
  int call_depth_ = 0;  // macro and caller calls in progress
};

}  // namespace

Template::Template() = default;
Template::~Template() = default;

Status Template::Parse(std::string_view source, std::unique_ptr<Template>* out) {
  std::unique_ptr<Template> t(new Template());
  if (Status s = ParseTemplate(source, &t->root_); !s.ok()) return s;
  t->names_ = std::make_unique<NameTable>();
  t->names_->NumberTree(*t->root_);
  *out = std::move(t);
  return Status::Ok();
}

Status Template::Render(const Value& variables, Heap& heap, std::string* out) const {
  out->clear();
  try {
    Renderer r(variables, *names_, heap);
    Flow flow = Flow::kNormal;
    r.Exec(*root_, *out, flow);
  } catch (const RenderError& e) {
    return Status::Error(e.message);
  } catch (const HeapExhausted& e) {
    return Status::Error(e.message());
  } catch (const NestingTooDeep& e) {
    return Status::Error(e.message);
  } catch (const std::out_of_range&) {
    return Status::Error("missing argument in a template call");
  }
  return Status::Ok();
}

}  // namespace kvgate::chat
