// The methods of str, dict and list that chat templates call, with Python's semantics.
#include <fmt/format.h>
#include <utf8proc.h>

#include <algorithm>
#include <iterator>

#include "chat/builtins.h"

namespace kvgate::chat {
namespace {

using K = Value::Kind;

// ---------- str ----------
template <bool kLeft, bool kRight>
Value StrStrip(Heap&, const Value& self, List& args, Kwargs& kwargs) {
  return Value::StringView(Strip(self.text, Arg(args, kwargs, 0, "chars"), kLeft, kRight));
}

template <bool kFromRight>
Value StrSplit(Heap& heap, const Value& self, List& args, Kwargs& kwargs) {
  const Value* max = Arg(args, kwargs, 1, "maxsplit");
  return heap.MakeList(
      Split(self.text, Arg(args, kwargs, 0, "sep"), max ? max->integer : -1, kFromRight));
}

// s[start:end] in code points, Python's rules for negative and out-of-range bounds.
std::string_view CodePointRange(std::string_view s, const Value* start, const Value* end) {
  if ((start == nullptr || start->is_none()) && (end == nullptr || end->is_none())) return s;
  std::vector<size_t> offsets;  // byte offset of each code point, then s.size()
  for (size_t i = 0; i < s.size(); i += CodePointLength(static_cast<unsigned char>(s[i]))) {
    offsets.push_back(i);
  }
  const int64_t n = static_cast<int64_t>(offsets.size());
  offsets.push_back(s.size());
  auto clamp = [&](const Value* bound, int64_t fallback) {
    if (bound == nullptr || bound->is_none()) return fallback;
    return std::clamp<int64_t>(NormalizeIndex(bound->integer, offsets.size() - 1), 0, n);
  };
  const int64_t b = clamp(start, 0), e = clamp(end, n);
  if (b > e) return s.substr(s.size());  // empty; Python then matches only ""... at b <= len
  return s.substr(offsets[b], offsets[e] - offsets[b]);
}

template <bool kStart>
Value StrAffix(Heap&, const Value& self, List& args, Kwargs&) {
  const std::string_view s = CodePointRange(self.text, args.size() > 1 ? &args[1] : nullptr,
                                            args.size() > 2 ? &args[2] : nullptr);
  List options;
  if (!args.empty() && args[0].kind == K::kList) {
    options = *args[0].list();
  } else if (!args.empty()) {
    options.push_back(args[0]);
  }
  for (const Value& o : options) {
    if (kStart ? s.starts_with(o.text) : s.ends_with(o.text)) return Value::Bool(true);
  }
  return Value::Bool(false);
}

template <bool kUpper>
Value StrCase(Heap& heap, const Value& self, List&, Kwargs&) {
  return heap.MakeString(MapCase(self.text, kUpper));
}

Value StrCapitalize(Heap& heap, const Value& self, List&, Kwargs&) {
  return heap.MakeString(Capitalize(self.text));
}

Value StrTitle(Heap& heap, const Value& self, List&, Kwargs&) {
  return heap.MakeString(Title(self.text));
}

Value StrReplace(Heap& heap, const Value& self, List& args, Kwargs& kwargs) {
  const Value* count = Arg(args, kwargs, 2, "count");
  return heap.MakeString(
      Replace(self.text, args.at(0).text, args.at(1).text, count ? count->integer : -1));
}

Value StrFind(Heap&, const Value& self, List& args, Kwargs&) {
  const std::string_view s = self.text;
  const size_t pos = s.find(args.at(0).text);
  return Value::Int(
      pos == std::string::npos ? -1 : static_cast<int64_t>(CodePoints(s.substr(0, pos)).size()));
}

Value StrCount(Heap&, const Value& self, List& args, Kwargs&) {
  const std::string_view s = self.text;
  const std::string_view sub = args.at(0).text;
  if (sub.empty()) return Value::Int(static_cast<int64_t>(CodePoints(s).size()) + 1);
  int64_t c = 0;
  for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size())) {
    ++c;
  }
  return Value::Int(c);
}

