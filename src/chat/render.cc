// Renders the AST with Jinja2's semantics, statements here (expressions in evaluate.cc):
// output, if, for with its `loop`, set, macros and {% call %}, scoping where `for` bodies
// and macros get their own scope while `if` does not (macros see the scope they were
// defined in).
#include <fmt/format.h>
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <span>

#include "chat/builtins.h"
#include "chat/renderer.h"

namespace kvgate::chat {

inline void Renderer::Exec(const Node& n, std::string& out, Flow& flow) {
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

inline void Renderer::PushFrame(size_t outer) {
  if (depth_ == frames_.size()) frames_.emplace_back();
  Frame& frame = frames_[depth_++];
  frame.vars.clear();
  frame.loop = nullptr;
  frame.outer = outer;
}

// Innermost scope first, then the template's variables; null when undefined.
inline const Value* Renderer::FindName(int id) {
  for (size_t i = depth_ - 1;; i = frames_[i].outer) {
    Frame& frame = frames_[i];
    for (auto& [number, value] : frame.vars) {
      if (number == id) return &value;
    }
    if (id == NameTable::kLoop && frame.loop != nullptr) return &LoopValue(*frame.loop);
    if (i == 0) return globals_[id];
  }
}

inline Value Renderer::Lookup(int id) {
  const Value* v = FindName(id);
  return v ? *v : Value::Undefined();
}

inline void Renderer::SetVar(int id, Value v) {
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
inline Value Renderer::LoopField(const LoopState& loop, int field) {
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
const Value& Renderer::LoopValue(LoopState& loop) {
  if (!loop.built) {
    loop.as_value = heap_.MakeDict(std::size(kLoopFields));
    for (int field = 0; field < static_cast<int>(std::size(kLoopFields)); ++field) {
      loop.as_value.dict()->emplace_back(kLoopFields[field], LoopField(loop, field));
    }
    loop.built = true;
  }
  return loop.as_value;
}

inline bool Renderer::IsLoop(const Node& n) {
  return n.kind == NodeKind::kName && n.id == NameTable::kLoop;
}

// `loop.<field>` (node `n`) straight from the innermost loop; false when `loop` is not a
// loop there or has no such field.
inline bool Renderer::LoopAttr(const Node& n, Value* out) {
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

inline void Renderer::ExecFor(const Node& n, std::string& out, Flow& flow) {
  const Value iterable = Eval(*n.a[0]);
  // A list is iterated in place when nothing in the loop can change it; otherwise, and for
  // strings, dicts and filtered loops, over a snapshot.
  List items = TempList();
  const bool in_place = iterable.kind == Value::Kind::kList && !n.a[1] && !n.a[2]->may_mutate;
  if (!in_place) items = Iterate(iterable);
  const List& seq = in_place ? *iterable.list() : items;
  if (n.a[1]) {              // `for x in xs if cond`: filter first; loop.length counts what is left
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

inline void Renderer::Bind(const std::vector<int>& ids, const Value& item) {
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
inline Value Renderer::Call(const Callable& c, List& args, Kwargs& kwargs, const Value* caller) {
  if (c.node == nullptr) return GlobalById(c.global)(heap_, args, kwargs);
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
