// Jinja2's filters, as chat templates use them (with Python's semantics for the values).
#include <fmt/format.h>
#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <iterator>

#include "chat/builtins.h"
#include "common/html_escape.h"

namespace kvgate::chat {
namespace {

using K = Value::Kind;

// Jinja2's attribute getter: `attribute` is a dotted path ("a.b", "items.0"); digits index.
Value Attribute(const Value& item, std::string_view path) {
  Value v = item;
  while (v.defined()) {
    const size_t dot = path.find('.');
    const std::string_view part = path.substr(0, dot);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(),
                                                     [](char c) { return c >= '0' && c <= '9'; });
    if (v.kind == K::kList && digits) {
      const size_t i = std::stoul(std::string(part));
      v = i < v.list()->size() ? (*v.list())[i] : Value::Undefined();
    } else {
      v = v.Get(part);
    }
    if (dot == std::string_view::npos) break;
    path.remove_prefix(dot + 1);
  }
  return v;
}

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
  const Value* ascii = Kwarg(kwargs, "ensure_ascii");
  std::string json =
      v.ToJson(ind, item_sep == ", " && ind >= 0 ? "," : item_sep, key_sep, sort && sort->Truthy());
  return heap.MakeString(ascii && ascii->Truthy() ? EscapeNonAscii(json) : json);
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

Value TitleFilter(Heap& heap, Value v, List&, Kwargs&) {
  return heap.MakeString(JinjaTitle(v.Str()));
}

// Python's `format % args` (Jinja2: `s|format(*args)` or `s|format(**kwargs)`, not both).
Value FormatFilter(Heap& heap, Value v, List& args, Kwargs& kwargs) {
  if (!args.empty() && !kwargs.empty()) {
    Fail("can't handle positional and keyword arguments at the same time");
  }
  Value mapping;
  if (!kwargs.empty()) {
    mapping = heap.MakeDict(kwargs.size());
    for (auto& [k, x] : kwargs) mapping.Set(k, x);
  }
  return heap.MakeString(PercentFormat(v.Str(), args, kwargs.empty() ? nullptr : &mapping));
}

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
    out += (attr ? Attribute(items[i], attr->Str()) : items[i]).Str();
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

Value Escape(Heap& heap, Value v, List&, Kwargs&) { return heap.MakeString(HtmlEscaped(v.Str())); }

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

// Jinja2 counts the matches of the regex \w+ (letters, digits, underscore; Unicode).
Value WordCount(Heap&, Value v, List&, Kwargs&) {
  int64_t words = 0;
  bool in_word = false;
  for (const std::string& cp : CodePoints(v.Str())) {
    const int32_t c = Decode(cp);
    const auto cat = utf8proc_category(c);
    const bool word = c == '_' || (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
                      (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO) ||
                      cat == UTF8PROC_CATEGORY_PC;
    words += word && !in_word;
    in_word = word;
  }
  return Value::Int(words);
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

// The key Jinja2 sorts, groups and compares by: the `attribute` of an item (else the item),
// lowercased when a string and not `case_sensitive`.
struct SortKey {
  const Value* attribute = nullptr;
  bool case_sensitive = false;
  Value operator()(Heap& heap, const Value& x) const {
    Value key = attribute ? Attribute(x, attribute->Str()) : x;
    if (!case_sensitive && key.is_string()) key = heap.MakeString(MapCase(key.text, false));
    return key;
  }
};

// The case_sensitive and attribute arguments, at their positions for this filter.
SortKey KeyArgs(List& args, Kwargs& kwargs, size_t case_index, size_t attribute_index) {
  const Value* cs = Arg(args, kwargs, case_index, "case_sensitive");
  return {Arg(args, kwargs, attribute_index, "attribute"), cs && cs->Truthy()};
}

// Stable-sorts `items` by `key` (precomputed once per item).
void SortBy(Heap& heap, List& items, const SortKey& key, bool reverse) {
  std::vector<std::pair<Value, Value>> keyed;
  keyed.reserve(items.size());
  for (const Value& x : items) keyed.emplace_back(key(heap, x), x);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? Compare(b.first, a.first) < 0 : Compare(a.first, b.first) < 0;
  });
  for (size_t i = 0; i < items.size(); ++i) items[i] = keyed[i].second;
}

// sort(reverse, case_sensitive, attribute)
Value Sort(Heap& heap, Value v, List& args, Kwargs& kwargs) {
  const Value* reverse = Arg(args, kwargs, 0, "reverse");
  List items = Iterate(v);
  SortBy(heap, items, KeyArgs(args, kwargs, 1, 2), reverse && reverse->Truthy());
  return heap.MakeList(std::move(items));
}

// dictsort(case_sensitive, by="key"|"value", reverse): the items, sorted.
Value DictSort(Heap& heap, Value v, List& args, Kwargs& kwargs) {
  if (v.kind != K::kDict) FailNoMethod(v, "items");
  const Value* by = Arg(args, kwargs, 1, "by");
  const Value* reverse = Arg(args, kwargs, 2, "reverse");
  List items = Items(heap, v);
  const Value position = heap.MakeString(by && by->Str() == "value" ? "1" : "0");
  if (by && by->Str() != "key" && by->Str() != "value") {
    Fail("You can only sort by either \"key\" or \"value\"");
  }
  const Value* cs = Arg(args, kwargs, 0, "case_sensitive");
  const SortKey key{&position, cs && cs->Truthy()};
  SortBy(heap, items, key, reverse && reverse->Truthy());
  return heap.MakeList(std::move(items));
}

// unique(case_sensitive, attribute): the first item of each key, in order.
Value Unique(Heap& heap, Value v, List& args, Kwargs& kwargs) {
  const SortKey key = KeyArgs(args, kwargs, 0, 1);
  List out, seen;
  for (const Value& x : Iterate(v)) {
    const Value k = key(heap, x);
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& y) { return Equal(k, y); })) {
      seen.push_back(k);
      out.push_back(x);
    }
  }
  return heap.MakeList(std::move(out));
}

