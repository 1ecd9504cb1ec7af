// Jinja2's filters, as chat templates use them (with Python's semantics for the values).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>

#include "chat/builtins.h"

namespace kvgate::chat {
namespace {

using K = Value::Kind;

Value ToJson(Heap& heap, Value v, List& args, Kwargs& kwargs) {
  const Value* indent = Arg(args, kwargs, 0, "indent");
  const Value* separators = Kwarg(kwargs, "separators");
  const Value* sort = Kwarg(kwargs, "sort_keys");
  const int ind = indent && indent->kind == K::kInt ? static_cast<int>(indent->integer) : -1;
  std::string item_sep = ind >= 0 ? "," : ", ", key_sep = ": ";
  if (separators && separators->kind == K::kList && separators->list()->size() == 2) {
    item_sep = (*separators->list())[0].text;
    key_sep = (*separators->list())[1].text;
  }
  return heap.MakeString(v.ToJson(ind, item_sep == ", " && ind >= 0 ? "," : item_sep, key_sep,
                                  sort && sort->Truthy()));
}

Value Trim(Heap& heap, Value v, List& args, Kwargs& kwargs) {
  return Value::StringView(Strip(TextOf(heap, v), Arg(args, kwargs, 0, "chars"), true, true));
}

Value Length(Heap&, Value v, List&, Kwargs&) {
  if (v.kind == K::kString) return Value::Int(static_cast<int64_t>(CodePoints(v.text).size()));
  if (v.kind == K::kList) return Value::Int(static_cast<int64_t>(v.list()->size()));
  if (v.kind == K::kDict) return Value::Int(static_cast<int64_t>(v.dict()->size()));
  if (!v.defined()) return Value::Int(0);
  Fail(fmt::format("object of type '{}' has no len()", KindName(v)));
}

template <bool kUpper>
Value Case(Heap& heap, Value v, List&, Kwargs&) {
  return heap.MakeString(MapCase(v.Str(), kUpper));
}

Value CapitalizeFilter(Heap& heap, Value v, List&, Kwargs&) {
  return heap.MakeString(Capitalize(v.Str()));
}

Value TitleFilter(Heap& heap, Value v, List&, Kwargs&) { return heap.MakeString(Title(v.Str())); }

Value ReplaceFilter(Heap& heap, Value v, List& args, Kwargs& kwargs) {
  const Value* count = Arg(args, kwargs, 2, "count");
  return heap.MakeString(
      Replace(v.Str(), args.at(0).Str(), args.at(1).Str(), count ? count->integer : -1));
}

Value Join(Heap& heap, Value v, List& args, Kwargs& kwargs) {
  const Value* sep = Arg(args, kwargs, 0, "d");
  const Value* attr = Arg(args, kwargs, 1, "attribute");
  std::string out;
  const List items = Iterate(v);
  for (size_t i = 0; i < items.size(); ++i) {
    if (i && sep) out += sep->Str();
    out += (attr ? items[i].Get(attr->Str()) : items[i]).Str();
  }
  return heap.MakeString(out);
}

template <bool kFirst>
Value FirstOrLast(Heap&, Value v, List&, Kwargs&) {
  const List items = Iterate(v);
  if (items.empty()) return Value::Undefined();
  return kFirst ? items.front() : items.back();
}

Value Default(Heap& heap, Value v, List& args, Kwargs& kwargs) {
  const Value* fallback = Arg(args, kwargs, 0, "default_value");
  const Value* boolean = Arg(args, kwargs, 1, "boolean");
  const bool use = boolean && boolean->Truthy() ? !v.Truthy() : !v.defined();
  return use ? (fallback ? *fallback : heap.MakeString("")) : v;
}

Value ToList(Heap& heap, Value v, List&, Kwargs&) { return heap.MakeList(Iterate(v)); }

// dict.items() as a list of (key, value) tuples.
List Items(Heap& heap, const Value& v) {
  List items;
  for (const auto& [k, x] : *v.dict()) items.push_back(heap.MakeTuple({heap.MakeString(k), x}));
  return items;
}

Value ItemsFilter(Heap& heap, Value v, List&, Kwargs&) {
  if (v.kind != K::kDict) return heap.MakeList();
  return heap.MakeList(Items(heap, v));
}

Value ToString(Heap& heap, Value v, List&, Kwargs&) { return heap.MakeString(v.Str()); }

Value Safe(Heap& heap, Value v, List&, Kwargs&) {
  return v.is_string() ? v : heap.MakeString(v.Str());
}

Value Escape(Heap& heap, Value v, List&, Kwargs&) {
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
  return heap.MakeString(out);
}

Value ToInt(Heap&, Value v, List& args, Kwargs&) {
  if (v.kind == K::kInt) return v;
  if (v.kind == K::kFloat) return Value::Int(static_cast<int64_t>(v.number));
  if (v.kind == K::kBool) return Value::Int(v.boolean);
  try {
    return Value::Int(std::stoll(std::string(Strip(v.Str(), nullptr, true, true))));
  } catch (...) {
    return args.empty() ? Value::Int(0) : args[0];
  }
}

Value ToFloat(Heap&, Value v, List&, Kwargs&) {
  if (v.is_number()) return Value::Float(v.AsDouble());
  try {
    return Value::Float(std::stod(v.Str()));
  } catch (...) {
    return Value::Float(0);
  }
}

Value Abs(Heap&, Value v, List&, Kwargs&) {
  if (v.kind == K::kInt) return Value::Int(std::llabs(v.integer));
  return Value::Float(std::fabs(v.AsDouble()));
}

Value Round(Heap&, Value v, List& args, Kwargs& kwargs) {
  const Value* precision = Arg(args, kwargs, 0, "precision");
  const double scale = std::pow(10.0, precision ? precision->integer : 0);
  return Value::Float(std::round(v.AsDouble() * scale) / scale);
}

Value Indent(Heap& heap, Value v, List& args, Kwargs& kwargs) {
  const Value* width = Arg(args, kwargs, 0, "width");
  const Value* first = Arg(args, kwargs, 1, "first");
  const Value* blank = Arg(args, kwargs, 2, "blank");
  const std::string pad = width && width->is_string()
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
    const bool indent_it =
        (i > 0 || (first && first->Truthy())) && (!lines[i].empty() || (blank && blank->Truthy()));
    if (indent_it) out += pad;
    out += lines[i];
  }
  return heap.MakeString(out);
}

Value WordCount(Heap& heap, Value v, List&, Kwargs&) {
  return Value::Int(static_cast<int64_t>(Split(heap, v.Str(), nullptr, -1, false).size()));
}

Value Unique(Heap& heap, Value v, List&, Kwargs&) {
  List out;
  for (const Value& x : Iterate(v)) {
    if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return Equal(x, y); })) {
      out.push_back(x);
    }
  }
  return heap.MakeList(std::move(out));
}

