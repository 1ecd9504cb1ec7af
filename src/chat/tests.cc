// Jinja2's tests (`x is string`, `x is divisibleby 3`, ...) on values. `defined` and
// `undefined` on a template expression are answered by the renderer, which can tell an
// undefined attribute chain from an error; here they test a value.
#include <fmt/format.h>

#include <iterator>

#include "chat/builtins.h"

namespace kvgate::chat {
namespace {

using K = Value::Kind;

template <K kKind>
bool IsKind(const Value& v, const List&) {
  return v.kind == kKind;
}

bool IsDefined(const Value& v, const List&) { return v.defined(); }
bool IsUndefined(const Value& v, const List&) { return !v.defined(); }
// Jinja2's Undefined iterates (as empty) and has a length, so it is iterable and a sequence.
bool IsIterable(const Value& v, const List&) {
  return v.kind == K::kList || v.kind == K::kDict || v.kind == K::kString || !v.defined();
}
bool IsNumber(const Value& v, const List&) {
  return v.kind == K::kInt || v.kind == K::kFloat || v.kind == K::kBool;
}
template <bool kValue>
bool IsBool(const Value& v, const List&) {
  return v.kind == K::kBool && v.boolean == kValue;
}
bool IsEqual(const Value& v, const List& args) { return !args.empty() && Equal(v, args[0]); }
bool IsNotEqual(const Value& v, const List& args) { return args.empty() || !Equal(v, args[0]); }
template <int kRemainder>
bool IsParity(const Value& v, const List&) {
  return v.kind == K::kInt && (v.integer % 2 != 0) == (kRemainder != 0);
}
bool IsDivisibleBy(const Value& v, const List& args) {
  return !args.empty() && args[0].integer != 0 && v.integer % args[0].integer == 0;
}
template <bool kUpper>
bool IsCase(const Value& v, const List&) {
  return v.is_string() && MapCase(v.text, kUpper) == v.text;
}
bool IsIn(const Value& v, const List& args) { return !args.empty() && Contains(args[0], v); }
template <int kLow, int kHigh>  // Compare(v, arg) within [kLow, kHigh]
bool IsOrdered(const Value& v, const List& args) {
  const int c = Compare(v, args.at(0));
  return c >= kLow && c <= kHigh;
}

struct Test {
  std::string_view name;
  TestFn fn;
};

constexpr Test kTests[] = {
    {"defined", IsDefined},
    {"undefined", IsUndefined},
    {"none", IsKind<K::kNone>},
    {"string", IsKind<K::kString>},
    {"mapping", IsKind<K::kDict>},
    {"iterable", IsIterable},
    {"sequence", IsIterable},
    {"number", IsNumber},
    {"integer", IsKind<K::kInt>},
    {"float", IsKind<K::kFloat>},
    {"boolean", IsKind<K::kBool>},
    {"true", IsBool<true>},
    {"false", IsBool<false>},
    {"callable", IsKind<K::kCallable>},
    {"equalto", IsEqual},
    {"eq", IsEqual},
    {"==", IsEqual},
    {"sameas", IsEqual},
    {"ne", IsNotEqual},
    {"odd", IsParity<1>},
    {"even", IsParity<0>},
    {"divisibleby", IsDivisibleBy},
    {"lower", IsCase<false>},
    {"upper", IsCase<true>},
    {"in", IsIn},
    {"gt", IsOrdered<1, 1>},
    {"lt", IsOrdered<-1, -1>},
    {"ge", IsOrdered<0, 1>},
    {"le", IsOrdered<-1, 0>},
};

}  // namespace

int TestId(std::string_view name) { return IndexByName(kTests, name); }

TestFn TestById(int id) { return kTests[id].fn; }

bool ApplyTestByName(std::string_view name, const Value& subject, const List& args) {
  const int id = TestId(name);
  if (id < 0) Fail(fmt::format("no test named '{}'", name));
  return kTests[id].fn(subject, args);
}

}  // namespace kvgate::chat