// `a + b` for sum(): numbers (a bool counts as an int) and lists.
Value Add(Heap& heap, const Value& a, const Value& b) {
  auto as_int = [](const Value& x) { return x.kind == K::kBool ? x.boolean : x.integer; };
  const bool a_num = a.is_number() || a.kind == K::kBool,
             b_num = b.is_number() || b.kind == K::kBool;
  if (a_num && b_num) {
    if (a.kind != K::kFloat && b.kind != K::kFloat) return Value::Int(as_int(a) + as_int(b));
    auto as_double = [&](const Value& x) {
      return x.kind == K::kFloat ? x.number : static_cast<double>(as_int(x));
    };
    return Value::Float(as_double(a) + as_double(b));
  }
  if (a.kind == K::kList && b.kind == K::kList) {
    List items(*a.list());
    items.insert(items.end(), b.list()->begin(), b.list()->end());
    return heap.MakeList(std::move(items));
  }
  Fail(fmt::format("unsupported operand type(s) for +: '{}' and '{}'", KindName(a), KindName(b)));
}

// sum(attribute, start)
Value Sum(Heap& heap, Value v, List& args, Kwargs& kwargs) {
  const Value* attribute = Arg(args, kwargs, 0, "attribute");
  const Value* start = Arg(args, kwargs, 1, "start");
  Value total = start ? *start : Value::Int(0);
  for (const Value& item : Iterate(v)) {
    const Value x = attribute ? Attribute(item, attribute->Str()) : item;
    total = Add(heap, total, x);
  }
  return total;
}