Value Reverse(Heap& heap, Value v, List&, Kwargs&) {
  if (v.is_string()) {
    auto cps = CodePoints(v.text);
    std::string out;
    for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
    return heap.MakeString(out);
  }
  List items = Iterate(v);
  std::reverse(items.begin(), items.end());
  return heap.MakeList(std::move(items));
}

// sort (by value or `attribute`), dictsort (items by key).
template <bool kDictSort>
Value Sort(Heap& heap, Value v, List&, Kwargs& kwargs) {
  const Value* reverse = Kwarg(kwargs, "reverse");
  const Value* attr = Kwarg(kwargs, "attribute");
  if (kDictSort && v.kind != K::kDict) FailNoMethod(v, "items");
  List items = kDictSort ? Items(heap, v) : Iterate(v);
  auto key = [&](const Value& x) {
    if (kDictSort) return (*x.list())[0];
    return attr ? x.Get(attr->Str()) : x;
  };
  std::stable_sort(items.begin(), items.end(),
                   [&](const Value& a, const Value& b) { return Compare(key(a), key(b)) < 0; });
  if (reverse && reverse->Truthy()) std::reverse(items.begin(), items.end());
  return heap.MakeList(std::move(items));
}

Value Sum(Heap&, Value v, List&, Kwargs&) {
  Value total = Value::Int(0);
  for (const Value& x : Iterate(v)) {
    total = total.kind == K::kInt && x.kind == K::kInt
                ? Value::Int(total.integer + x.integer)
                : Value::Float(total.AsDouble() + x.AsDouble());
  }
  return total;
}