Value StrJoin(Heap& heap, const Value& self, List& args, Kwargs&) {
  std::string out;
  const List items = Iterate(args.at(0));
  for (size_t i = 0; i < items.size(); ++i) {
    if (i != 0) out += self.text;
    out += items[i].Str();
  }
  return heap.MakeString(out);
}

// "{}" placeholders, in order (what templates use of str.format).
Value StrFormat(Heap& heap, const Value& self, List& args, Kwargs&) {
  const std::string_view s = self.text;
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
  return heap.MakeString(out);
}

// str.isdigit, isalpha, isalnum, isspace, islower, isupper: by Unicode category.
enum class CharClass { kDigit, kAlpha, kAlnum, kSpace };
template <CharClass kClass>
Value StrIs(Heap&, const Value& self, List&, Kwargs&) {
  const auto cps = CodePoints(self.text);
  return Value::Bool(!cps.empty() && std::all_of(cps.begin(), cps.end(), [](const std::string& cp) {
    const int32_t c = Decode(cp);
    const auto cat = utf8proc_category(c);
    const bool digit = cat == UTF8PROC_CATEGORY_ND || (c >= 0x2070 && c <= 0x2079) ||
                       (c >= 0x2080 && c <= 0x2089) || c == 0xB2 || c == 0xB3 || c == 0xB9;
    const bool alpha = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
    switch (kClass) {
      case CharClass::kDigit:
        return digit;
      case CharClass::kAlpha:
        return alpha;
      case CharClass::kAlnum:
        return alpha || digit || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
      case CharClass::kSpace:
        return PyIsSpace(c);
    }
    return false;
  }));
}

// str.islower / isupper: some cased character, none of the other case.
template <bool kUpper>
Value StrIsCase(Heap&, const Value& self, List&, Kwargs&) {
  const std::string_view s = self.text;
  return Value::Bool(MapCase(s, kUpper) == s && MapCase(s, !kUpper) != s);
}

Value StrSwapCase(Heap& heap, const Value& self, List&, Kwargs&) {
  std::string out;
  for (const std::string& cp : CodePoints(self.text)) {
    const std::string upper = MapCase(cp, true);
    out += upper == cp ? MapCase(cp, false) : upper;
  }
  return heap.MakeString(out);
}

// center / ljust / rjust(width, fillchar); zfill(width) keeps the sign first.
template <Justify kHow>
Value StrJustify(Heap& heap, const Value& self, List& args, Kwargs&) {
  const int64_t width = args.empty() ? 0 : args[0].integer;
  const std::string_view fill = kHow == Justify::kZero ? "0" : args.size() > 1 ? args[1].text : " ";
  return heap.MakeString(JustifyText(self.text, width, fill, kHow));
}

// partition / rpartition: (head, sep, tail) around the first / last `sep`.
template <bool kFromRight>
Value StrPartition(Heap& heap, const Value& self, List& args, Kwargs&) {
  const std::string_view s = self.text, sep = args.at(0).text;
  if (sep.empty()) Fail("empty separator");
  const size_t pos = kFromRight ? s.rfind(sep) : s.find(sep);
  const Value empty = Value::StringView(s.substr(s.size()));
  if (pos == std::string_view::npos) {
    return kFromRight ? heap.MakeTuple({empty, empty, self}) : heap.MakeTuple({self, empty, empty});
  }
  return heap.MakeTuple({Value::StringView(s.substr(0, pos)),
                         Value::StringView(s.substr(pos, sep.size())),
                         Value::StringView(s.substr(pos + sep.size()))});
}

// ---------- dict ----------
Value DictItems(Heap& heap, const Value& self, List&, Kwargs&) {
  List items;
  for (const auto& [k, v] : *self.dict()) {
    items.push_back(heap.MakeTuple({heap.MakeString(k), v}));
  }
  return heap.MakeList(std::move(items));
}

Value DictKeys(Heap& heap, const Value& self, List&, Kwargs&) {
  List items;
  for (const auto& [k, v] : *self.dict()) items.push_back(heap.MakeString(k));
  return heap.MakeList(std::move(items));
}

Value DictValues(Heap& heap, const Value& self, List&, Kwargs&) {
  List items;
  for (const auto& [k, v] : *self.dict()) items.push_back(v);
  return heap.MakeList(std::move(items));
}

