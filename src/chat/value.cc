#include "chat/value.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>

#include "chat/heap.h"

namespace kvgate::chat {
namespace {

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", d);  // shortest round-trip digits, like Python's repr
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

void JsonString(std::string_view s, std::string& out) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

std::string StringRepr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char c : s) {
    if (c == quote || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  out += quote;
  return out;
}

void ToJsonImpl(const Value& v, int indent, std::string_view item_sep, std::string_view key_sep,
                bool sort_keys, int depth, std::string& out) {
  if (depth == kMaxNesting) {
    throw NestingTooDeep{"maximum recursion depth exceeded while encoding a JSON object"};
  }
  auto newline = [&](int level) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent * level), ' ');
  };
  // With an indent, Python's item separator loses its trailing space at line ends.
  const std::string_view sep = indent >= 0 && item_sep == ", " ? "," : item_sep;
  switch (v.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      out += "null";
      break;
    case Value::Kind::kBool:
      out += v.boolean ? "true" : "false";
      break;
    case Value::Kind::kInt:
      out += std::to_string(v.integer);
      break;
    case Value::Kind::kFloat:
      out += std::isnan(v.number)   ? "NaN"
             : std::isinf(v.number) ? (v.number > 0 ? "Infinity" : "-Infinity")
                                    : FloatRepr(v.number);
      break;
    case Value::Kind::kString:
      JsonString(v.text, out);
      break;
    case Value::Kind::kList:
      if (v.list()->empty()) {
        out += "[]";
        break;
      }
      out += '[';
      for (size_t i = 0; i < v.list()->size(); ++i) {
        if (i) out += sep;
        newline(depth + 1);
        ToJsonImpl((*v.list())[i], indent, item_sep, key_sep, sort_keys, depth + 1, out);
      }
      newline(depth);
      out += ']';
      break;
    case Value::Kind::kDict: {
      if (v.dict()->empty()) {
        out += "{}";
        break;
      }
      std::vector<const std::pair<std::string_view, Value>*> items;
      for (const auto& kv : *v.dict()) items.push_back(&kv);
      if (sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      }
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += sep;
        newline(depth + 1);
        JsonString(items[i]->first, out);
        out += key_sep;
        ToJsonImpl(items[i]->second, indent, item_sep, key_sep, sort_keys, depth + 1, out);
      }
      newline(depth);
      out += '}';
      break;
    }
    case Value::Kind::kCallable:
      out += "null";
      break;
  }
}

}  // namespace

Value Value::FromJson(Heap& heap, const boost::json::value& j) {
  switch (j.kind()) {
    case boost::json::kind::null:
      return None();
    case boost::json::kind::bool_:
      return Bool(j.get_bool());
    case boost::json::kind::int64:
      return Int(j.get_int64());
    case boost::json::kind::uint64:
      return Int(static_cast<int64_t>(j.get_uint64()));
    case boost::json::kind::double_:
      return Float(j.get_double());
    case boost::json::kind::string:
      return StringView(j.get_string());
    case boost::json::kind::array: {
      List* items = heap.NewList(j.get_array().size());
      for (const auto& x : j.get_array()) items->push_back(FromJson(heap, x));
      return Of(items);
    }
    case boost::json::kind::object: {
      Dict* items = heap.NewDict(j.get_object().size());
      for (const auto& [k, x] : j.get_object()) items->emplace_back(k, FromJson(heap, x));
      return Of(items);
    }
  }
  return None();
}

bool Value::Truthy() const {
  switch (kind) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return boolean;
    case Kind::kInt:
      return integer != 0;
    case Kind::kFloat:
      return number != 0;
    case Kind::kString:
      return !text.empty();
    case Kind::kList:
      return !list()->empty();
    case Kind::kDict:
      return is_namespace || !dict()->empty();
    case Kind::kCallable:
      return true;
  }
  return false;
}

Value Value::Get(std::string_view key) const {
  if (kind != Kind::kDict) return Undefined();
  for (const auto& [k, v] : *dict()) {
    if (SameKey(k, key)) return v;
  }
  return Undefined();
}

void Value::Set(std::string_view key, Value v) {
  for (auto& [k, existing] : *dict()) {
    if (SameKey(k, key)) {
      existing = v;
      return;
    }
  }
  dict()->emplace_back(key, v);
}

std::string Value::Str() const {
  switch (kind) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return std::string(text);
    default:
      return Repr();
  }
}

std::string Value::Repr(int depth) const {
  if (depth == kMaxNesting) {
    throw NestingTooDeep{"maximum recursion depth exceeded while getting the repr of an object"};
  }
  switch (kind) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return boolean ? "True" : "False";
    case Kind::kInt:
      return std::to_string(integer);
    case Kind::kFloat:
      return FloatRepr(number);
    case Kind::kString:
      return StringRepr(text);
    case Kind::kList: {
      std::string out = is_tuple ? "(" : "[";
      for (size_t i = 0; i < list()->size(); ++i) {
        if (i) out += ", ";
        out += (*list())[i].Repr(depth + 1);
      }
      if (is_tuple) return out + (list()->size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case Kind::kDict: {
      if (is_namespace) return "<Namespace>";
      std::string out = "{";
      for (size_t i = 0; i < dict()->size(); ++i) {
        if (i) out += ", ";
        out += StringRepr((*dict())[i].first) + ": " + (*dict())[i].second.Repr(depth + 1);
      }
      return out + "}";
    }
    case Kind::kCallable:
      return "<function>";
  }
  return "";
}

std::string Value::ToJson(int indent, std::string_view item_sep, std::string_view key_sep,
                          bool sort_keys) const {
  std::string out;
  ToJsonImpl(*this, indent, item_sep, key_sep, sort_keys, 0, out);
  return out;
}

namespace {

bool EqualAt(const Value& a, const Value& b, int depth) {
  if (depth == kMaxNesting) throw NestingTooDeep{"maximum recursion depth exceeded in comparison"};
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.kind == K::kInt && b.kind == K::kInt) return a.integer == b.integer;
    return a.AsDouble() == b.AsDouble();
  }
  if ((a.kind == K::kBool && b.is_number()) || (b.kind == K::kBool && a.is_number())) {
    const double x = a.kind == K::kBool ? a.boolean : a.AsDouble();
    const double y = b.kind == K::kBool ? b.boolean : b.AsDouble();
    return x == y;
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kBool:
      return a.boolean == b.boolean;
    case K::kString:
      return a.text == b.text;
    case K::kList:
      if (a.list()->size() != b.list()->size()) return false;
      for (size_t i = 0; i < a.list()->size(); ++i) {
        if (!EqualAt((*a.list())[i], (*b.list())[i], depth + 1)) return false;
      }
      return true;
    case K::kDict:
      if (a.dict()->size() != b.dict()->size()) return false;
      for (const auto& [k, v] : *a.dict()) {
        if (!EqualAt(v, b.Get(k), depth + 1)) return false;
      }
      return true;
    default:
      return a.object == b.object;
  }
}

}  // namespace

bool Equal(const Value& a, const Value& b) { return EqualAt(a, b, 0); }

}  // namespace kvgate::chat