template <int kSign>  // -1: min, 1: max
Value Extreme(Heap&, Value v, List&, Kwargs&) {
  const List items = Iterate(v);
  if (items.empty()) return Value::Undefined();
  Value best = items[0];
  for (const Value& x : items) {
    if (Compare(x, best) * kSign > 0) best = x;
  }
  return best;
}

Value Center(Heap& heap, Value v, List& args, Kwargs&) {
  const int64_t width = args.empty() ? 80 : args[0].integer;
  std::string s = v.Str();
  const int64_t len = static_cast<int64_t>(CodePoints(s).size());
  if (len >= width) return heap.MakeString(s);
  const int64_t total = width - len, left = total / 2 + (total & width & 1);
  return heap.MakeString(std::string(left, ' ') + s + std::string(total - left, ' '));
}

Value Batch(Heap& heap, Value v, List& args, Kwargs&) {
  const int64_t size = args.at(0).integer;
  List out, cur;
  for (const Value& x : Iterate(v)) {
    cur.push_back(x);
    if (static_cast<int64_t>(cur.size()) == size) {
      out.push_back(heap.MakeList(std::move(cur)));
      cur.clear();
    }
  }
  if (!cur.empty()) {
    if (args.size() > 1) {
      while (static_cast<int64_t>(cur.size()) < size) cur.push_back(args[1]);
    }
    out.push_back(heap.MakeList(std::move(cur)));
  }
  return heap.MakeList(std::move(out));
}

Value Map(Heap& heap, Value v, List& args, Kwargs& kwargs) {
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
      out.push_back(ApplyFilterByName(heap, args[0].Str(), x, rest, kw));
    }
  }
  return heap.MakeList(std::move(out));
}

// select / reject (the items, by a test), selectattr / rejectattr (by an attribute).
template <bool kKeepIf, bool kByAttr>
Value Select(Heap& heap, Value v, List& args, Kwargs&) {
  List out;
  for (const Value& x : Iterate(v)) {
    size_t first_arg = 0;
    Value subject = x;
    if (kByAttr) {
      subject = x.Get(args.at(0).Str());
      first_arg = 1;
    }
    bool pass;
    if (args.size() > first_arg) {
      List extra(args.begin() + first_arg + 1, args.end());
      pass = ApplyTestByName(args[first_arg].Str(), subject, extra);
    } else {
      pass = subject.Truthy();
    }
    if (pass == kKeepIf) out.push_back(x);
  }
  return heap.MakeList(std::move(out));
}

struct Filter {
  std::string_view name;
  FilterFn fn;
};

constexpr Filter kFilters[] = {
    {"tojson", ToJson},
    {"trim", Trim},
    {"length", Length},
    {"count", Length},
    {"upper", Case<true>},
    {"lower", Case<false>},
    {"capitalize", CapitalizeFilter},
    {"title", TitleFilter},
    {"replace", ReplaceFilter},
    {"join", Join},
    {"first", FirstOrLast<true>},
    {"last", FirstOrLast<false>},
    {"default", Default},
    {"d", Default},
    {"list", ToList},
    {"items", ItemsFilter},
    {"string", ToString},
    {"safe", Safe},
    {"e", Escape},
    {"escape", Escape},
    {"forceescape", Escape},
    {"int", ToInt},
    {"float", ToFloat},
    {"abs", Abs},
    {"round", Round},
    {"indent", Indent},
    {"wordcount", WordCount},
    {"unique", Unique},
    {"reverse", Reverse},
    {"sort", Sort<false>},
    {"dictsort", Sort<true>},
    {"sum", Sum},
    {"min", Extreme<-1>},
    {"max", Extreme<1>},
    {"center", Center},
    {"batch", Batch},
    {"map", Map},
    {"select", Select<true, false>},
    {"reject", Select<false, false>},
    {"selectattr", Select<true, true>},
    {"rejectattr", Select<false, true>},
};

}  // namespace

int FilterId(std::string_view name) { return IndexByName(kFilters, name); }

FilterFn FilterById(int id) { return kFilters[id].fn; }

Value ApplyFilterByName(Heap& heap, std::string_view name, Value input, List& args,
                        Kwargs& kwargs) {
  const int id = FilterId(name);
  if (id < 0) Fail(fmt::format("no filter named '{}'", name));
  return kFilters[id].fn(heap, std::move(input), args, kwargs);
}

}  // namespace kvgate::chat