Value DictGet(Heap&, const Value& self, List& args, Kwargs&) {
  const Value v = self.Get(args.at(0).Str());
  if (v.defined()) return v;
  return args.size() > 1 ? args[1] : Value::None();
}

// ---------- list ----------
Value ListAppend(Heap&, const Value& self, List& args, Kwargs&) {
  self.list()->push_back(args.at(0));
  return Value::None();
}

Value ListPop(Heap&, const Value& self, List& args, Kwargs&) {
  List& items = *self.list();
  if (items.empty()) Fail("pop from empty list");
  const int64_t i = args.empty() ? static_cast<int64_t>(items.size()) - 1
                                 : NormalizeIndex(args[0].integer, items.size());
  Value v = items.at(i);
  items.erase(items.begin() + i);
  return v;
}

Value ListIndex(Heap&, const Value& self, List& args, Kwargs&) {
  const List& items = *self.list();
  for (size_t i = 0; i < items.size(); ++i) {
    if (Equal(items[i], args.at(0))) return Value::Int(static_cast<int64_t>(i));
  }
  Fail("value is not in list");
}

Value ListCount(Heap&, const Value& self, List& args, Kwargs&) {
  const List& items = *self.list();
  return Value::Int(std::count_if(items.begin(), items.end(),
                                  [&](const Value& v) { return Equal(v, args.at(0)); }));
}

struct Method {
  std::string_view name;
  MethodFn on_str = nullptr;
  MethodFn on_dict = nullptr;
  MethodFn on_list = nullptr;
  bool mutates = false;
};

constexpr Method kMethods[] = {
    {"strip", StrStrip<true, true>},
    {"lstrip", StrStrip<true, false>},
    {"rstrip", StrStrip<false, true>},
    {"split", StrSplit<false>},
    {"rsplit", StrSplit<true>},
    {"startswith", StrAffix<true>},
    {"endswith", StrAffix<false>},
    {"upper", StrCase<true>},
    {"lower", StrCase<false>},
    {"capitalize", StrCapitalize},
    {"title", StrTitle},
    {"replace", StrReplace},
    {"find", StrFind},
    {"count", StrCount, nullptr, ListCount},
    {"join", StrJoin},
    {"format", StrFormat},
    {"isdigit", StrIs<CharClass::kDigit>},
    {"isalpha", StrIs<CharClass::kAlpha>},
    {"isalnum", StrIs<CharClass::kAlnum>},
    {"isspace", StrIs<CharClass::kSpace>},
    {"islower", StrIsCase<false>},
    {"isupper", StrIsCase<true>},
    {"swapcase", StrSwapCase},
    {"center", StrJustify<Justify::kCenter>},
    {"ljust", StrJustify<Justify::kLeft>},
    {"rjust", StrJustify<Justify::kRight>},
    {"zfill", StrJustify<Justify::kZero>},
    {"partition", StrPartition<false>},
    {"rpartition", StrPartition<true>},
    {"items", nullptr, DictItems},
    {"keys", nullptr, DictKeys},
    {"values", nullptr, DictValues},
    {"get", nullptr, DictGet},
    {"append", nullptr, nullptr, ListAppend, true},
    {"pop", nullptr, nullptr, ListPop, true},
    {"index", nullptr, nullptr, ListIndex},
};

}  // namespace

int MethodId(std::string_view name) { return IndexByName(kMethods, name); }

MethodFn MethodFor(int id, const Value& self) {
  if (id < 0) return nullptr;
  switch (self.kind) {
    case K::kString:
      return kMethods[id].on_str;
    case K::kDict:
      return kMethods[id].on_dict;
    case K::kList:
      return kMethods[id].on_list;
    default:
      return nullptr;
  }
}

bool MethodMutates(int id) { return id >= 0 && kMethods[id].mutates; }

void FailNoMethod(const Value& self, std::string_view name) {
  // Jinja2's wording for a missing attribute (its undefined-attribute error).
  Fail(fmt::format("'{}' has no attribute '{}'", ObjectTypeRepr(self), name));
}

}  // namespace kvgate::chat