// min / max(case_sensitive, attribute): the first extreme item.
template <int kSign>  // -1: min, 1: max
Value Extreme(Heap& heap, Value v, List& args, Kwargs& kwargs) {
  const SortKey key = KeyArgs(args, kwargs, 0, 1);
  const List items = Iterate(v);
  if (items.empty()) return Value::Undefined();
  size_t best = 0;
  Value best_key = key(heap, items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = key(heap, items[i]);
    if (Compare(k, best_key) * kSign > 0) best = i, best_key = k;
  }
  return items[best];
}

// groupby(attribute, default, case_sensitive): (grouper, list) pairs sorted by key; the
// pairs print as tuples and answer `.grouper` and `.list`.
Value GroupBy(Heap& heap, Value v, List& args, Kwargs& kwargs) {
  const Value* attribute = Arg(args, kwargs, 0, "attribute");
  if (attribute == nullptr) Fail("groupby() missing required argument 'attribute'");
  const Value* fallback = Arg(args, kwargs, 1, "default");
  const Value* cs = Arg(args, kwargs, 2, "case_sensitive");
  struct Keyed {
    Value key, shown, item;
  };
  std::vector<Keyed> keyed;
  for (const Value& x : Iterate(v)) {
    Value shown = Attribute(x, attribute->Str());
    if (!shown.defined() && fallback) shown = *fallback;
    if (!shown.defined()) FailNoMethod(x, attribute->Str());
    const bool fold = !(cs && cs->Truthy()) && shown.is_string();
    keyed.push_back({fold ? heap.MakeString(MapCase(shown.text, false)) : shown, shown, x});
  }
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const Keyed& a, const Keyed& b) { return Compare(a.key, b.key) < 0; });
  List out;
  for (size_t i = 0; i < keyed.size();) {
    List group;
    size_t j = i;
    for (; j < keyed.size() && Equal(keyed[j].key, keyed[i].key); ++j)
      group.push_back(keyed[j].item);
    // The grouper shown is the first item's own value (its case kept).
    Value pair = heap.MakeTuple({keyed[i].shown, heap.MakeList(std::move(group))});
    pair.is_group = true;
    out.push_back(pair);
    i = j;
  }
  return heap.MakeList(std::move(out));
}

Value Center(Heap& heap, Value v, List& args, Kwargs&) {
  const int64_t width = args.empty() ? 80 : args[0].integer;
  return heap.MakeString(JustifyText(v.Str(), width, " ", Justify::kCenter));
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

// slice(count, fill_with): `count` columns, the first ones one longer when uneven.
Value SliceFilter(Heap& heap, Value v, List& args, Kwargs& kwargs) {
  const Value* count = Arg(args, kwargs, 0, "slices");
  const Value* fill = Arg(args, kwargs, 1, "fill_with");
  if (count == nullptr || count->kind != K::kInt || count->integer <= 0) {
    Fail("slice() needs a positive number of slices");
  }
  const List items = Iterate(v);
  const size_t slices = static_cast<size_t>(count->integer);
  const size_t per = items.size() / slices, extra = items.size() % slices;
  List out;
  size_t start = 0;
  for (size_t n = 0; n < slices; ++n) {
    const size_t end = start + per + (n < extra ? 1 : 0);
    List part(items.begin() + static_cast<std::ptrdiff_t>(start),
              items.begin() + static_cast<std::ptrdiff_t>(end));
    if (fill && !fill->is_none() && n >= extra) part.push_back(*fill);
    out.push_back(heap.MakeList(std::move(part)));
    start = end;
  }
  return heap.MakeList(std::move(out));
}

Value Map(Heap& heap, Value v, List& args, Kwargs& kwargs) {
  List out;
  const Value* attr = Kwarg(kwargs, "attribute");
  for (const Value& x : Iterate(v)) {
    if (attr) {
      Value y = Attribute(x, attr->Str());
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
      subject = Attribute(x, args.at(0).Str());
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
    {"format", FormatFilter},
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
    {"sort", Sort},
    {"dictsort", DictSort},
    {"groupby", GroupBy},
    {"slice", SliceFilter},
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
