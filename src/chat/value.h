// Values of the template language, with Python's semantics where Jinja2 inherits them:
// truthiness, equality, str() and repr() text, and JSON as transformers' `tojson` writes it.
// A Value is plain data: what it refers to (characters, lists, dicts, macros) lives in the
// request, the template or the render's Heap (heap.h), all of which outlive it.
#pragma once

#include <boost/json/fwd.hpp>
#include <cstdint>
#include <cstring>
#include <memory_resource>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvgate::chat {

struct Value;
class Heap;
// A list or dict a Value points to lives in a Heap and allocates from it (Heap::List,
// Heap::Dict); other Lists are ordinary temporaries.
using List = std::pmr::vector<Value>;
// Insertion-ordered, like Python's dict. Keys are views, like strings (see Value::text).
using Dict = std::pmr::vector<std::pair<std::string_view, Value>>;
struct Callable;

struct Value {
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kCallable
  };
  Kind kind = Kind::kUndefined;
  bool boolean = false;
  bool is_namespace = false;  // a namespace() object: a dict whose attributes can be set
  bool is_tuple = false;      // a list that prints as a Python tuple
  bool is_group = false;      // a groupby() pair: a tuple that answers .grouper and .list
  int64_t integer = 0;
  double number = 0;
  // kString: the characters, immutable as Python's, viewed in the request, the template or
  // the render's heap; copying a string value never copies its characters.
  std::string_view text;
  // What a kList, kDict or kCallable value refers to, in the render's heap. Shared: Python
  // lists and dicts alias.
  void* object = nullptr;
  List* list() const { return static_cast<List*>(object); }
  Dict* dict() const { return static_cast<Dict*>(object); }
  Callable* callable() const { return static_cast<Callable*>(object); }

  static Value Undefined() { return {}; }
  static Value None() { return Of(Kind::kNone); }
  static Value Bool(bool b) {
    Value v = Of(Kind::kBool);
    v.boolean = b;
    return v;
  }
  static Value Int(int64_t i) {
    Value v = Of(Kind::kInt);
    v.integer = i;
    return v;
  }
  static Value Float(double d) {
    Value v = Of(Kind::kFloat);
    v.number = d;
    return v;
  }
  // A string whose characters `s` must outlive the value and its copies (Heap::String
  // copies them into the heap).
  static Value StringView(std::string_view s) {
    Value v = Of(Kind::kString);
    v.text = s;
    return v;
  }
  static Value Of(List* items) {
    Value v = Of(Kind::kList);
    v.object = items;
    return v;
  }
  static Value Of(Dict* items) {
    Value v = Of(Kind::kDict);
    v.object = items;
    return v;
  }
  static Value Of(Callable* c) {
    Value v = Of(Kind::kCallable);
    v.object = c;
    return v;
  }
  // Strings and keys are viewed, not copied: `j` must outlive the value and its copies.
  static Value FromJson(Heap& heap, const boost::json::value& j);

  bool defined() const { return kind != Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat; }
  double AsDouble() const { return kind == Kind::kInt ? static_cast<double>(integer) : number; }

  bool Truthy() const;
  // Dict lookup; Undefined when absent.
  Value Get(std::string_view key) const;
  // `key` must outlive the dict (a view into the request, the template or the heap).
  void Set(std::string_view key, Value v);

  std::string Str() const;                // Python str()
  std::string Repr(int depth = 0) const;  // Python repr()
  // json.dumps(self, ensure_ascii=False, indent=indent, separators, sort_keys).
  std::string ToJson(int indent, std::string_view item_sep, std::string_view key_sep,
                     bool sort_keys) const;

 private:
  static Value Of(Kind k) {
    Value v;
    v.kind = k;
    return v;
  }
};

bool Equal(const Value& a, const Value& b);

// Thrown by Repr, ToJson and Equal for a value nested deeper than Python's recursion limit
// lets it go (a template can build one in a loop); the message is Python's.
struct NestingTooDeep {
  const char* message;
};
inline constexpr int kMaxNesting = 1000;

// Key comparison for dict lookups. Keys are short ("role", "content"): two overlapping
// word loads compare 4 to 16 bytes inline, cheaper than a call to memcmp per candidate.
inline bool SameKey(std::string_view a, std::string_view b) {
  const size_t n = a.size();
  if (n != b.size()) return false;
  auto load = [](const char* p, auto word) {
    std::memcpy(&word, p, sizeof word);
    return word;
  };
  if (n >= 8 && n <= 16) {
    return load(a.data(), uint64_t{}) == load(b.data(), uint64_t{}) &&
           load(a.data() + n - 8, uint64_t{}) == load(b.data() + n - 8, uint64_t{});
  }
  if (n >= 4 && n < 8) {
    return load(a.data(), uint32_t{}) == load(b.data(), uint32_t{}) &&
           load(a.data() + n - 4, uint32_t{}) == load(b.data() + n - 4, uint32_t{});
  }
  return a == b;
}

}  // namespace kvgate::chat
