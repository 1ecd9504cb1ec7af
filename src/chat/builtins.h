// The builtin library templates call: filters (`x | tojson`), tests (`x is defined`),
// methods of str, dict and list (`s.strip()`), and globals (`range`, `namespace`,
// `raise_exception`, `strftime_now`). Each kind is a table; the parser numbers the names a
// template uses (Node::builtin), so rendering indexes the table instead of comparing names.
#pragma once

#include <string_view>

#include "chat/heap.h"
#include "chat/python_ops.h"
#include "chat/value.h"

namespace kvgate::chat {

using FilterFn = Value (*)(Heap& heap, Value input, List& args, Kwargs& kwargs);
using TestFn = bool (*)(const Value& subject, const List& args);
using MethodFn = Value (*)(Heap& heap, const Value& self, List& args, Kwargs& kwargs);
using GlobalFn = Value (*)(Heap& heap, List& args, Kwargs& kwargs);

// The index of the entry named `name` in one of the tables; -1 when none.
template <typename Entry, size_t N>
int IndexByName(const Entry (&table)[N], std::string_view name) {
  for (size_t i = 0; i < N; ++i) {
    if (table[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

// Ids are indexes into each table; -1: no builtin of that name.
int FilterId(std::string_view name);
int TestId(std::string_view name);
int MethodId(std::string_view name);
int GlobalId(std::string_view name);

FilterFn FilterById(int id);
TestFn TestById(int id);
GlobalFn GlobalById(int id);
// The method for `self`'s type; null when that type has no method of this name.
MethodFn MethodFor(int id, const Value& self);
// Whether the method can change its receiver (list.append, list.pop): values read earlier
// must then not be read in place.
bool MethodMutates(int id);

// By name, for filters and tests named by strings at render time (`map('upper')`,
// `select('defined')`); Fail()s for an unknown name with Jinja2's message.
Value ApplyFilterByName(Heap& heap, std::string_view name, Value input, List& args, Kwargs& kwargs);
bool ApplyTestByName(std::string_view name, const Value& subject, const List& args);
// The attribute error Jinja2 raises for a method a value does not have.
[[noreturn]] void FailNoMethod(const Value& self, std::string_view name);

}  // namespace kvgate::chat
