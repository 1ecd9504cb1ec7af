// The global functions templates call: Jinja2's `range`, `namespace` and `dict`, and the
// two transformers adds, `raise_exception` and `strftime_now`.
#include <fmt/format.h>

#include <ctime>
#include <iterator>

#include "chat/builtins.h"

namespace kvgate::chat {
namespace {

Value RaiseException(Heap&, List& args, Kwargs&) { Fail(args.empty() ? "" : args[0].Str()); }

Value Range(Heap& heap, List& args, Kwargs&) {
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
  List* items = heap.NewList(static_cast<size_t>(length));
  for (int64_t i = 0; i < length; ++i) items->push_back(Value::Int(start + i * step));
  return Value::Of(items);
}

// namespace(...) and dict(...): a dict of the dict arguments' items and the keywords; a
// namespace's attributes can be set with `{% set ns.x = ... %}`.
template <bool kNamespace>
Value MakeDict(Heap& heap, List& args, Kwargs& kwargs) {
  Value d = heap.MakeDict();
  d.is_namespace = kNamespace;
  for (const Value& a : args) {
    if (a.kind == Value::Kind::kDict) {
      for (const auto& [k, v] : *a.dict()) d.Set(k, v);
    }
  }
  for (auto& [k, v] : kwargs) d.Set(k, v);
  return d;
}

Value StrftimeNow(Heap& heap, List& args, Kwargs&) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[256];
  const size_t n = std::strftime(buf, sizeof buf, args.empty() ? "" : args[0].Str().c_str(), &tm);
  return heap.MakeString({buf, n});
}

struct Global {
  std::string_view name;
  GlobalFn fn;
};

constexpr Global kGlobals[] = {
    {"raise_exception", RaiseException}, {"range", Range},
    {"namespace", MakeDict<true>},       {"dict", MakeDict<false>},
    {"strftime_now", StrftimeNow},
};

}  // namespace

int GlobalId(std::string_view name) { return IndexByName(kGlobals, name); }

GlobalFn GlobalById(int id) { return kGlobals[id].fn; }

}  // namespace kvgate::chat
